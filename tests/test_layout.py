"""The repository's own packages depend on each other one way only, and one module owns the root.

attnlab (the course package) imports none of the others; coursekit (sync, export, lab, student copy) imports
attnlab at most; autograde builds on coursekit; tests and bench may use all of them, and bench uses the
tests' public helpers by their package names, never through a changed sys.path.
"""
from __future__ import annotations

import ast
import re

from coursekit.layout import REPO_ROOT

PACKAGES = ["attnlab", "coursekit", "autograde", "tests", "bench"]
ALLOWED = {"attnlab": set(), "coursekit": {"attnlab"}, "autograde": {"attnlab", "coursekit"},
           "tests": {"attnlab", "coursekit", "autograde"}, "bench": {"attnlab", "coursekit", "autograde", "tests"}}


def _python_files(package: str):
    return sorted((REPO_ROOT / package).rglob("*.py"))


def _imports(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_packages_import_each_other_one_way_only():
    wrong = [f"{path.relative_to(REPO_ROOT)} imports {other}" for package in PACKAGES for path in _python_files(package)
             for other in _imports(path) & set(PACKAGES) - {package} - ALLOWED[package]]
    assert not wrong, "\n".join(wrong)


def test_one_module_computes_the_repository_root():
    computing = [str(path.relative_to(REPO_ROOT)) for package in PACKAGES for path in _python_files(package)
                 if re.search(r"Path\(__file__\)\.resolve\(\)\.parents\[1\]", path.read_text(encoding="utf-8"))]
    assert computing == ["coursekit/layout.py"], computing


def test_nothing_changes_the_import_path():
    changing = [str(path.relative_to(REPO_ROOT)) for package in PACKAGES for path in _python_files(package)
                if re.search(r"sys\.path\.(insert|append)", path.read_text(encoding="utf-8"))]
    assert not changing, changing
