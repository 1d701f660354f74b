"""The Chinese exercise notebooks: the English release with its markdown cells translated, nothing else changed.

One catalog per notebook, locales/zh_CN/notebooks/<assignment>.po, with one message per markdown cell: msgctxt
is the cell's id and msgid its whole English source. Code, solution and test cells are copied byte for byte, and
every cell keeps its id, so the grader, which trusts only a submission's solution cells (by grade_id) and
recognises released prose by id, rebuilds a Chinese submission into exactly the English one: same score, same
feedback. `make sync` writes exercises-zh/ with `translate`; a markdown cell with no confirmed translation stays
English there (and the catalog test fails).
"""
from __future__ import annotations

import json
from pathlib import Path

from babel.messages.catalog import Catalog

from coursekit.i18n.po import NOTEBOOKS, merge, read_po, write_po
from coursekit.layout import REPO_ROOT as ROOT

ZH_EXERCISES = "exercises-zh"
LANGUAGE_KEY = "course"  # notebook metadata: {"course": {"language": "zh_CN"}}, read by `make refresh`


def markdown_messages(notebook: dict) -> list[tuple[str, str]]:
    """(cell id, source) of every markdown cell, in order."""
    found = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        if not cell.get("id"):
            raise ValueError(f"markdown cell {index} has no id: the catalog keys its translation by id")
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        found.append((cell["id"], source))
    return found


def template(notebook: dict) -> Catalog:
    catalog = Catalog(locale=None)
    for cell_id, source in markdown_messages(notebook):
        catalog.add(source, context=cell_id)
    return catalog


def catalog_path(assignment: str, root: Path = ROOT) -> Path:
    return root / NOTEBOOKS.relative_to(ROOT) / f"{assignment}.po"


def release_path(assignment: str, root: Path = ROOT) -> Path:
    return root / "exercises" / assignment / f"{assignment}.ipynb"


def update_catalogs(root: Path = ROOT) -> list[Path]:
    """Merge every release notebook's markdown cells into its catalog (a changed cell's message turns fuzzy)."""
    written = []
    for release in sorted((root / "exercises").glob("ch[0-9][0-9]_*/ch[0-9][0-9]_*.ipynb")):
        path = catalog_path(release.parent.name, root)
        notebook = json.loads(release.read_text(encoding="utf-8"))
        write_po(path, merge(template(notebook), read_po(path)))
        written.append(path)
    return written


def translations(assignment: str, root: Path = ROOT) -> dict[tuple[str, str], str]:
    """{(cell id, English source): Chinese source} of the confirmed (non-fuzzy, non-empty) messages."""
    return {(m.context, m.id): m.string for m in read_po(catalog_path(assignment, root))
            if m.id and m.string and not m.fuzzy}


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def translate(release: bytes, assignment: str, root: Path = ROOT) -> bytes:
    """The Chinese notebook of a release notebook (its bytes as `make sync` writes them)."""
    notebook = json.loads(release.decode("utf-8"))
    translated = translations(assignment, root)
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        chinese = translated.get((cell["id"], source))
        if chinese is not None:
            cell["source"] = _lines(chinese)
    notebook["metadata"][LANGUAGE_KEY] = {"language": "zh_CN"}
    return (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def notebook_language(notebook: dict) -> str:
    """'zh_CN' for a notebook of exercises-zh/ (or a learner's copy of one), else 'en'."""
    return notebook.get("metadata", {}).get(LANGUAGE_KEY, {}).get("language", "en")


def chinese_release(english: dict[str, bytes], root: Path = ROOT) -> dict[str, bytes]:
    """{exercises-zh/<a>/<file>: bytes} from {exercises/<a>/<file>: bytes}: notebooks translated, the release's
    data files (chapter 6's checkpoint, which its code loads from the notebook's folder) copied."""
    out = {}
    for rel, content in english.items():
        parts = Path(rel).parts
        if parts[0] != "exercises":
            continue
        target = str(Path(ZH_EXERCISES, *parts[1:]))
        out[target] = translate(content, parts[1], root) if rel.endswith(".ipynb") else content
    return out
