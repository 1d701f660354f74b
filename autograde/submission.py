"""Read a submitted notebook and rebuild it against the released one.

A submission is trusted only for the code in its solution cells (and the cells the student added).
Every other cell comes from the release, so a deleted, edited, reordered or duplicated test cell, or
changed nbgrader metadata (points, grade_id, locked, checksum), cannot change a grade. nbgrader then
restores the hidden tests into the test cells from its gradebook.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

MAX_BYTES = 20 * 1024 * 1024


class SubmissionError(ValueError):
    """The file is not a gradable notebook; the message says why, for the student and instructor."""


@dataclass
class Rebuilt:
    notebook: nbformat.NotebookNode
    notes: list[str] = field(default_factory=list)  # what was repaired, shown in the results


def _nbgrader(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def read_submission(path: Path) -> nbformat.NotebookNode:
    """Parse `path` as a version-4 notebook or raise SubmissionError saying what is wrong."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SubmissionError(f"cannot read the file: {exc.strerror}") from exc
    if not raw.strip():
        raise SubmissionError("the file is empty; expected a Jupyter notebook (.ipynb)")
    if len(raw) > MAX_BYTES:
        raise SubmissionError(f"the file is {len(raw) / 2**20:.1f} MiB; a notebook of at most "
                              f"{MAX_BYTES // 2**20} MiB was expected (clear large outputs before submitting)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SubmissionError(f"the file is not UTF-8 text (bad byte at offset {exc.start}); "
                              "expected a Jupyter notebook saved by JupyterLab") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"the file is not valid notebook JSON (line {exc.lineno}, column {exc.colno}: "
                              f"{exc.msg}); was it edited outside JupyterLab?") from None
    if not isinstance(data, dict) or "cells" not in data or "nbformat" not in data:
        raise SubmissionError("the file is JSON but not a Jupyter notebook (no 'cells' or 'nbformat' key)")
    if data.get("nbformat") != 4:
        raise SubmissionError(f"the notebook has nbformat version {data.get('nbformat')!r}; version 4 "
                              "(what JupyterLab writes) was expected")
    try:
        notebook = nbformat.reads(text, as_version=4)
        nbformat.validate(notebook)
    except Exception as exc:  # nbformat raises several unrelated exception types
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SubmissionError(f"the notebook does not follow the nbformat 4 schema: {first_line}") from None
    return notebook


