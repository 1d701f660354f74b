"""Checks of the Chinese catalogs that a build does not make, each for a fault a reader would see.

    python -m coursekit.i18n.lint [CATALOG.po ...]   # every catalog when none is named; exit 1 on any problem

- every message translated and none fuzzy (a fuzzy or empty message shows the English);
- the same math, code spans, code blocks, link and cross-reference targets in the translation as in the English,
  except the arguments of `\\text{}` in math, which are prose: a formula may differ from the English one only there
  (with every `\\text{}` argument emptied, the two are identical);
- no English prose inside a formula's `\\text{}`: English there only as a name, by the rule of
  coursekit/i18n/formulas.py (an identifier with `\\_`, a word with a capital letter, a word the message writes as
  code, one word that is a whole subscript or that the formula calls or indexes: `d_{\\text{model}}`,
  `\\text{softmax}(x)`); `\\text{bytes per token}` or `\\text{score} =` must be Chinese;
- a translated page message never starts with "1. " (MyST reads a list, and Sphinx silently keeps the English);
- emphasis marks that CommonMark's flanking rules would print as asterisks (`**数值稳定性。**按`);
- no line break between two Chinese characters inside a paragraph (the browser shows it as a space);
- the glossary's terms: the Chinese of an English term that the message uses, and none of the rejected variants
  (the calques below, and what a row's note rules out: "not 簿记", "never 算力受限"; "not 分片 (a shard)" where the
  English says the row's term);
- a range of numbers written with the wave dash, not a hyphen (which reads as a minus sign), and a range of
  percentages with the sign at both ends: 20.4%～38.2%, 第 1～7 章 (not 20.4-38.2%, 第 1-7 章);
- a recurring heading in the glossary's one wording ("What you build in the exercises" is 练习内容);
- on a page, a term whose note asks for it (KV 缓存（键值缓存，KV Cache）, PagedAttention（分页注意力）) in full at
  its first mention, and only there.
"""
from __future__ import annotations

import re
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

from coursekit.i18n.catalogs import FIGURES, NOTEBOOKS, PAGES, all_catalogs, read_po
from coursekit.i18n.formulas import blank_text, code_words, english_prose
from coursekit.i18n.glossary import entries, headings
from coursekit.layout import REPO_ROOT as ROOT

HAN = r"\u3400-\u9fff"
CJK_PUNCT = "，。：；！？、“”‘’（）《》「」【】—…"
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
MATH = re.compile(r"\$\$.+?\$\$|\$(?:[^$\n]|\n(?![ \t]*\n))+?\$|\\\(.+?\\\)", re.S)  # inline math may wrap a line
CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")                    # [text](target)
ROLE = re.compile(r"\{([\w:.-]+)\}`(?:[^`<]*<([^>`]+)>|([^`]+))`")  # {doc}`text <target>` / {ref}`target`
AUTOLINK = re.compile(r"<(https?://[^>]+)>")

# Renderings the glossary rules out (calques, or a term of the source article the glossary corrects).
REJECTED = {
    "令牌": "token is 词元",
    "自我注意": "self-attention is 自注意力",
    "多头潜在空间注意力": "MLA is 多头潜在注意力",
    "潜空间注意力": "MLA is 多头潜在注意力",
    "隐注意力": "MLA is 多头潜在注意力",
    "键值向量": "K is 键 and V is 值; the two together are 键和值",
}
# The same, for a word that is right in one place only: 分页注意力 is PagedAttention's gloss, given in brackets.
REJECTED_PATTERNS = {
    r"(?<!PagedAttention（)分页注意力": "PagedAttention stays in English; 分页注意力 only as PagedAttention（分页注意力）",
}
# A range of numbers in Chinese prose: the wave dash, and a percentage's sign at both ends (20.4%～38.2%).
NUMBER = r"\d+(?:\.\d+)?"
HYPHEN_RANGE = re.compile(rf"(?<![\w.\-]){NUMBER}%?\s*[-–—]\s*{NUMBER}(?![\w.\-])%?")
PERCENT_RANGE = re.compile(rf"(?<![\w.\-]){NUMBER}\s*～\s*{NUMBER}%")   # 20.4～38.2%: the first end lacks its %


