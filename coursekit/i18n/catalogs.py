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
import sys
from pathlib import Path
from typing import Iterable

from babel.messages.catalog import Catalog

from coursekit.i18n.notebooks import update_catalogs
from coursekit.i18n.po import LOCALE, NOTEBOOKS, PAGES, merge, read_po, write_po  # noqa: F401 - used and re-exported
from coursekit.layout import REPO_ROOT as ROOT

GETTEXT = ROOT / "_build" / "gettext"


def write_template(path: Path, messages: Iterable[tuple[str, str]]) -> None:
    """A .pot file of (msgctxt, msgid) pairs; msgctxt "" for none."""
    template = Catalog(locale=None)
    for context, message in messages:
        template.add(message, context=context or None)
    write_po(path, template)


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
        for po in update_catalogs():
            print(f"merged {po.relative_to(ROOT)}")
        return 0
    for path, done, empty, fuzzy in stat(all_catalogs()):
        print(f"{str(path.relative_to(ROOT)):60} {done:4} translated {empty:4} untranslated {fuzzy:4} fuzzy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
