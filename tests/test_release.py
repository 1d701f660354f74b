"""exercises/ holds the released notebooks and nothing of the solutions."""
import re

import nbformat
import pytest

from coursekit.exporting import SOLUTION_MARKER
from coursekit.sync import chapter_notebooks


def _solution_lines(notebook):
    """Substantial lines found only between the solution markers of a source notebook."""
    lines, elsewhere, inside = set(), set(), False
    for cell in nbformat.read(notebook, as_version=4).cells:
        for line in cell.source.splitlines():
            if SOLUTION_MARKER.match(line):
                inside = "BEGIN" in line
            elif inside and len(line.strip()) > 12 and not line.strip().startswith("#"):
                lines.add(line.strip())
            elif not inside:
                elsewhere.add(line.strip())
    return lines - elsewhere


def _hidden_test_lines(notebook):
    """Substantial lines found only between the hidden-test markers of a source notebook."""
    lines, elsewhere, inside = set(), set(), False
    for cell in nbformat.read(notebook, as_version=4).cells:
        for line in cell.source.splitlines():
            if "### BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "### END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) > 20:
                lines.add(line.strip())
            elif not inside:
                elsewhere.add(line.strip())
    return lines - elsewhere


@pytest.mark.parametrize("source", chapter_notebooks(), ids=lambda p: p.parent.name)
def test_release_has_no_solution_or_hidden_test(source, repo):
    release = repo / "exercises" / source.parent.name / source.name
    text = release.read_text()
    released_lines = {line.strip() for c in nbformat.read(release, as_version=4).cells for line in c.source.splitlines()}
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in text
    solution_lines = _solution_lines(source)
    assert solution_lines, "the source notebook has solution code"
    leaked = sorted(solution_lines & released_lines)
    assert not leaked, f"solution code in {release}: {leaked[:3]}"
    hidden = sorted(_hidden_test_lines(source) & released_lines)
    assert not hidden, f"hidden tests in {release}: {hidden[:3]}"


def test_exercises_folder_holds_only_release_notebooks_and_their_data(repo):
    files = [p for p in (repo / "exercises").rglob("*") if p.is_file()]
    notebooks = [p for p in files if p.suffix == ".ipynb"]
    assert notebooks
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{path} has outputs"
    for path in set(files) - set(notebooks):
        # a data file released with its notebook (chapter 6's checkpoint): the source folder's copy, unchanged
        source = repo / "solutions" / path.relative_to(repo / "exercises")
        assert source.is_file() and source.read_bytes() == path.read_bytes(), f"{path} is not a released data file"


@pytest.mark.parametrize("source", chapter_notebooks(), ids=lambda p: p.parent.name)
def test_source_notebooks_have_no_outputs_and_write_no_files(source):
    nb = nbformat.read(source, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{source}: outputs must be stripped"
            # %%writefile would leave a module next to the notebook, which nbgrader copies into the release.
            assert not re.match(r"\s*%%writefile", cell.source), f"{source}: use '#| export', not %%writefile"
    others = [p.name for p in source.parent.iterdir() if p != source]
    # Data files (chapter 6's checkpoint) are released with the notebook; code and other notebooks must not be.
    assert not [name for name in others if name.endswith((".py", ".ipynb"))], f"{source.parent}: {others}"


@pytest.mark.parametrize("source", chapter_notebooks(), ids=lambda p: p.parent.name)
def test_every_given_cell_of_an_exercise_is_locked(source):
    """A cell nbgrader tracks that is not an answer (a launcher, a test, the imports) is locked and read-only in
    JupyterLab: grading puts the course's version back, so an edit there would be thrown away without a word."""
    unlocked = [c.metadata["nbgrader"].get("grade_id") for c in nbformat.read(source, as_version=4).cells
                if c.cell_type == "code" and c.metadata.get("nbgrader") and not c.metadata["nbgrader"].get("solution")
                and not (c.metadata["nbgrader"].get("locked") and c.metadata.get("editable") is False)]
    assert not unlocked, f"{source.parent.name}: given cells a student could edit in vain: {unlocked}"