def _ranges(prose: str) -> list[str]:
    """Ranges of numbers that Chinese typography writes otherwise (20.4-38.2% is 20.4%～38.2%)."""
    problems = []
    for m in HYPHEN_RANGE.finditer(prose):
        low, high = re.split(r"\s*[-–—]\s*", m.group(0).rstrip("%"), maxsplit=1)
        percent = "%" if m.group(0).endswith("%") else ""
        problems.append(f"a range written with a hyphen: '{m.group(0)}' is '{low.rstrip('%')}{percent}～{high}{percent}'"
                        " (a hyphen between numbers reads as a minus sign)")
    for m in PERCENT_RANGE.finditer(prose):
        low, high = re.split(r"\s*～\s*", m.group(0), maxsplit=1)
        problems.append(f"a range of percentages: '{m.group(0)}' is '{low}%～{high}' (the sign at both ends)")
    return problems


# English glossary words too common in other senses to require their term ("the value of", "a block of code"):
# the translator decides there; the rejected variants above still apply.
LOOSE = {"value", "key", "query", "block", "head", "attention head", "scores", "logical", "slot", "sampling",
         "temperature", "GPU", "kernel", "decode", "mask", "masked", "padding", "embedding", "latency", "vocabulary",
         "Q, K, V", "value (Q, K, V)", "block size", "physical block", "exercise", "graded", "hidden tests",
         "eviction", "throughput", "encoder", "decoder", "prefill", "quantization", "activation function",
         "sampling", "top-k", "top-p", "softmax", "online softmax", "low-rank", "roofline", "scheduler", "tokenizer",
         "memory bandwidth",  # 显存带宽 is a GPU's; chapter 7 measures a CPU's
         "Orca"}  # the system a term comes from (iteration-level scheduling (Orca)), not its name


def _strip(text: str) -> str:
    """The prose of a message: code blocks, code spans, math and link targets removed."""
    for pattern in (FENCE, CODE, MATH, LINK, ROLE, AUTOLINK):
        text = pattern.sub(" ", text)
    return text


def _spans(text: str) -> dict[str, Counter]:
    without_fences = FENCE.sub(" ", text)
    without_roles = ROLE.sub(" ", without_fences)   # a role's text is translated; its target is compared below
    without_code = CODE.sub(" ", without_roles)
    return {
        "code blocks": Counter(m.group(0) for m in FENCE.finditer(text)),
        "code spans": Counter(m.group(0) for m in CODE.finditer(without_roles)),
        # a formula's \text{} arguments are prose, translated like the rest (checked by _formula_prose)
        "math": Counter(re.sub(r"\s+", " ", blank_text(m.group(0))) for m in MATH.finditer(without_code)),
        "link targets": Counter(LINK.findall(without_code)) + Counter(AUTOLINK.findall(without_code))
        + Counter(m.group(2) or m.group(3) for m in ROLE.finditer(without_fences)),
        "roles": Counter(m.group(1) for m in ROLE.finditer(without_fences)),
    }


def _formula_prose(english: str, chinese: str) -> list[str]:
    """The `\\text{}` arguments of the translation's formulas that are still English prose."""
    names = code_words(english)   # the translation has the same code spans (checked above)
    without_code = CODE.sub(" ", ROLE.sub(" ", FENCE.sub(" ", chinese)))
    return [argument for m in MATH.finditer(without_code) for argument in english_prose(m.group(0), names)]


