"""What makes an exercise notebook the release: the parts `make sync` writes, and none of what Jupyter adds.

Opening a notebook in JupyterLab and saving it, even with no edit, rewrites its metadata (the kernel's
`language_info`, cell ids, execution counts, outputs, per-cell UI state). Those changes are not drift:
comparisons of a release with what `make sync` would write go through `release_view`.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

# Per-cell metadata that belongs to the release: nbgrader's marks and the locks it sets on test cells.
RELEASE_CELL_METADATA = ("nbgrader", "deletable", "editable")


def release_view(nb: nbformat.NotebookNode) -> dict:
    """The content of a release notebook that `make sync` determines, as a plain comparable value."""
    cells = []
    for cell in nb.cells:
        meta = {key: cell.metadata[key] for key in RELEASE_CELL_METADATA if key in cell.metadata}
        cells.append({"cell_type": cell.cell_type, "source": cell.source, "metadata": meta})
    kernel = nb.metadata.get("kernelspec", {}).get("name")
    return {"nbformat": nb.nbformat, "kernel": kernel, "cells": cells}


def read_view(path: Path) -> dict | None:
    """release_view of the notebook at `path`; None when it is not a readable notebook."""
    try:
        return release_view(nbformat.read(path, as_version=4))
    except Exception:  # noqa: BLE001 - nbformat raises several unrelated types for a broken file
        return None


def same_release(a: bytes, b: bytes) -> bool:
    """True when two notebook files differ at most in what Jupyter adds when it opens and saves them."""
    if a == b:
        return True
    try:
        return release_view(nbformat.reads(a.decode(), as_version=4)) == release_view(nbformat.reads(b.decode(), as_version=4))
    except Exception:  # noqa: BLE001
        return False


def changed_cells(a: bytes, b: bytes) -> list[str]:
    """The grade ids (or positions) of the cells whose release content differs between two notebooks."""
    try:
        va = release_view(nbformat.reads(a.decode(), as_version=4))
        vb = release_view(nbformat.reads(b.decode(), as_version=4))
    except Exception:  # noqa: BLE001
        return ["the whole file (not a readable notebook)"]
    names = []
    for index in range(max(len(va["cells"]), len(vb["cells"]))):
        ca = va["cells"][index] if index < len(va["cells"]) else None
        cb = vb["cells"][index] if index < len(vb["cells"]) else None
        if ca != cb:
            cell = ca or cb
            names.append(cell["metadata"].get("nbgrader", {}).get("grade_id", f"cell {index + 1}"))
    return names


def _learner_view(nb: nbformat.NotebookNode) -> tuple[dict[str, str], list[str]]:
    """What a learner can change in a release: the solution cells' code, and cells of their own."""
    solutions, own = {}, []
    for cell in nb.cells:
        grading = cell.metadata.get("nbgrader", {})
        if grading.get("solution"):
            solutions[grading.get("grade_id", "")] = cell.source
        elif not grading and cell.source.strip():
            own.append(cell.source)
    return solutions, own


def same_answers_and_cells(a: bytes, b: bytes) -> bool:
    """True when notebook `a` holds the solution cells of `b` and no cell whose id `b` lacks: for the Chinese
    release, whose prose cells change with every translation (`make sync`), so that only answers and added
    cells count as a learner's."""
    try:
        na, nb_ = nbformat.reads(a.decode(), as_version=4), nbformat.reads(b.decode(), as_version=4)
    except Exception:  # noqa: BLE001
        return False
    ids = {cell.get("id") for cell in nb_.cells}
    return _learner_view(na)[0] == _learner_view(nb_)[0] and all(cell.get("id") in ids for cell in na.cells)


def same_learner_content(a: bytes, b: bytes) -> bool:
    """True when two notebooks hold the same solution cells and the same cells of the student's own: a test
    cell or a prose cell that differs is the instructor's change, never a learner's work."""
    try:
        return _learner_view(nbformat.reads(a.decode(), as_version=4)) == \
            _learner_view(nbformat.reads(b.decode(), as_version=4))
    except Exception:  # noqa: BLE001
        return False
