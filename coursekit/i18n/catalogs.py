"""The Chinese edition's message catalogs (gettext .po files), read and written with babel.

    python -m coursekit.i18n.catalogs update   # merge the fresh extraction (_build/gettext) into locales/zh_CN/
    python -m coursekit.i18n.catalogs stat     # translated / untranslated / fuzzy messages per catalog

Pages: locales/zh_CN/LC_MESSAGES/<page>.po, one per page (what Sphinx reads). Notebooks:
locales/zh_CN/notebooks/<assignment>.po, one message per markdown cell (coursekit/i18n/notebooks.py). An English
message that changed turns fuzzy in the merge: the page shows the English until a translator confirms it, and
the tests fail until then.
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Iterable

from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import read_po as _read_po
from babel.messages.pofile import write_po as _write_po

from coursekit.layout import REPO_ROOT as ROOT

LOCALE = Path("locales") / "zh_CN"
PAGES = ROOT / LOCALE / "LC_MESSAGES"
NOTEBOOKS = ROOT / LOCALE / "notebooks"
GETTEXT = ROOT / "_build" / "gettext"


def read_po(path: Path) -> Catalog:
    if not path.is_file():
        return Catalog(locale="zh_CN")
    with path.open("rb") as f:
        return _read_po(f, locale="zh_CN")


def write_po(path: Path, catalog: Catalog) -> None:
    """Unwrapped (one line per message), in extraction order, with no dates: a catalog changes only when a
    message does."""
    catalog.revision_date = catalog.creation_date = None
    catalog.project, catalog.version = "Attention, from QKV to PagedAttention", ""
    catalog.language_team = catalog.last_translator = ""
    catalog.msgid_bugs_address = ""
    catalog.fuzzy = False  # the header's flag: a translated catalog is not a draft as a whole
    for message in catalog:
        # babel guesses these from braces and percent signs in prose; no message here is a format string.
        message.flags.discard("python-format")
        message.flags.discard("python-brace-format")
    buffer = io.BytesIO()
    _write_po(buffer, catalog, width=0, sort_output=False, omit_header=False, include_previous=True,
              ignore_obsolete=False)
    text = buffer.getvalue().decode("utf-8")
    # babel writes the dates it was told not to know as empty fields; drop them so the header never changes.
    text = "\n".join(line for line in text.split("\n")
                     if not line.startswith(('"POT-Creation-Date:', '"PO-Revision-Date:', '"Generated-By:')))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_template(path: Path, messages: Iterable[tuple[str, str]]) -> None:
    """A .pot file of (msgctxt, msgid) pairs; msgctxt "" for none."""
    template = Catalog(locale=None)
    for context, message in messages:
        template.add(message, context=context or None)
    write_po(path, template)


def merge(template: Catalog, catalog: Catalog) -> Catalog:
    """`catalog` brought up to `template`: new messages empty, changed ones fuzzy, removed ones obsolete."""
    # A removed message stays in the file as obsolete (#~), so that a rewritten paragraph's old translation
    # is still at hand; Sphinx and the checks ignore it.
    catalog.update(template, no_fuzzy_matching=False, update_header_comment=False, keep_user_comments=True)
    return catalog


def templates(folder: Path = GETTEXT) -> dict[Path, Path]:
    """{template: its catalog} for every .pot of an extraction."""
    return {pot: PAGES / pot.relative_to(folder).with_suffix(".po") for pot in sorted(folder.rglob("*.pot"))}


def keys(catalog: Catalog) -> set[tuple[str | None, str]]:
    return {(m.context, m.id) for m in catalog if m.id}


def update(folder: Path = GETTEXT) -> list[Path]:
    """Merge an extraction into the page catalogs; returns the catalogs written. A catalog whose page is gone
    is removed."""
    written = []
    found = templates(folder)
    for pot, po in found.items():
        template = read_po(pot)
        write_po(po, merge(template, read_po(po)))
        written.append(po)
    for stale in set(PAGES.rglob("*.po")) - set(found.values()):
        stale.unlink()
    return written


def stat(paths: Iterable[Path]) -> list[tuple[Path, int, int, int]]:
    """(catalog, translated, untranslated, fuzzy) for each catalog."""
    rows = []
    for path in paths:
        messages = [m for m in read_po(path) if m.id]
        fuzzy = sum(m.fuzzy for m in messages)
        empty = sum(not m.string for m in messages)
        rows.append((path, len(messages) - fuzzy - empty, empty, fuzzy))
    return rows


FIGURES = ROOT / LOCALE / "figures.po"
THEME = ROOT / LOCALE / "theme.po"     # the themes' own labels, written by hand (coursekit/sphinx_i18n.py)


def all_catalogs() -> list[Path]:
    return sorted(PAGES.rglob("*.po")) + sorted(NOTEBOOKS.glob("*.po")) + [FIGURES, THEME]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["update", "stat"])
    args = parser.parse_args(argv)
    if args.what == "update":
        if not GETTEXT.is_dir():
            raise SystemExit(f"{GETTEXT} is missing: run `python -m coursekit.i18n.book gettext` first")
        for po in update():
            print(f"merged {po.relative_to(ROOT)}")
        from coursekit.i18n.notebooks import update_catalogs

        for po in update_catalogs():
            print(f"merged {po.relative_to(ROOT)}")
        return 0
    for path, done, empty, fuzzy in stat(all_catalogs()):
        print(f"{str(path.relative_to(ROOT)):60} {done:4} translated {empty:4} untranslated {fuzzy:4} fuzzy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