def _printed_asterisks(text: str) -> list[str]:
    """The text runs holding a `*` once the message is rendered as CommonMark (math and code aside): emphasis
    that did not open or close. Chinese has no spaces, so `**数值稳定性。**按` (a closing mark after a punctuation
    mark and before a character) is printed as asterisks where the English `**Stability.** Written` is not."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    tokens = MarkdownIt("commonmark").use(dollarmath_plugin).parse(text)
    return [child.content for token in tokens if token.type == "inline" for child in token.children or []
            if child.type == "text" and "*" in child.content]


def _pairs() -> list[tuple[str, tuple[str, ...]]]:
    """(English term, its accepted Chinese forms) for every glossary term the lint enforces."""
    pairs = []
    for entry in entries():
        names = {m.casefold() for m in entry.main}
        # "encoder / decoder | 编码器 / 解码器": each English term with its own Chinese
        aligned = dict(zip(entry.terms, entry.main)) if len(entry.terms) == len(entry.main) > 1 else {}
        for english in entry.english:
            if english in LOOSE or english.isupper() or english.casefold() in names:
                continue   # acronyms and names are kept as they are (PagedAttention, softmax, RMSNorm)
            if english not in entry.terms and english in entry.chinese:
                continue   # a bracketed alias that the Chinese keeps too (RoPE)
            # The English of a row's own term, given in brackets at a first mention, is not its translation:
            # 'ridge point' needs 拐点, not just (ridge point).
            forms = (aligned[english],) if english in aligned else \
                tuple(f for f in entry.chinese if f.casefold() != english.casefold())
            pairs.append((english, forms))
    return pairs


def _mentions(term: str, english: str) -> bool:
    """`term` in `english`, as a word, plural too; 'KV cache' is also 'KV-cache' (in 'KV-cache memory')."""
    pattern = r"[ -]".join(re.escape(word) for word in term.split(" "))
    return re.search(rf"(?<![\w-]){pattern}(?:s|es)?(?![\w-])", english, re.I) is not None


@lru_cache(maxsize=1)
def _rejected() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(variant, reason, English terms it is rejected beside: () for everywhere) from the glossary's notes."""
    rules = []
    for entry in entries():
        term = entry.english[0]
        for variant in entry.rejected:
            rules.append((variant, f"the glossary rules it out: {term} is {entry.full}", ()))
        for variant in entry.rejected_here:
            rules.append((variant, f"the glossary rules it out where the English says '{term}' ({entry.full})",
                          tuple(e for e in entry.english if e not in LOOSE)))
    return tuple(rules)


def _names_another_term(variant: str, english: str) -> bool:
    """Whether `variant` is the glossary's own word for another term the English also says: a paragraph about tiles
    and prompt chunks writes 分块 for the chunks, which the tile's note rules out only as a word for a tile."""
    return any(variant in entry.main and any(_mentions(term, english) for term in entry.terms) for entry in entries())


@lru_cache(maxsize=1)
def _headings() -> dict[str, str]:
    return {h.english: h.chinese for h in headings()}


def check_message(english: str, chinese: str, page: bool, pairs=None, figure: bool = False) -> list[str]:
    """The problems of one translation; `page`: a page's message (Sphinx re-parses it); `figure`: a figure's label,
    whose line breaks are the figure's own."""
    problems = []
    a, b = _spans(english), _spans(chinese)
    for kind in a:
        if a[kind] != b[kind]:
            missing, extra = a[kind] - b[kind], b[kind] - a[kind]
            problems.append(f"{kind} differ: missing {sorted(missing)}, added {sorted(extra)}")
    for argument in _formula_prose(english, chinese):
        problems.append(f"English prose in a formula: \\text{{{argument}}} (translate it; only names stay English "
                        "in \\text{}: see coursekit/i18n/formulas.py)")
    if page and re.match(r"\d+\.\s", chinese):
        problems.append("starts with '1. ': write '1\\. ' (a list would replace the heading, and Sphinx keeps the English)")
    printed = _printed_asterisks(chinese)
    if sum(run.count("*") for run in printed) > sum(run.count("*") for run in _printed_asterisks(english)):
        problems.append(f"emphasis printed as asterisks: {printed} (CommonMark: a punctuation mark just inside "
                        "**…** needs a space or a punctuation mark just outside it; write **数值稳定性**。 not **数值稳定性。**)")
    prose = MATH.sub("x", CODE.sub("x", ROLE.sub("x", FENCE.sub("\n", chinese))))
    for m in re.finditer(rf"(?<=[{HAN}{CJK_PUNCT}])\n(?=[{HAN}{CJK_PUNCT}])", "" if figure else prose):
        problems.append(f"a line break inside Chinese text: …{prose[max(0, m.start() - 8):m.end() + 8]!r}… (shows as a space)")
    for variant, reason in REJECTED.items():
        if variant in chinese:
            problems.append(f"'{variant}': {reason}")
    for pattern, reason in REJECTED_PATTERNS.items():
        for m in re.finditer(pattern, chinese):
            problems.append(f"'{m.group(0)}': {reason}")
    plain = _strip(english)
    chinese_prose = _strip(chinese)
    for variant, reason, beside in _rejected():
        if variant in chinese_prose and (not beside or any(_mentions(term, plain) for term in beside)) \
                and not _names_another_term(variant, plain):
            problems.append(f"'{variant}': {reason}")
    problems += _ranges(chinese_prose)
    wording = _headings().get(english.strip())
    if wording is not None and chinese.strip() != wording:
        problems.append(f"a recurring heading: '{english.strip()}' is '{wording}' on every page (the glossary)")
    for term, chinese_forms in pairs if pairs is not None else _pairs():
        if _mentions(term, plain) and not any(form in chinese for form in chinese_forms):
            problems.append(f"glossary: the English says '{term}', the translation has none of {list(chinese_forms)}")
    return problems


