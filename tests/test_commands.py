"""Every command the pages, the notebooks and the README tell a learner to run exists where the learner runs it:
each `make TARGET [VAR=value]` is a target of the Makefile there (`make -n` accepts it), each `python -m MODULE`
names a module found there. Checked in the full repository and in a student copy of the whole course."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coursekit.student_release import write_release
from tests.submissions import REPO

MAKE = re.compile(r"`(make(?: [A-Za-z_][\w-]*| [A-Z_]+=[^\s`]+)+)`")
PYTHON_M = re.compile(r"`python -m ([\w.]+)")


def _texts(root: Path) -> dict[str, str]:
    """Each page, README and released notebook's markdown, by path."""
    texts = {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in [*root.glob("book/*.md"), root / "README.md"]
             if p.is_file()}
    for nb in root.glob("exercises/ch*/*.ipynb"):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        texts[str(nb.relative_to(root))] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return texts


def _commands(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    makes, modules = {}, {}
    for where, text in _texts(root).items():
        for command in MAKE.findall(text):
            makes.setdefault(command, where)
        for module in PYTHON_M.findall(text):
            modules.setdefault(module.rstrip("."), where)
    return makes, modules


def _check(root: Path, skip: set[str] = frozenset()) -> list[str]:
    makes, modules = _commands(root)
    assert makes, f"no make command found in {root}: the pattern is wrong"
    problems = []
    for command, where in sorted(makes.items()):
        if command.split()[1] in skip:
            continue
        run = subprocess.run(["make", "-n", *command.split()[1:]], cwd=root, capture_output=True, text=True,
                             timeout=60)
        if run.returncode != 0:
            problems.append(f"{where}: `{command}` fails here: {run.stderr.strip()[-200:]}")
    env = {**os.environ, "PYTHONPATH": str(root)}
    for module, where in sorted(modules.items()):
        find = subprocess.run([sys.executable, "-P", "-c", f"import importlib.util, sys; "
                               f"sys.exit(importlib.util.find_spec({module!r}) is None)"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=120)
        if find.returncode != 0:
            problems.append(f"{where}: `python -m {module}`: no such module here {find.stderr.strip()[-200:]}")
    return problems


def test_every_command_named_in_the_course_exists_in_the_repository():
    problems = _check(REPO)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("upto", ["ch08", "ch10"])
def test_every_command_named_in_a_student_copy_exists_in_the_copy(tmp_path, upto):
    out = write_release(upto, tmp_path / "copy")
    problems = _check(out)
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_command_that_does_not_exist(tmp_path):
    out = write_release("ch03", tmp_path / "copy")
    readme = out / "README.md"
    readme.write_text(readme.read_text() + "\nThen run `make nonsense` and `python -m attnlab.nowhere`.\n")
    problems = _check(out)
    assert any("make nonsense" in p for p in problems) and any("attnlab.nowhere" in p for p in problems), problems
