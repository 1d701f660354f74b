"""Sphinx extension for the course's two languages (English, the source, and the Chinese edition).

Listed in `_config.yml`'s `sphinx.config.extensions` (Jupyter Book drops `local_extensions` when `extensions`
is set). It does what a translated Jupyter Book does not do by itself:

- Display equations never go through Sphinx's translation, which re-parses a translated one behind a reST `::`
  that MyST does not know (the page shows "::"). One whose `\\text{}` holds prose is a message all the same, and
  its translation is put in place unparsed (FormulaMessages).
- Each page gets `other_language_url` and `other_language_label` for `i18n/templates/lang-switcher.html`: the same
  page in the other language (the English site is at the root, the Chinese one under zh/; the exercise pages
  live in exercises/ and exercises-zh/).
- In the Chinese build, the search index is cut into words by jieba with the glossary's terms as a user
  dictionary, so that 键值缓存 is one term and a query for it finds the page; a text that says KV 缓存 is filed
  under 键值缓存 too (and PagedAttention under 分页注意力), so that a chapter titled with the short form ranks first.
- In the Chinese build, the themes' labels that stay English in any language (tooltips and screen-reader names,
  some written in their templates without gettext) are replaced in the pages by those of
  locales/zh_CN/theme.po.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util import logging as sphinx_logging

# The folder of the Chinese site inside the English one, and the exercise folders of the two languages.
ZH_PREFIX = "zh/"
EXERCISES = {"en": "exercises/", "zh": "exercises-zh/"}
logger = sphinx_logging.getLogger(__name__)


def is_chinese(language: str | None) -> bool:
    return bool(language) and language.lower().startswith("zh")


class FormulaMessages(SphinxTransform):
    """Display math stays out of Sphinx's translation, which would re-parse a translated equation behind a reST
    `::` that MyST does not know (the page shows "::"). An equation is the same in every language, except for the
    prose of its `\\text{}` (coursekit/i18n/formulas.py): a formula holding prose is a message of its page's
    catalog, written between `$$` lines, and in a translated build its translation replaces the formula's text
    here, unparsed. Every other formula is no message at all."""

    default_priority = 10  # before sphinx.transforms.i18n.Locale (20), which reads the catalogs

    def apply(self, **kwargs: Any) -> None:
        from coursekit.i18n.formulas import formula_message, holds_prose

        extracting = self.app.builder.name == "gettext"
        translated = self.config.language not in (None, "en")   # the English source needs no catalog
        for node in self.document.findall(nodes.math_block):
            tex = node.astext()
            if holds_prose(tex) and extracting:
                node.rawsource = formula_message(tex)   # the message's text, as the gettext builder reads it
                continue
            if holds_prose(tex) and translated:
                self._translate(node, tex)
            node["translatable"] = False

    def _translate(self, node: nodes.math_block, tex: str) -> None:
        from coursekit.i18n.formulas import formula_message, formula_of_message

        message = formula_message(tex)
        translated = self._catalog().gettext(message)
        if translated == message:
            return   # untranslated or fuzzy: the English formula, as Sphinx shows any untranslated message
        formula = formula_of_message(translated)
        if formula is None:
            logger.warning("the translation of a formula is not written between $$ lines: %r", translated[:80],
                           location=node)
            return
        node[:] = [nodes.Text(formula)]
        node.rawsource = formula

    def _catalog(self) -> Any:
        """The page's catalog, found as sphinx.transforms.i18n.Locale finds it."""
        from os import path

        from sphinx.locale import init as init_locale
        from sphinx.util.i18n import docname_to_domain

        dirs = [path.join(self.env.srcdir, folder) for folder in self.config.locale_dirs]
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        return init_locale(dirs, self.config.language, domain)[0]


class ChineseExerciseLinks(SphinxTransform):
    """In the Chinese site, a link to an exercise notebook leads to its Chinese twin in exercises-zh/.

    The pages (and so their translations) name exercises/...; the Chinese site holds exercises-zh/ instead."""

    default_priority = 30  # after Locale (20) has put the translated text, and its links, in place

    def apply(self, **kwargs: Any) -> None:
        if not is_chinese(self.config.language):
            return
        for node in self.document.findall(addnodes.pending_xref):
            target = node.get("reftarget", "")
            if EXERCISES["en"] in target and EXERCISES["zh"] not in target:
                node["reftarget"] = target.replace(EXERCISES["en"], EXERCISES["zh"], 1)