def rebuild(submitted: nbformat.NotebookNode, released: nbformat.NotebookNode, assignment: str) -> Rebuilt:
    """The released notebook with the student's solution cells, and the cells they added, put back in.

    Raises SubmissionError when the notebook shares no solution cell with the release (another
    assignment's notebook, or an unrelated file).
    """
    solution_ids = [_nbgrader(c)["grade_id"] for c in released.cells if _nbgrader(c).get("solution")]
    known_ids = {_nbgrader(c).get("grade_id") for c in released.cells if _nbgrader(c)}
    # Released cells without nbgrader metadata (the prose) are recognised by id or by content.
    released_prose = {c.get("id") for c in released.cells if not _nbgrader(c)}
    released_sources = {c.source for c in released.cells if not _nbgrader(c)}

    # Each cell of the submission either stands for a released cell (a solution by grade id, a read-only cell by
    # grade id, a prose cell by id or text) or is the student's own. The student's own cells are anchored to the
    # released cell they followed and put back right after it, each exactly once, in the student's order.
    anchor_of_gid = {_nbgrader(c).get("grade_id"): index for index, c in enumerate(released.cells) if _nbgrader(c)}
    prose_by_id = {c.get("id"): index for index, c in enumerate(released.cells) if not _nbgrader(c) and c.get("id")}
    prose_by_source: dict[str, list[int]] = {}
    for index, c in enumerate(released.cells):
        if not _nbgrader(c):
            prose_by_source.setdefault(c.source, []).append(index)

    student_solutions: dict[str, nbformat.NotebookNode] = {}
    added_after: dict[int | None, list] = {}   # index of the released cell they followed (None: the top) -> cells
    notes: list[str] = []
    anchor: int | None = None
    for number, cell in enumerate(submitted.cells, start=1):
        meta = _nbgrader(cell)
        gid = meta.get("grade_id")
        cell = _numbered(cell, number)
        if gid in solution_ids and cell.get("cell_type") == "code":
            if gid in student_solutions:
                # A copied cell (JupyterLab copies the metadata too): keep it, after the first, as the student
                # ran it; the later definition wins, as it did in their kernel.
                notes.append(f"solution cell '{gid}' appears more than once; every copy was kept, in order")
                added_after.setdefault(anchor, []).append(_as_added(cell))
            else:
                student_solutions[gid] = cell
                anchor = anchor_of_gid[gid]
        elif gid is not None and gid in known_ids:
            anchor = anchor_of_gid[gid]     # a released non-solution cell: the release's copy is used instead
        elif not meta and (cell.get("id") in released_prose or cell.get("source") in released_sources):
            anchor = _prose_anchor(cell, prose_by_id, prose_by_source, anchor)
        elif not meta and cell.get("cell_type") in ("code", "markdown"):
            # metadata.nbgrader that is not a mapping (a string, a list) is dropped with the rest: it grades nothing
            added_after.setdefault(anchor, []).append(_as_added(cell))
        elif cell.get("cell_type") == "raw":
            notes.append("a raw cell was ignored: raw cells are neither run nor graded")
        elif gid is None:
            notes.append(f"a {cell.get('cell_type', '')} cell with nbgrader metadata but no grade id was ignored "
                         "(was its metadata edited by hand?); its contents were not run")
        else:
            notes.append(f"a cell with unknown nbgrader id {gid!r} was ignored")

    if solution_ids and not student_solutions:
        raise SubmissionError(f"this notebook has none of the solution cells of assignment '{assignment}' "
                              f"({', '.join(solution_ids)}); is it the notebook of another assignment?")

    notebook = copy.deepcopy(released)
    cells = list(added_after.get(None, []))
    for index, cell in enumerate(notebook.cells):
        gid = _nbgrader(cell).get("grade_id")
        if gid in student_solutions:
            mine = student_solutions[gid]
            cell.source = _disarmed(mine.source if isinstance(mine.source, str) else "".join(mine.source), gid, notes)
            cell.metadata[ORIGIN] = mine.metadata[ORIGIN]
        elif gid in solution_ids:
            # Empty, not the release's stub: the student may have retyped the code in a cell of their own,
            # and a stub placed after it would replace their function by `raise NotImplementedError`.
            cell.source = ""
            notes.append(f"solution cell '{gid}' is missing from the submission; it was left empty")
        cells.append(cell)
        cells.extend(added_after.get(index, []))
    notebook.cells = cells
    for cells_added in added_after.values():
        for cell in cells_added:
            cell.source = _disarmed(cell.source if isinstance(cell.source, str) else "".join(cell.source),
                                    None, notes)
    seen_ids: set[str] = set()
    for index, cell in enumerate(notebook.cells):
        if cell.get("id") in seen_ids or not cell.get("id"):
            cell["id"] = f"added-{index}"
        seen_ids.add(cell["id"])
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None

    tampered = _tampering(submitted, released)
    notes.extend(tampered)
    return Rebuilt(notebook, notes)


def recheck_steps(notebook: nbformat.NotebookNode) -> int:
    """The most steps a re-check of the rebuilt `notebook` can have (autograde.recheck.recheck_wall_s): each code
    cell is either a cell the re-check runs or a test cell with at most one probe."""
    return sum(cell.cell_type == "code" for cell in notebook.cells)


# nbgrader's markers of a hidden-test region. In a student's own text (a note in a markdown cell, a comment)
# nbgrader would take one for a region to remove, and fail the whole submission on a marker without its pair.
HIDDEN_TEST_MARKERS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


