"""Every figure of the website drawn twice, in English and in Chinese, from one execution of the page.

A page's hidden set-up cell calls `bilingual_figures()`. From then on a matplotlib figure is shown as one HTML
block holding two images: the figure as the code drew it, and the same figure with its words (titles, axis
labels, legends, texts) replaced by their translations from locales/zh_CN/figures.po. course.css shows the one
of the page's language (<html lang>). The code stays the English code, so both sites share one execution cache.

A word with no translation is listed in the block's `data-untranslated` (its Chinese image then keeps the
English word): the tests fail on any such figure of the Chinese site, and `python -m coursekit.i18n.figures`
adds the missing words to the catalog for a translator.
"""
from __future__ import annotations

import base64
import html
import io
import json
import re
from pathlib import Path

from coursekit.layout import REPO_ROOT

FIGURES_PO = REPO_ROOT / "locales" / "zh_CN" / "figures.po"
# Words that stay as they are in Chinese (acronyms, names, identifiers): a label made only of these, numbers,
# symbols and math needs no translation.
KEPT = {"softmax", "MHA", "MQA", "GQA", "MLA", "KV", "RoPE", "FFN", "GELU", "ReLU", "SwiGLU", "LayerNorm", "RMSNorm",
        "PyTorch", "torch", "NumPy", "attnlab", "vLLM", "Triton", "GPU", "CPU", "SmolLM2", "DeepSeek", "GPT",
        "Llama", "TTFT", "TPOT", "LRU", "HBM", "FlashMLA", "FlashAttention", "PagedAttention", "BERT", "MiniLM",
        "float32", "float16", "bfloat16", "bf16", "fp32", "fp16", "MiB", "GiB", "KiB", "ms", "log", "exp", "max",
        "min", "std", "sdpa", "Instruct", "Lite", "V2", "V3"}


def needs_translation(text: str) -> bool:
    """True when a label holds a word a Chinese reader would need translated."""
    prose = re.sub(r"\$[^$]*\$", " ", text)           # math is the same in both languages
    words = re.findall(r"[A-Za-z][A-Za-z'-]+", prose)
    return any(word not in KEPT and not re.fullmatch(r"[A-Z]", word) for word in words)


def _catalog(path: Path = FIGURES_PO) -> dict[str, str]:
    if not path.is_file():
        return {}
    from coursekit.i18n.catalogs import read_po
    return {m.id: m.string for m in read_po(path) if m.id and m.string and not m.fuzzy}


def labelled_texts(fig) -> list:
    """The Text artists of a figure that carry its words (tick labels are data: numbers, tokens)."""
    texts = [t for t in (getattr(fig, "_suptitle", None), getattr(fig, "_supxlabel", None),
                         getattr(fig, "_supylabel", None)) if t is not None] + list(fig.texts)
    for ax in fig.axes:
        texts += [ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None),
                  ax.xaxis.label, ax.yaxis.label, *ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            texts += [*legend.get_texts(), legend.get_title()]
    for legend in getattr(fig, "legends", []):
        texts += [*legend.get_texts(), legend.get_title()]
    return [t for t in texts if t is not None and t.get_text()]


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.canvas.print_figure(buffer, format="png", dpi=fig.dpi, bbox_inches="tight",
                            facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor())
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _alt(texts: list) -> str:
    return "; ".join(t.get_text() for t in texts[:3])


def bilingual_html(fig) -> str | None:
    """The figure in both languages, as the HTML block the page shows."""
    if not fig.axes and not fig.images:
        return None     # an empty figure, as IPython shows none
    texts = labelled_texts(fig)
    english_png, english_alt = _png(fig), _alt(texts)
    catalog = _catalog()
    originals = [(t, t.get_text(), t.get_fontfamily()) for t in texts]
    missing = []
    try:
        for text, original, _ in originals:
            if needs_translation(original):
                if original in catalog:
                    text.set_text(catalog[original])
                    if "$" in original and CHINESE_FONT:
                        # matplotlib draws the words of a label holding math with the first font of the family
                        # alone (no per-glyph fallback): the Chinese font, which has Latin letters too.
                        text.set_fontfamily([CHINESE_FONT[0]])
                else:
                    missing.append(original)
        chinese_png, chinese_alt = _png(fig), _alt(texts)
    finally:
        for text, original, family in originals:
            text.set_text(original)
            text.set_fontfamily(family)
    attribute = html.escape(json.dumps(sorted(set(missing)), ensure_ascii=False), quote=True)
    words = html.escape(json.dumps(sorted({o for _, o, _ in originals if needs_translation(o)}), ensure_ascii=False),
                        quote=True)
    return (f'<div class="course-figure" data-words="{words}" data-untranslated="{attribute}">'
            f'<img class="course-figure-en" lang="en" alt="{html.escape(english_alt)}" '
            f'src="data:image/png;base64,{english_png}"/>'
            f'<img class="course-figure-zh" lang="zh-CN" alt="{html.escape(chinese_alt)}" '
            f'src="data:image/png;base64,{chinese_png}"/></div>')


CHINESE_FONT: list[str] = []   # the font found by _chinese_font_fallback, if any


def _chinese_font_fallback() -> None:
    """A font with Chinese glyphs as matplotlib's per-glyph fallback behind the page's font: English labels are
    drawn as before, Chinese ones get their glyphs (registered by path: matplotlib's font cache may predate the
    font's installation; `make setup` installs fonts-wqy-microhei)."""
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    for path in font_manager.findSystemFonts():
        if any(key in path.lower() for key in ("wqy", "notosanscjk", "notoserifcjk")):
            font_manager.fontManager.addfont(path)
    chinese = [f.name for f in font_manager.fontManager.ttflist
               if any(key in f.name for key in ("WenQuanYi", "Noto Sans CJK", "Noto Serif CJK"))]
    CHINESE_FONT[:] = chinese[:1]
    family = list(plt.rcParams["font.family"])
    if chinese and chinese[0] not in family:
        plt.rcParams["font.family"] = [*(f for f in family if f != "sans-serif"), "DejaVu Sans", chinese[0]] \
            if family == ["sans-serif"] else [*family, chinese[0]]


def bilingual_figures() -> None:
    """Show this kernel's figures in both languages (call it once, in a page's set-up cell)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    import matplotlib_inline.backend_inline  # noqa: F401 - registers the inline backend's formatters first
    from matplotlib.figure import Figure

    _chinese_font_fallback()
    formatters = shell.display_formatter.formatters
    formatters["image/png"].pop(Figure, None)   # one block per figure, not a PNG beside it
    formatters["text/html"].for_type(Figure, bilingual_html)