def twin_page(pagename: str, language: str | None) -> str:
    """The page name of `pagename`'s twin in the other language's site (both sites' names are relative to
    their own root): `exercises/ch01_x/ch01_x` <-> `exercises-zh/ch01_x/ch01_x`, every other page unchanged."""
    source, target = ("zh", "en") if is_chinese(language) else ("en", "zh")
    if pagename.startswith(EXERCISES[source]):
        return EXERCISES[target] + pagename[len(EXERCISES[source]):]
    return pagename


def add_switcher_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    if not (Path(app.srcdir) / "locales" / "zh_CN").is_dir():
        return   # a book without the catalogs (a student copy) has no Chinese twin to link to
    # pathto("", 1) is the relative way from this page to its site's root ("../../" or "").
    to_root = context["pathto"]("", 1)
    if to_root in ("", "#"):
        to_root = ""
    elif not to_root.endswith("/"):
        to_root += "/"
    twin = twin_page(pagename, app.config.language) + app.builder.out_suffix
    if is_chinese(app.config.language):
        context["other_language_url"] = to_root + "../" + twin
        context["other_language_label"], context["other_language_code"] = "English", "en"
    else:
        context["other_language_url"] = to_root + ZH_PREFIX + twin
        context["other_language_label"], context["other_language_code"] = "中文", "zh-CN"


def chinese_search(app: Sphinx) -> None:
    if not is_chinese(app.config.language):
        return
    import jieba  # Sphinx's Chinese search indexes no Chinese word without it

    from coursekit.i18n.glossary import jieba_dictionary

    jieba.setLogLevel(logging.WARNING)  # it reports building its prefix dictionary on stderr, which -W fails
    work = Path(app.doctreedir)
    work.mkdir(parents=True, exist_ok=True)
    jieba.dt.tmp_dir = str(work)
    dictionary = work / "jieba_glossary.txt"
    dictionary.write_text(jieba_dictionary(), encoding="utf-8")
    app.config.html_search_options = {**(app.config.html_search_options or {}), "dict": str(dictionary)}
    app.add_search_language(glossary_search_language())


def glossary_search_language() -> type:
    """Sphinx's Chinese search language, filing a text that writes a glossary term's short form under the word
    its first mention glosses too (KV 缓存 under 键值缓存, PagedAttention under 分页注意力): a page gives the gloss
    only once, so without this a search for 键值缓存 ranks a chapter whose title says KV 缓存 like any page that
    mentions the cache once."""
    from sphinx.search.zh import SearchChinese

    from coursekit.i18n.glossary import search_synonyms

    synonyms = tuple(search_synonyms())

    class GlossarySearchChinese(SearchChinese):
        def split(self, input: str) -> list[str]:
            return super().split(input) + [word for form, word in synonyms if form in input]

    return GlossarySearchChinese


THEME_CATALOG = Path("locales") / "zh_CN" / "theme.po"
LABELS = ("title", "aria-label", "data-bs-title", "placeholder")


def translate_theme_labels(app: Sphinx, exception: Exception | None) -> None:
    """Each label attribute whose whole value is a message of theme.po gets its translation, in every page."""
    if exception is not None or app.builder.format != "html" or not is_chinese(app.config.language):
        return
    catalog = Path(app.srcdir) / THEME_CATALOG
    if not catalog.is_file():
        return
    import html as html_escaping

    from coursekit.i18n.catalogs import read_po

    labels = {html_escaping.escape(m.id): html_escaping.escape(m.string) for m in read_po(catalog) if m.id and m.string}
    if not labels:
        return   # an empty alternation would match every empty attribute (the catalog tests report the gaps)
    pattern = re.compile(rf'\b({"|".join(LABELS)})="({"|".join(map(re.escape, labels))})"')
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        translated = pattern.sub(lambda m: f'{m.group(1)}="{labels[m.group(2)]}"', text)
        if translated != text:
            page.write_text(translated, encoding="utf-8")


TEMPLATES = Path(__file__).resolve().parent / "i18n" / "templates"


def add_templates(app: Sphinx, config: Any) -> None:
    # The switcher's template travels with the extension: any book using _config.yml finds it.
    config.templates_path = [*config.templates_path, str(TEMPLATES)]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", add_templates)
    app.add_transform(FormulaMessages)
    app.add_transform(ChineseExerciseLinks)
    app.connect("html-page-context", add_switcher_context)
    app.connect("builder-inited", chinese_search)
    app.connect("build-finished", translate_theme_labels)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
