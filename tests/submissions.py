"""Build student submissions for grading tests: the released notebook with chosen solution cells filled in."""
from __future__ import annotations

import tomllib
from pathlib import Path

import nbformat

from coursekit.exporting import SOLUTION_MARKER

from coursekit.layout import REPO_ROOT as REPO

KNOWN_WRONG = REPO / "tests" / "known_wrong"


def solution_code(assignment: str) -> dict[str, str]:
    """{grade_id: the reference code a student would type, markers removed} of every solution cell."""
    nb = nbformat.read(REPO / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: "\n".join(line for line in c.source.splitlines()
                                                          if not SOLUTION_MARKER.match(line))
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}


def released(assignment: str, folder: str = "exercises") -> nbformat.NotebookNode:
    """The release notebook; folder="exercises-zh" for its Chinese edition."""
    return nbformat.read(REPO / folder / assignment / f"{assignment}.ipynb", as_version=4)


def submission(assignment: str, replace: dict[str, str] | None = None, complete: bool = True,
               folder: str = "exercises") -> nbformat.NotebookNode:
    """The released notebook, its solution cells filled with the reference (if complete), then `replace` applied."""
    nb = released(assignment, folder)
    code = solution_code(assignment) if complete else {}
    code.update(replace or {})
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in code:
            cell.source = code[gid]
    return nb


class KnownWrongError(ValueError):
    """A known-wrong entry does not apply to the current solution: fix the entry, not the solution."""


def known_wrong(assignment: str) -> list[dict]:
    """The known-wrong implementations of an assignment (tests/known_wrong/<assignment>.toml), each with the
    cells it must lose points in and its code: the reference solution of its cell with its edits applied.
    Each is graded with the real CLI (tests/test_grading.py).

    Each edit replaces `old` by `new`, and `old` must occur exactly once in the cell, so that an edit that no
    longer fits the solution (the solution changed) fails here, by name, instead of testing something else.
    """
    return _read(KNOWN_WRONG / f"{assignment}.toml", assignment)


def message_wrongs(assignment: str) -> list[dict]:
    """One mistake for each message of the release's visible checks that names a mistake
    (tests/known_wrong/messages/<assignment>.toml), written as known_wrong's are. Each is run against the
    visible checks only, in-process (tests/test_visible_messages.py), and must make its check print `says`."""
    return _read(KNOWN_WRONG / "messages" / f"{assignment}.toml", assignment)


def plain_messages(assignment: str) -> dict[str, str]:
    """{text of a visible message: why no mistake needs to show it}: messages that state only what was expected
    and what came (a shape, a dtype, a count), listed at the top of messages/<assignment>.toml as `plain`."""
    path = KNOWN_WRONG / "messages" / f"{assignment}.toml"
    return tomllib.loads(path.read_text(encoding="utf-8")).get("plain", {}) if path.is_file() else {}


def _read(path: Path, assignment: str) -> list[dict]:
    if not path.is_file():
        return []
    solutions = solution_code(assignment)
    found = []
    for name, entry in tomllib.loads(path.read_text(encoding="utf-8")).items():
        if name == "plain":
            continue
        if entry.get("cell") not in solutions:
            raise KnownWrongError(f"{path.name} [{name}]: cell {entry.get('cell')!r} is not a solution cell of "
                                  f"{assignment} (they are {', '.join(solutions)})")
        code = solutions[entry["cell"]]
        for number, edit in enumerate(entry.get("edit", []), 1):
            count = code.count(edit["old"])
            if count != 1:
                raise KnownWrongError(f"{path.name} [{name}], edit {number}: its `old` text occurs {count} times in "
                                      f"the solution of cell {entry['cell']!r}, not once:\n{edit['old']}")
            code = code.replace(edit["old"], edit["new"])
        if code == solutions[entry["cell"]]:
            raise KnownWrongError(f"{path.name} [{name}]: no edit, so it is the solution itself")
        # says: text the feedback of the first cell in `loses` must show (the mistake named for the student);
        # demo: why the chapter's closing demo cannot show this mistake (tests/test_closing_demos.py), if it cannot;
        # demo_says: text the closing demo's error must show for it (the function that raised, named for the student)
        found.append({"name": name, "cell": entry["cell"], "loses": list(entry["loses"]), "why": entry["why"],
                      "says": entry.get("says", ""), "demo": entry.get("demo", ""),
                      "demo_says": entry.get("demo_says", ""), "code": code.strip() + "\n"})
    return found


def write(nb: nbformat.NotebookNode, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


MIN_ANSWER_CHARS = 20     # shorter lines (`return out`) are too common to mean anything


def answer_lines(assignment: str) -> set[str]:
    """Lines of the chapter's solution code and hidden tests that neither its release nor an earlier chapter
    contains: what must never reach a student before the chapter is graded. (A line an earlier chapter already
    wrote, such as chapter 5's pre-norm residual that chapter 7's block repeats, gives nothing away.)"""
    source = nbformat.read(REPO / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    released_lines = {line.strip() for cell in released(assignment).cells for line in cell.source.splitlines()}
    for earlier in sorted((REPO / "solutions").glob("ch[0-9][0-9]_*")):
        if earlier.name < assignment:
            notebook = nbformat.read(earlier / f"{earlier.name}.ipynb", as_version=4)
            released_lines |= {line.strip() for cell in notebook.cells for line in cell.source.splitlines()}
    lines = set()
    for cell in source.cells:
        text = cell.source
        while "### BEGIN SOLUTION" in text:
            _, text = text.split("### BEGIN SOLUTION", 1)
            part, text = text.split("### END SOLUTION", 1)
            lines |= {line.strip() for line in part.splitlines()}
        if "### BEGIN HIDDEN TESTS" in cell.source:
            lines |= {line.strip() for line in
                      cell.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0].splitlines()}
    return {line for line in lines - released_lines if len(line) >= MIN_ANSWER_CHARS and not SOLUTION_MARKER.match(line)}
