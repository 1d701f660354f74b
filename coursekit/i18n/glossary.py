"""The course's English -> Chinese glossary: `locales/GLOSSARY-zh.md`, a copy of the project's shared glossary.

Read for two things: the consistency lint of the catalogs (coursekit/i18n/lint.py) and the user dictionary that
lets the Chinese search index keep a glossary term as one word.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from coursekit.layout import REPO_ROOT

GLOSSARY = REPO_ROOT / "locales" / "GLOSSARY-zh.md"

CJK = re.compile(r"[\u3400-\u9fff]")

# Words a reader searches for that the glossary writes another way: the pages give them once, in brackets,
# where the term first appears (KV 缓存 is 键值缓存 spelled out).
SEARCH_ALIASES = ("键值缓存",)


@dataclass(frozen=True)
class Entry:
    english: tuple[str, ...]  # the forms of the English column, acronyms included
    chinese: tuple[str, ...]  # the accepted Chinese forms; for a term "kept in English", the English itself
    note: str


def _forms(cell: str, brackets: str) -> list[str]:
    """'KV 缓存（KV Cache）' -> ['KV 缓存', 'KV Cache']; 'encoder / decoder' -> ['encoder', 'decoder']."""
    opening, closing = brackets
    forms: list[str] = []
    for part in re.split(r"\s*/\s*|[，、;]\s*|,\s+(?![^（(]*[）)])", cell):
        inner = re.findall(rf"\{opening}([^\{closing}]*)\{closing}", part) if opening == "(" else re.findall(
            rf"{opening}([^{closing}]*){closing}", part)
        outer = re.sub(rf"\{opening}[^\{closing}]*\{closing}" if opening == "(" else rf"{opening}[^{closing}]*{closing}",
                       "", part).strip()
        forms += [f for f in [outer, *(i.strip() for i in inner)] if f]
    return forms


def entries(path: Path = GLOSSARY) -> list[Entry]:
    """The rows of the glossary's table."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or cells[0] in ("English", "---") or set(cells[0]) <= set("-"):
            continue
        english = tuple(_forms(cells[0], "()") + _forms(cells[0], "（）"))
        chinese = tuple(english) if "kept in English" in cells[1] else tuple(_forms(cells[1], "（）"))
        rows.append(Entry(tuple(dict.fromkeys(english)), tuple(dict.fromkeys(chinese)), cells[2]))
    if not rows:
        raise ValueError(f"{path}: found no glossary table (| English | 中文 | note |)")
    return rows


def chinese_terms(path: Path = GLOSSARY) -> list[str]:
    """Every Chinese word of the glossary, longest first."""
    terms = {f for e in entries(path) for f in e.chinese if CJK.search(f)} | set(SEARCH_ALIASES)
    return sorted(terms, key=lambda t: (-len(t), t))


def jieba_dictionary(path: Path = GLOSSARY) -> str:
    """jieba's user-dictionary format, one `word frequency` per line; spaces are not allowed inside a word, and
    'KV 缓存' is cut at its space anyway, so only the Chinese runs of a term are listed."""
    words = {run for term in chinese_terms(path) for run in re.findall(r"[\u3400-\u9fff]+", term) if len(run) > 1}
    return "".join(f"{w} 1000\n" for w in sorted(words))
