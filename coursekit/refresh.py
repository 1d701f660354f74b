"""Bring a learner's copy in work/ up to date with a changed release, keeping every answer.

    python -m coursekit.refresh [NOTEBOOK.ipynb ...]      (make refresh: every notebook in work/)

A release changes when the course does (a module moves, a test is fixed): the copy in work/ then holds old
given cells, which may import what no longer exists. This rebuilds each copy from its release: the release's
given cells (prose, given code, tests), the learner's own text in every answer cell (only its `#| export`
line follows the release), and every cell the learner added, in its place. The copy as it was is kept next
to it first (NAME.before-refresh-N.ipynb), and a copy whose cells already match is left alone.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import nbformat

from coursekit.exporting import EXPORT_MARKER
from coursekit.layout import CODE_STUB, REPO_ROOT
from coursekit.i18n.notebooks import LANGUAGE_KEY as LANGUAGE_METADATA
from coursekit.i18n.notebooks import notebook_language
from coursekit.workspace import RELEASES, WORK, course_language, record_release, remember_language


def _key(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _with_release_marker(answer: str, release_source: str) -> str:
    """The learner's answer, its export line replaced by the release's (the module may have moved)."""
    marker = next((line for line in release_source.splitlines() if EXPORT_MARKER.match(line.strip())), None)
    if marker is None:
        return answer
    lines = answer.splitlines()
    for i, line in enumerate(lines):
        if EXPORT_MARKER.match(line.strip()):
            lines[i] = marker
            return "\n".join(lines) + ("\n" if answer.endswith("\n") else "")
    return answer


def stale_given_lines(answer: str, release_source: str) -> list[str]:
    """Lines of code the release gives inside an answer cell (around its `# YOUR CODE HERE`) that the learner's
    answer lacks: the release changed them (a renamed attribute, say), and the answer still holds the old ones.
    The learner's text is never rewritten, so these are reported for the learner to copy in."""
    stub = {line.strip() for line in CODE_STUB.splitlines()}
    have = {line.strip() for line in answer.splitlines()}
    return [line for line in release_source.splitlines()
            if line.strip() and line.strip() not in stub and not EXPORT_MARKER.match(line.strip())
            and line.strip() not in have]


def refreshed(copy: nbformat.NotebookNode, release: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The release's cells, with the learner's answers and added cells from `copy`."""
    release_keys = {_key(c) for c in release.cells if _key(c)}
    release_ids = {c.get("id") for c in release.cells}
    release_sources = {c.source for c in release.cells}
    answers: dict[str, nbformat.NotebookNode] = {}
    # Cells of the learner's own stay, after the graded cell they followed: cells JupyterLab added (a new id, no
    # grade_id, a text the release does not have), a second copy of an answer (a copied cell keeps its grade_id),
    # and an answer whose exercise the release no longer has. The release's own cells are taken from it.
    added: dict[str | None, list] = {}
    anchor = None
    for cell in copy.cells:
        key = _key(cell)
        is_answer = bool(cell.metadata.get("nbgrader", {}).get("solution"))
        if key in release_keys and not (is_answer and key in answers):
            anchor = key
            if is_answer:
                answers[key] = cell
        elif (is_answer or not key) and cell.source.strip() and \
                (is_answer or (cell.get("id") not in release_ids and cell.source not in release_sources)):
            added.setdefault(anchor, []).append(cell)
    out = nbformat.v4.new_notebook(metadata=copy.metadata)
    # The copy now follows this release, in its language (a Chinese copy refreshed from the English release
    # becomes English).
    out.metadata.pop(LANGUAGE_METADATA, None)
    if LANGUAGE_METADATA in release.metadata:
        out.metadata[LANGUAGE_METADATA] = release.metadata[LANGUAGE_METADATA]
    out.cells = list(added.get(None, []))
    for cell in release.cells:
        key = _key(cell)
        new = nbformat.from_dict(cell)
        if key in answers:
            mine = answers[key]
            new.source = _with_release_marker(mine.source, cell.source)
            if new.cell_type == "code" and mine.cell_type == "code":
                new.outputs = mine.get("outputs", [])
                new.execution_count = mine.get("execution_count")
        out.cells.append(new)
        out.cells += added.get(key, []) if key else []
    return out


def refresh(path: Path, release_path: Path, work: Path | None = None, log=print) -> bool:
    """Refresh the copy at `path` from `release_path`; True when it changed (a backup is written first).
    With `work`, the copy is recorded as made from this release (make lab stops pointing the change out)."""
    copy = nbformat.read(path, as_version=4)
    release = nbformat.read(release_path, as_version=4)
    new = refreshed(copy, release)
    if work is not None:
        record_release(work, path, release_path)
    if [c.source for c in new.cells] == [c.source for c in copy.cells] and new.metadata == copy.metadata:
        return False
    stamp = 1
    while (backup := path.with_name(f"{path.stem}.before-refresh-{stamp}{path.suffix}")).exists():
        stamp += 1
    shutil.copy2(path, backup)
    nbformat.write(new, path)
    log(f"refreshed {path} from {release_path} (your answers are kept; the copy as it was is in {backup.name})")
    answers = {_key(c): c.source for c in reversed(new.cells) if c.metadata.get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        key = _key(cell)
        if cell.metadata.get("nbgrader", {}).get("solution") and key in answers:
            stale = stale_given_lines(answers[key], cell.source)
            if stale:
                shown = "\n".join(f"      {line.strip()}" for line in stale[:6])
                more = f"\n      ... and {len(stale) - 6} more" if len(stale) > 6 else ""
                log(f"  answer cell '{key}': the release changed the code it gives around your answer. Your cell "
                    f"lacks these lines of {release_path.name}; copy them in where they belong:\n{shown}{more}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="copies in work/ (default: every one)")
    parser.add_argument("--lang", default="", help="en or zh: switch the copies to this language's release "
                        "(default: each copy keeps its own language)")
    args = parser.parse_args(argv)
    switch_to = course_language(args.lang)
    work = REPO_ROOT / WORK
    notebooks = args.notebooks or sorted(p for p in work.glob("ch[0-9][0-9]_*/ch[0-9][0-9]_*.ipynb")
                                         if ".before-refresh-" not in p.name)
    changed = 0
    for path in notebooks:
        path = path.resolve()
        language = switch_to or notebook_language(json.loads(path.read_text(encoding="utf-8")))
        release = REPO_ROOT / RELEASES[language] / path.parent.name / f"{path.parent.name}.ipynb"
        if not release.is_file():
            print(f"{path}: no release {release.relative_to(REPO_ROOT)} to refresh it from", file=sys.stderr)
            return 1
        changed += refresh(path, release, work)
    if switch_to:
        remember_language(work, switch_to)  # the next `make lab` copies new chapters in this language
    print(f"{changed} of {len(notebooks)} notebook(s) refreshed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
