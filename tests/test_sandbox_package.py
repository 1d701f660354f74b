"""The attnlab a chapter's grading sandbox may import: the earlier chapters' export cells, assembled (not whole
modules, which may grow over several chapters), and not one line of the chapter itself or of a later one."""
from __future__ import annotations

import functools

import pytest

from autograde.grading import Course
from coursekit.exporting import defined_names
from coursekit.sync import chapter_notebooks, chapter_number, name_chapters, reference_package
from tests.submissions import answer_lines

CHAPTERS = [nb.parent.name for nb in chapter_notebooks()]


def _package(assignment: str, tmp_path) -> dict[str, str]:
    course = Course(assignment, tmp_path / "workspace")
    course._earlier_chapters_package()
    return {str(p.relative_to(course.package)): p.read_text() for p in course.package.rglob("*.py")}


@functools.cache      # assembling the package takes a fraction of a second, and a test asks for each name it checks
def _modules() -> frozenset[str]:
    """Every module of the reference attnlab, dotted."""
    return frozenset(rel[: -len(".py")].replace("/", ".") for rel in reference_package())


def _defined(modules: dict[str, str]) -> set[str]:
    """attnlab.<module>.<name> of every function, class and variable the modules define."""
    return {f"{rel[: -len('.py')].replace('/', '.')}.{name}" for rel, text in modules.items()
            for name in defined_names(text)}


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_the_sandbox_holds_no_line_of_its_chapter_or_later(assignment, tmp_path):
    modules = _package(assignment, tmp_path)
    answers = {line: later for later in CHAPTERS if later >= assignment for line in answer_lines(later)}
    assert answers
    leaks = [f"{rel}: {line!r} (from {answers[line]})" for rel, text in modules.items() for line in answers if line in text]
    assert not leaks, "the grading sandbox holds answers:\n" + "\n".join(leaks[:10])


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_the_sandbox_holds_exactly_what_the_earlier_chapters_define(assignment, tmp_path):
    """Function by function: a module that a later chapter grows is in the sandbox with its earlier part only."""
    chapter = chapter_number(assignment)
    defined = _defined(_package(assignment, tmp_path))
    functions = {name: c for name, c in name_chapters().items() if name not in _modules()}
    expected = {name for name, c in functions.items() if c < chapter}
    assert defined & set(functions) == expected, (sorted(expected - defined), sorted(defined & set(functions) - expected))


def test_some_module_grows_over_two_chapters():
    """The mechanism above is exercised: chapter 2 writes the masks, chapter 5 adds to the same module."""
    chapters = name_chapters()
    writers = {}
    for name, c in chapters.items():
        if name not in _modules():
            writers.setdefault(name.rsplit(".", 1)[0], set()).add(c)
    assert writers["attnlab.layers.masks"] == {2, 5}, writers["attnlab.layers.masks"]


def test_the_leak_check_finds_a_later_chapters_cell_put_into_the_sandbox(tmp_path):
    """The checks above can fail: chapter 5's part of masks.py, put into chapter 5's sandbox, is found by both."""
    course = Course("ch05_decoding", tmp_path / "workspace")
    course._earlier_chapters_package()
    (course.package / "attnlab" / "layers" / "masks.py").write_text(reference_package()["attnlab/layers/masks.py"])
    modules = {str(p.relative_to(course.package)): p.read_text() for p in course.package.rglob("*.py")}
    assert any(line in modules["attnlab/layers/masks.py"] for line in answer_lines("ch05_decoding"))
    assert "attnlab.layers.masks.causal_mask_with_past" in _defined(modules)