def _first_mentions(path: Path, messages: list) -> list[str]:
    """A term whose glossary note asks for its full form at the first mention on a page (KV 缓存（键值缓存，KV
    Cache）): in full, once, in the first message that mentions it or in the first that is not a heading (a title
    may keep the short form: "基于 KV 缓存的解码"), and in no other message."""
    source = ROOT / "book" / path.relative_to(PAGES / "book").with_suffix(".md") \
        if path.is_relative_to(PAGES / "book") else None
    titles = set()
    if source is not None and source.is_file():
        titles = {re.sub(r"^#+\s+", "", line).strip() for line in source.read_text(encoding="utf-8").splitlines()
                  if re.match(r"#+\s", line)}

    def heading(message) -> bool:
        return message.id.strip() in titles or re.fullmatch(r"#+ [^\n]*", message.id.strip()) is not None

    problems = []
    for entry in entries():
        if "first mention" not in entry.note:
            continue
        terms = [e for e in entry.english if e not in LOOSE]
        mentioning = [m for m in messages if any(_mentions(t, _strip(m.id)) for t in terms)]
        if not mentioning:
            continue
        candidates = [mentioning[0], next((m for m in mentioning if not heading(m)), mentioning[0])]
        first = next((m for m in candidates if entry.full in m.string), candidates[-1])
        full = [m for m in messages if entry.full in m.string]
        if first.string.count(entry.full) != 1:
            problems.append(f"{first.id[:60]!r}: the first mention of '{terms[0]}' on the page gives "
                            f"'{entry.full}' once (the glossary: {entry.note})")
        for m in full:
            if m is not first:
                problems.append(f"{m.id[:60]!r}: '{entry.full}' only at the first mention of '{terms[0]}' on the "
                                f"page; afterwards {entry.main[0]}")
    return problems


def check_catalog(path: Path) -> list[str]:
    page = NOTEBOOKS not in path.parents and path != FIGURES
    pairs = _pairs()
    problems = []
    for message in read_po(path):
        if not message.id:
            continue
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: " + \
            (f"[{message.context}] " if message.context else "") + repr(message.id[:60])
        if not message.string:
            problems.append(f"{where}: untranslated")
            continue
        if message.fuzzy:
            problems.append(f"{where}: fuzzy (the English changed; confirm or fix the translation, then drop the flag)")
        problems += [f"{where}: {p}" for p in check_message(message.id, message.string, page, pairs,
                                                            figure=path == FIGURES)]
    if page or NOTEBOOKS in path.parents:
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
        problems += [f"{where}: {p}" for p in _first_mentions(path, [m for m in read_po(path) if m.id and m.string])]
    return problems


def main(argv: list[str] | None = None) -> int:
    paths = [Path(a).resolve() for a in (argv if argv is not None else sys.argv[1:])] or all_catalogs()
    problems = [p for path in paths for p in check_catalog(path)]
    print("\n".join(problems) or f"{len(paths)} catalog(s): no problem")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
