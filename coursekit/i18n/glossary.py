"""The course's English -> Chinese glossary: `locales/GLOSSARY-zh.md`, the project's own.

Two tables, told apart by their header row:

- the terms, `| English | 中文 | note |`: one row per concept. The note may rule variants out, "not 簿记" or
  "never 受内存限制, 受限于访存"; a variant glossed in brackets, "not 分块 (used for chunked prefill)", is a word
  with another sense of its own, ruled out only where the English uses the row's term;
- the recurring headings and site text, `| English | 中文 |`: one wording for what recurs on every page. A row's
  English may describe the text and quote it: `the course's title, "Attention, from QKV to PagedAttention"`.

Read for three things: the consistency lint of the catalogs (coursekit/i18n/lint.py: the terms, their rejected
variants and the headings), and the user dictionary that lets the Chinese search index keep a glossary term as
one word (the terms' Chinese only).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from coursekit.layout import REPO_ROOT

GLOSSARY = REPO_ROOT / "locales" / "GLOSSARY-zh.md"

CJK = re.compile(r"[\u3400-\u9fff]")
TERMS_HEADER = ("English", "中文", "note")
HEADINGS_HEADER = ("English", "中文")

# Words a reader searches for that the glossary writes another way: the pages give them once, in brackets,
# where the term first appears (KV 缓存 is 键值缓存 spelled out; the KV cache row now lists it too).
SEARCH_ALIASES = ("键值缓存",)


@dataclass(frozen=True)
class Entry:
    english: tuple[str, ...]  # the forms of the English column, acronyms included; not a bracketed qualifier
    chinese: tuple[str, ...]  # the accepted Chinese forms; for a term "kept in English", the English itself
    note: str
    main: tuple[str, ...] = ()        # the Chinese column's forms outside brackets, in order: what the text writes
    terms: tuple[str, ...] = ()       # the English column's forms outside brackets, in order (not its acronyms)
    rejected: tuple[str, ...] = ()    # variants the note rules out everywhere ("not 簿记", "never 算力受限")
    rejected_here: tuple[str, ...] = ()  # variants with a sense of their own, ruled out where the English says the term
    full: str = ""                    # the Chinese column as written, for a note that asks for it at a first mention


@dataclass(frozen=True)
class Heading:
    english: str   # the recurring English text (the quoted part of a descriptive cell)
    chinese: str   # its one wording


def _split(cell: str, separators: str) -> list[str]:
    """`cell` cut at `separators` outside brackets (either kind)."""
    parts, depth, current = [], 0, ""
    i = 0
    while i < len(cell):
        c = cell[i]
        depth += c in "(（"
        depth -= c in ")）"
        match = re.match(separators, cell[i:]) if depth == 0 else None
        if match and match.end() > 0:
            parts.append(current)
            current = ""
            i += match.end()
            continue
        current += c
        i += 1
    return [p.strip() for p in parts + [current] if p.strip()]


def _forms(cell: str, brackets: str) -> tuple[list[str], list[str]]:
    """('KV 缓存（键值缓存，KV Cache）', '（）') -> (['KV 缓存'], ['键值缓存', 'KV Cache']): the forms outside and inside
    the brackets; 'encoder / decoder' -> (['encoder', 'decoder'], [])."""
    opening, closing = (re.escape(b) for b in brackets)
    outer_forms: list[str] = []
    inner_forms: list[str] = []
    for part in _split(cell, r"\s*/\s*|[，、;]\s*|,\s+"):
        for inner in re.findall(rf"{opening}([^{closing}]*){closing}", part):
            inner_forms += _split(inner, r"[，、;]\s*|,\s+") if CJK.search(inner) or "，" in inner or "、" in inner \
                else [inner.strip()]
        outer = re.sub(rf"{opening}[^{closing}]*{closing}", "", part).strip()
        if outer:
            outer_forms.append(outer)
    return outer_forms, [f for f in inner_forms if f]


def _qualifier(text: str) -> bool:
    """A bracket of the English column that says which sense is meant, not another name: '(of a kernel)'."""
    return text.startswith(("of ", "in "))


def _variants(note: str) -> tuple[list[str], list[str]]:
    """The Chinese variants a note rules out: (everywhere, only where the English says the term)."""
    everywhere: list[str] = []
    here: list[str] = []
    for clause in re.finditer(r"\b(?:not|never)\b([^;]*)", note):
        for item in re.split(r",\s*|\band not\b|\bor\b|\band\b|、", clause.group(1)):
            m = re.match(r"\s*([^\s(（]*[\u3400-\u9fff][^\s(（]*)\s*(\(|（)?", item)
            if m:
                (here if m.group(2) else everywhere).append(m.group(1))
    return everywhere, here


def _tables(path: Path) -> list[tuple[tuple[str, ...], list[list[str]]]]:
    """Every table of the file: (header cells, rows of cells)."""
    tables: list[tuple[tuple[str, ...], list[list[str]]]] = []
    current: list[list[str]] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if current is None:
            current = []
            tables.append((tuple(cells), current))
        elif not all(set(c) <= set("-: ") for c in cells):
            current.append(cells)
    return tables


def entries(path: Path = GLOSSARY) -> list[Entry]:
    """The rows of the glossary's table of terms."""
    rows = []
    for header, table in _tables(path):
        if header != TERMS_HEADER:
            continue
        for cells in table:
            if len(cells) < 3:
                continue
            outer, inner = _forms(cells[0], "()")
            english = [f for f in outer + inner if not _qualifier(f)]
            if "kept in English" in cells[1]:
                main, chinese = tuple(english), tuple(english)
            else:
                main_forms, inner_forms = _forms(cells[1], "（）")
                main, chinese = tuple(main_forms), tuple(main_forms + inner_forms)
            everywhere, here = _variants(cells[2])
            rows.append(Entry(tuple(dict.fromkeys(english)), tuple(dict.fromkeys(chinese)), cells[2],
                              main, tuple(f for f in outer if not _qualifier(f)), tuple(everywhere), tuple(here),
                              cells[1]))
    if not rows:
        raise ValueError(f"{path}: found no glossary table (| English | 中文 | note |)")
    return rows


