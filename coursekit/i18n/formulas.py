"""Prose inside formulas: the words of `\\text{...}`, which a Chinese page must show in Chinese.

A formula is the same in both languages except for its `\\text{}` arguments: `\\text{if query } i` is prose and
reads `\\text{若查询 } i` on a Chinese page, while `d_{\\text{model}}` or `\\text{softmax}(x)` are names that stay as
the code writes them. Used by the lint (coursekit/i18n/lint.py: a translated formula may differ only inside
`\\text{}`, and may keep no English prose there) and by the Sphinx extension (coursekit/sphinx_i18n.py: a page's
display formula that holds prose becomes a message of the page's catalog).

When English inside `\\text{}` is a name (may stay English on a Chinese page), a word being a run of Latin letters
and digits, `\\_` included:

- a word with `\\_` (an identifier: `\\text{max\\_len}`, `\\text{kv\\_heads}`), a capital letter (a name, a constant or
  a unit: `\\text{RoPE}`, `\\text{CrossAttention}`, `\\text{True}`, `\\text{FLOP}`) or a single letter;
- a word the message writes as code too (`past` beside `$\\text{past}+i$`);
- an argument that is exactly one word (no space) and the whole of a subscript or superscript (`d_{\\text{model}}`, `W_{\\text{up}}`),
  or that the formula calls or indexes as code does (`\\text{softmax}(x)`, `\\text{slot}(p)`, `\\text{mask}[i, j]`).

Anything else is prose: an argument of two English words or more with no Chinese (`\\text{bytes per token}`), or a
lowercase word in any other place (`\\text{score} =`, `\\sum_{j \\in \\text{block}}`, `2 \\ \\text{bytes}`).
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator

# One level of nested braces inside the argument is enough for the course (`\text{max\_len}` has none).
TEXT = re.compile(r"\\text\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
WORD = re.compile(r"[A-Za-z0-9]*[A-Za-z](?:[A-Za-z0-9]|\\_)*")
HAN = re.compile(r"[\u3400-\u9fff]")
# What follows a name that the formula calls or indexes: `(`, `[`, maybe after a spacing or sizing command.
CALLED = re.compile(r"\s*(?:\\[!,;:]\s*)*(?:\\(?:left|big|Big|bigg|Bigg)\s*)?[(\[]")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def text_arguments(tex: str) -> Iterator[re.Match]:
    """Each `\\text{...}` of `tex`; group 1 is its argument."""
    return TEXT.finditer(tex)


def blank_text(tex: str) -> str:
    """`tex` with every `\\text{}` argument emptied: what a translation must keep unchanged."""
    return TEXT.sub(r"\\text{}", tex)


def code_words(message: str) -> frozenset[str]:
    """The words a message writes as code (its `code spans`): names a formula of the message may keep."""
    return frozenset(word for m in CODE_SPAN.finditer(message) for word in re.findall(r"[A-Za-z_]\w*", m.group(2)))


def _whole_script(tex: str, match: re.Match) -> bool:
    """`match` is the whole of a subscript or superscript: `_{\\text{model}}`, `^\\text{T}`."""
    before, after = tex[:match.start()].rstrip(), tex[match.end():].lstrip()
    return before.endswith(("_", "^")) or (before.endswith(("_{", "^{")) and after.startswith("}"))


def _is_name(word: str, alone: bool, placed_as_code: bool, names: frozenset[str]) -> bool:
    if "\\_" in word or any(c.isupper() for c in word) or len(word) == 1 or word in names:
        return True
    return alone and placed_as_code


def english_prose(tex: str, names: Iterable[str] = ()) -> list[str]:
    """The `\\text{}` arguments of `tex` that hold English prose (the module's rule); `names`: words the message
    writes as code."""
    names = frozenset(names)
    prose = []
    for match in text_arguments(tex):
        argument = match.group(1)
        words = WORD.findall(argument)
        if not words:
            continue
        if len(words) >= 2 and not HAN.search(argument):
            prose.append(argument)   # an English phrase
            continue
        alone = argument == words[0]   # `\text{shape } (t, T)` is a phrase's spacing, not a name's
        placed_as_code = _whole_script(tex, match) or CALLED.match(tex, match.end()) is not None
        if not all(_is_name(word, alone, placed_as_code, names) for word in words):
            prose.append(argument)
    return prose


def holds_prose(tex: str) -> bool:
    """Whether a display formula has English prose to translate (then it is a message of its page's catalog)."""
    return bool(english_prose(tex))


def formula_message(tex: str) -> str:
    """A page's display formula as a catalog message: written as the page writes it, between `$$` lines, so that
    translators see a formula and the lint compares it as math."""
    return f"$$\n{tex.strip()}\n$$"


def formula_of_message(message: str) -> str | None:
    """The formula of a translated formula message, or None when it is not written between `$$` lines."""
    match = re.fullmatch(r"\s*\$\$(.*)\$\$\s*", message, re.S)
    return match.group(1).strip() if match else None
