"""`make check NB=ch01`: run your notebook in work/ from the top, in a fresh kernel, as the grader will.

    python -m coursekit.check ch01            (or a chapter's folder name, or a path to a notebook)

This is JupyterLab's "Restart Kernel and Run All Cells" from a terminal: the kernel starts in the notebook's own
folder and runs every cell in order. Your notebook is not changed (the run works on a copy in memory). It prints
each graded test cell, passed or failed with the whole of its message (numpy's and torch's included), and "not
written yet" where the test calls an exercise that still raises NotImplementedError; it exits with 1 when a test
cell failed. The hidden tests run only when your notebook is graded.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from coursekit.layout import REPO_ROOT
from coursekit.workspace import WORK

PASSED = "visible checks passed"
NOT_WRITTEN = "not written yet"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def trouble_of(error: dict) -> str:
    """A test cell's error output -> what make check says of it: the exception's whole message, or "not written
    yet (...)" for NotImplementedError, naming the unwritten function where the traceback shows it."""
    if error.get("ename") == "NotImplementedError":
        frames = re.findall(r"\bin (\w+)\(", ANSI.sub("", "\n".join(error.get("traceback", []))))
        where = f"{frames[-1]} still raises NotImplementedError" if frames else "an exercise it calls still raises " \
            "NotImplementedError"
        return f"{NOT_WRITTEN} ({where}: write it, and delete the raise line)"
    # numpy's assert_allclose starts its message with a newline: the whole message, not its first line
    lines = [line.rstrip() for line in f"{error.get('ename', 'Error')}: {error.get('evalue', '')}".splitlines()]
    return "\n".join(line for line in lines if line)


def find_notebook(name: str, work: Path) -> Path:
    """'ch01', 'ch01_qkv_softmax' or a path -> the notebook; SystemExit naming what exists otherwise."""
    path = Path(name)
    if path.suffix == ".ipynb":
        if not path.is_file():
            raise SystemExit(f"no notebook at {path}")
        return path
    found = sorted(work.glob(f"{name}*/{name}*.ipynb")) if name else []
    found = [nb for nb in found if nb.parent.name == nb.stem and ".before-refresh" not in nb.name]
    if len(found) != 1:
        chapters = sorted(nb.parent.name for nb in work.glob("ch[0-9][0-9]_*/ch[0-9][0-9]_*.ipynb"))
        raise SystemExit(f"NB={name!r} names {'no' if not found else 'more than one'} notebook in {work}/: "
                         f"give a chapter, such as NB=ch01, of {', '.join(chapters) or '(none yet: run make lab)'}")
    return found[0]


def run(notebook: Path, timeout: int = 600) -> list[tuple[str, str | None]]:
    """Every cell run in order in a fresh python3 kernel started in the notebook's folder; returns
    (test cell's grade_id, None if it passed else its trouble: trouble_of's text) for each graded test cell."""
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, timeout=timeout, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(notebook.parent.resolve())}}).execute()
    results = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not isinstance(meta, dict) or not meta.get("grade"):
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        if errors:
            results.append((meta.get("grade_id", "?"), trouble_of(errors[0])))
        elif PASSED not in text:
            results.append((meta.get("grade_id", "?"), "the cell ran but did not say that its visible checks passed"))
        else:
            results.append((meta.get("grade_id", "?"), None))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", help="ch01, ch01_qkv_softmax, or a path to a notebook")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / WORK, help="where your notebooks are (work/)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one cell may run (default 600)")
    args = parser.parse_args(argv)
    notebook = find_notebook(args.notebook, args.work)
    print(f"running {notebook} from the top in a fresh kernel (your file is not changed)...", flush=True)
    results = run(notebook, args.timeout)
    for grade_id, trouble in results:
        first, *more = (trouble or "").splitlines() or [""]
        print(f"  {'passed' if trouble is None else 'FAILED'}  {grade_id}" + ("" if trouble is None else f": {first}"))
        for line in more:                       # the rest of the message, under its test
            print(f"          {line}")
    failed = sum(trouble is not None for _, trouble in results)
    unwritten = sum(trouble is not None and trouble.startswith(NOT_WRITTEN) for _, trouble in results)
    print(f"{len(results) - failed} of {len(results)} test cells passed their visible checks"
          + (f"; {unwritten} wait for exercises not written yet" if unwritten else "")
          + ". Hidden tests run when your notebook is graded.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