def headings(path: Path = GLOSSARY) -> list[Heading]:
    """The rows of the table of recurring headings and site text (| English | 中文 |)."""
    rows = []
    for header, table in _tables(path):
        if header != HEADINGS_HEADER:
            continue
        for cells in table:
            if len(cells) < 2 or not cells[0] or not cells[1]:
                continue
            quoted = re.findall(r"\"([^\"]+)\"|“([^”]+)”", cells[0])
            english = (quoted[-1][0] or quoted[-1][1]) if quoted else cells[0]
            rows.append(Heading(english, cells[1]))
    return rows


def chinese_terms(path: Path = GLOSSARY) -> list[str]:
    """Every Chinese word of the glossary's terms, longest first."""
    terms = {f for e in entries(path) for f in e.chinese if CJK.search(f)} | set(SEARCH_ALIASES)
    return sorted(terms, key=lambda t: (-len(t), t))


def jieba_dictionary(path: Path = GLOSSARY) -> str:
    """jieba's user-dictionary format, one `word frequency` per line; spaces are not allowed inside a word, and
    'KV 缓存' is cut at its space anyway, so only the Chinese runs of a term are listed."""
    words = {run for term in chinese_terms(path) for run in re.findall(r"[\u3400-\u9fff]+", term) if len(run) > 1}
    return "".join(f"{w} 1000\n" for w in sorted(words))


def search_synonyms(path: Path = GLOSSARY) -> list[tuple[str, str]]:
    """(the form a page writes, a Chinese word a reader may search for instead) for each term whose full form a
    page gives once only, at its first mention: ('KV 缓存', '键值缓存'), ('PagedAttention', '分页注意力'). The
    Chinese search index files a text holding the first under the second as well, so that a search for 键值缓存
    weighs a title or heading that says KV 缓存 as it weighs the words themselves."""
    pairs = []
    for entry in entries(path):
        if "first mention" not in entry.note:
            continue
        for form in entry.main:
            pairs += [(form, word) for word in entry.chinese if word not in entry.main and CJK.search(word)]
    return pairs