# Where a rebuilt cell came from: {"cell": its number in the student's notebook, counted from 1}, so that feedback
# names a cell as the student sees it. Written by the grader, on the grader's copy: the sandbox sees only sources.
ORIGIN = "autograde"


def student_cell_number(cell) -> int | None:
    """The number of `cell` in the student's own notebook (from 1), or None for a cell of the release."""
    origin = cell.get("metadata", {}).get(ORIGIN, {})
    number = origin.get("cell") if isinstance(origin, dict) else None
    return number if isinstance(number, int) else None


def _numbered(cell, number: int) -> nbformat.NotebookNode:
    """A copy of the submitted `cell` that records its place in the student's notebook (any such record the
    student wrote is replaced)."""
    copy_ = copy.deepcopy(cell)
    copy_.setdefault("metadata", nbformat.NotebookNode())[ORIGIN] = nbformat.NotebookNode(cell=number)
    return copy_


def _prose_anchor(cell, by_id: dict[str, int], by_source: dict[str, list[int]], anchor: int | None) -> int | None:
    """The released prose cell that `cell` stands for: the one with its id, else the first with its text after the
    current anchor (prose can repeat, a heading such as "Done"), else the first with its text."""
    if cell.get("id") in by_id:
        return by_id[cell["id"]]
    candidates = by_source.get(cell.get("source"), [])
    later = [index for index in candidates if anchor is None or index > anchor]
    return (later or candidates or [anchor])[0]


def _disarmed(source: str, gid: str | None, notes: list[str]) -> str:
    """`source` with each hidden-test marker broken (BEGIN_HIDDEN TESTS), noted; the rest of the text unchanged."""
    if not any(marker in source for marker in HIDDEN_TEST_MARKERS):
        return source
    for marker in HIDDEN_TEST_MARKERS:
        source = source.replace(marker, marker.replace(" ", "_", 1))
    where = f"solution cell '{gid}'" if gid else "a cell you added"
    notes.append(f"{where} contains nbgrader's marker of hidden tests; the grader wrote it as BEGIN_HIDDEN TESTS "
                 "(or END_HIDDEN TESTS) so that it marks nothing")
    return source


def _as_added(cell) -> nbformat.NotebookNode:
    """A copy of `cell` without nbgrader metadata: graded as a cell the student added."""
    copy_ = copy.deepcopy(cell)
    copy_.metadata.pop("nbgrader", None)
    return copy_


def _tampering(submitted, released) -> list[str]:
    """Describe the changes to locked cells that rebuilding undid, for the instructor's information."""
    released_locked = {_nbgrader(c)["grade_id"]: c for c in released.cells
                       if _nbgrader(c) and not _nbgrader(c).get("solution")}
    seen: dict[str, int] = {}
    notes = []
    for cell in submitted.cells:
        gid = _nbgrader(cell).get("grade_id")
        if gid not in released_locked:
            continue
        seen[gid] = seen.get(gid, 0) + 1
        original = released_locked[gid]
        if cell.get("source") != original.source:
            notes.append(f"read-only cell '{gid}' was edited; the released version was graded")
        if _nbgrader(cell) != _nbgrader(original):
            notes.append(f"the nbgrader metadata of cell '{gid}' was changed; the released metadata was used")
    for gid in released_locked:
        if seen.get(gid, 0) == 0:
            notes.append(f"read-only cell '{gid}' was deleted; the released version was graded")
        elif seen[gid] > 1:
            notes.append(f"read-only cell '{gid}' appears {seen[gid]} times; it was graded once")
    order = [g for g in (_nbgrader(c).get("grade_id") for c in submitted.cells) if g in released_locked]
    expected = [g for g in (_nbgrader(c).get("grade_id") for c in released.cells) if g in released_locked]
    if len(order) == len(set(order)) and set(order) == set(expected) and order != expected:
        notes.append("read-only cells were reordered; the released order was graded")
    return notes
