"""The catalog of the figures' words, locales/zh_CN/figures.po (coursekit/figures.py draws with it).

    python -m coursekit.i18n.figures update       # the words of the built site's figures into the catalog
    python -m coursekit.i18n.figures fresh-cache  # before a build: drop the execution cache if the catalog changed

The Chinese images are drawn when a page runs, and the execution cache knows only the code: a page run before a
translation changed keeps its old image. `make book` therefore starts with `fresh-cache`, which empties the
cache (every page runs again, a few minutes) when figures.po, or coursekit/figures.py, is not the one the cache
was made with.
"""
from __future__ import annotations

import argparse
import hashlib
import html
import json
import re
import shutil
import sys
from pathlib import Path

from babel.messages.catalog import Catalog

from coursekit.figures import FIGURES_PO
from coursekit.i18n.catalogs import merge, read_po, write_po
from coursekit.layout import REPO_ROOT as ROOT

SITE = ROOT / "_build" / "html"
CACHE = ROOT / "_build" / ".jupyter_cache"
STAMP = ROOT / "_build" / ".figures-po.sha256"
BLOCK = re.compile(r'<div class="course-figure" data-words="([^"]*)" data-untranslated="([^"]*)">')


def figure_blocks(page: Path) -> list[tuple[list[str], list[str]]]:
    """(words, untranslated words) of each figure of a built page."""
    text = page.read_text(encoding="utf-8")
    return [(json.loads(html.unescape(w)), json.loads(html.unescape(u))) for w, u in BLOCK.findall(text)]


def site_words(site: Path = SITE) -> list[str]:
    """Every word of the English site's figures, in page order."""
    words: dict[str, None] = {}
    for page in sorted((site / "book").glob("*.html")):
        for block_words, _ in figure_blocks(page):
            words.update(dict.fromkeys(block_words))
    return list(words)


def update(site: Path = SITE) -> Path:
    template = Catalog(locale=None)
    for word in site_words(site):
        template.add(word)
    write_po(FIGURES_PO, merge(template, read_po(FIGURES_PO)))
    return FIGURES_PO


def _digest() -> str:
    """Of the catalog and of the code that draws with it."""
    digest = hashlib.sha256(FIGURES_PO.read_bytes() if FIGURES_PO.is_file() else b"")
    digest.update((ROOT / "coursekit" / "figures.py").read_bytes())
    return digest.hexdigest()


def fresh_cache() -> bool:
    """Empty the execution cache when figures.po changed since it was made; True when it did."""
    if STAMP.is_file() and STAMP.read_text().strip() == _digest():
        return False
    emptied = CACHE.exists()
    shutil.rmtree(CACHE, ignore_errors=True)
    STAMP.parent.mkdir(parents=True, exist_ok=True)
    STAMP.write_text(_digest() + "\n")
    if emptied:
        print("locales/zh_CN/figures.po changed: the pages run again to draw their figures with it")
    return emptied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["update", "fresh-cache"])
    args = parser.parse_args(argv)
    if args.what == "update":
        if not (SITE / "book").is_dir():
            raise SystemExit("no built site in _build/html: run `make book` first")
        print(f"merged {update().relative_to(ROOT)}")
    else:
        fresh_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
