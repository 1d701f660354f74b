"""The Chinese edition without a browser: the configuration both builds share, the catalogs (complete, current,
and faithful to the English's math, code and links), the Chinese notebooks (the English release but for the
prose), the glossary, and the learner's choice of language (make lab LANG=zh, make refresh)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from coursekit.i18n import lint
from coursekit.i18n.book import ZH_OVERRIDES, build, chinese_toc, toc_captions
from coursekit.i18n.catalogs import PAGES, all_catalogs, keys, read_po, templates
from coursekit.i18n.notebooks import ZH_EXERCISES, catalog_path, markdown_messages, notebook_language, template
from coursekit.sync import chapter_notebooks

ASSIGNMENTS = [nb.parent.name for nb in chapter_notebooks()]


def test_both_builds_share_the_configuration_and_the_cache(repo):
    from jupyter_book.config import get_final_config
    config, _ = get_final_config(user_yaml=repo / "_config.yml", sourcedir=repo,
                                 cli_config={**ZH_OVERRIDES, "latex_individualpages": False})
    assert "coursekit.sphinx_i18n" in config["extensions"], "the course's extension (listed `extensions` drop local ones)"
    assert config["gettext_compact"] is False, "one catalog per page, or the HTML build comes out all English"
    assert config["nb_execution_cache_path"] == "_build/.jupyter_cache", "one execution cache for both languages"
    assert config["language"] == "zh_CN" and config["locale_dirs"] == ["locales/"]
    theme = config["html_theme_options"]
    assert theme["search_bar_text"] != "Search this book..." and theme["home_page_in_toc"] is True, \
        "the override changes the search label and keeps the other theme options"
    assert "lang-switcher.html" in theme["article_header_end"]
    assert "exercises-zh/*/*.ipynb" in config["nb_execution_excludepatterns"], "the Chinese notebooks are not run"


def test_every_catalog_is_translated_and_faithful():
    """No untranslated or fuzzy message; the same math, code and links as the English; the glossary's terms."""
    catalogs = all_catalogs()
    # _toc, 11 pages, one per notebook, figures, theme
    assert len(catalogs) == 1 + 11 + len(ASSIGNMENTS) + 2, catalogs
    problems = [p for path in catalogs for p in lint.check_catalog(path)]
    assert not problems, "\n".join(problems[:40])


@pytest.mark.parametrize("english,chinese,expected", [
    ("The $QK^\\top$ product", "乘积 $QK^T$", "math differ"),
    ("Call `softmax(x)`", "调用 `softmax(y)`", "code spans differ"),
    ("See [chapter 2](ch02.md)", "见[第 2 章](ch03.md)", "link targets differ"),
    ("1. Q, K, V and softmax", "1. Q、K、V 与 softmax", "starts with '1. '"),
    ("**Numerical stability.** Written", "**数值稳定性。**按字面写", "printed as asterisks"),
    ("the **KV cache** here", "这里的**“KV 缓存”**的", "printed as asterisks"),
    ("tokens and attention", "词元与\n注意力", "line break inside Chinese"),
    ("every token", "每个令牌", "'令牌'"),
    ("the self-attention layer", "这一层", "glossary: the English says 'self-attention'"),
    # what a glossary row's note rules out: "not …" and "never …"
    ("Orca schedules per iteration instead", "Orca 改为按迭代调度", "'按迭代调度'"),
    ("the engine's bookkeeping", "引擎的簿记工作", "'簿记'"),
    ("in numbers (elements)", "以数的个数计", "'数的个数'"),
    ("a step of one row is memory-bound", "单行的步受内存限制", "'受内存限制'"),
    ("Decode attention is limited by memory", "解码注意力受限于访存", "'受限于访存'"),
    ("580 TFLOPS in compute-bound ones", "在算力受限的配置下可达 580 TFLOPS", "'算力受限'"),
    ("a program written for one tile of the work", "针对工作中的一个分片编写的程序", "'分片'"),
    ("a program written for one tile of the work", "针对工作中的一个分块编写的程序", "'分块'"),
    ("decoding is limited by memory bandwidth", "解码受限于显存带宽", "'受限于显存带宽'"),
    ("compute-bound rather than memory-bound", "计算受限、而非带宽受限", "'带宽受限'"),
    ("an output layer tied to its token embedding", "输出层与词元嵌入绑定", "'绑定'"),
    ("Capstone: SmolLM2 on attnlab", "收官：在 attnlab 上运行 SmolLM2", "'收官'"),
    ("chapter 6 builds a translator", "第 6 章会构建一个翻译器", "'翻译器'"),
    ("run the test cell below it", "运行它下面的测试单元", "glossary: the English says 'cell'"),
    # a row's English in brackets is not its translation
    ("the ridge point of its roofline", "它的屋顶线模型（roofline）的脊点（ridge point）",
     "glossary: the English says 'ridge point'"),
    ("PagedAttention wastes less of it", "分页注意力则减少对它的浪费", "'分页注意力'"),
    # the recurring headings: one wording
    ("What you build in the exercises", "你将在练习中实现的内容", "a recurring heading"),
    ("Attention, from QKV to PagedAttention", "注意力机制：从 QKV 到 PagedAttention", "a recurring heading"),
    # prose inside a formula's \text{} is translated; the rest of the formula is not touched
    ("$$\n\\text{bytes per token} = 2 L\n$$", "$$\n\\text{bytes per token} = 2 L\n$$", "English prose in a formula"),
    ("$$\\text{score} = q^\\top k$$", "$$\\text{score} = q^\\top k$$", "English prose in a formula"),
    ("$M_{ij} = 0 \\text{ otherwise.}$", "$M_{ij} = 0 \\text{ otherwise.}$", "English prose in a formula"),
    ("$G \\ \\text{FLOP per byte}$", "$G \\ \\text{每 byte FLOP}$", "English prose in a formula"),
    ("$\\sum_{j \\in \\text{block}} e^{s_j}$", "$\\sum_{j \\in \\text{block}} e^{s_j}$", "English prose in a formula"),
    ("$m_t \\text{ the mask.}$", "$m_t \\text{ the 掩码。}$", "English prose in a formula"),
    ("$\\text{shape } (t, T)$", "$\\text{shape } (t, T)$", "English prose in a formula"),
    ("$M_{ij} = 0 \\text{ if query } i$", "$M_{ij} = 1 \\text{ 若查询 } i$", "math differ"),
    ("$M_{ij} = 0 \\text{ if query } i$", "$M_{ij} = 0 \\text{ 若查询 } j$", "math differ"),
    # ranges of numbers: the wave dash, and a percentage's sign at both ends
    ("only 20.4-38.2% of it", "只有 20.4-38.2% 的", "'20.4%～38.2%'"),
    ("only 20.4-38.2% of it", "只有 20.4～38.2% 的", "'20.4%～38.2%'"),
    ("chapters 1-7", "第 1-7 章", "'1～7'"),
    ("chapters 1–7", "第 1–7 章", "'1～7'"),
])
def test_the_lint_catches_each_fault(english, chinese, expected):
    problems = lint.check_message(english, chinese, page=True)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("english,chinese", [
    ("**Numerical stability.** Written", "**数值稳定性**。按字面写"),
    ("the **KV cache** here", "这里的“**KV 缓存**”"),
    ("The {doc}`exercise notebook <../exercises/a/a>` asks", "{doc}`练习笔记本 <../exercises/a/a>`要求"),
    ("1. Q, K, V and softmax", "1\\. Q、K、V 与 softmax"),
    ("Orca schedules per iteration instead", "Orca 改为迭代级调度（iteration-level scheduling）"),
    ("the engine's bookkeeping", "引擎的调度与元数据管理"),
    ("in numbers (elements)", "以元素个数计"),
    ("**Memory-bound, or compute-bound.** It reads", "**访存受限，还是计算受限**。它读取"),
    ("Decode attention is limited by memory", "解码注意力是访存受限的"),
    ("a program written for one tile of the work", "针对工作中的一个 tile 编写的程序"),
    ("each chunk of a prompt", "提示词的每个分块"),      # 分块 is chunked prefill's, where no tile is meant
    ("the ridge point of its roofline", "它的屋顶线模型（roofline）的拐点（ridge point）"),
    ("PagedAttention wastes less of it", "PagedAttention（分页注意力）则减少对它的浪费"),
    ("an output layer tied to its token embedding", "输出层与词元嵌入共享权重"),
    ("Capstone: SmolLM2 on attnlab", "综合实践：在 attnlab 上运行 SmolLM2"),
    ("chapter 6 builds a translator", "第 6 章会构建一个翻译模型"),
    ("run the test cell below it", "运行它下面的测试单元格"),
    ("What you build in the exercises", "练习内容"),
    ("Attention, from QKV to PagedAttention", "注意力机制：从 QKV 到 PagedAttention（分页注意力）"),
    # a formula may differ only inside \text{}, and keeps English there only as a name
    ("$$\n\\text{bytes per token} = 2 L\n$$", "$$\n\\text{每词元字节数} = 2 L\n$$"),
    ("$M_{ij} = 0 \\text{ if query } i \\text{ may attend to key } j$", "$M_{ij} = 0 \\text{ 若查询 } i \\text{ 可关注键 } j$"),
    ("$G \\ \\text{FLOP per byte}$", "$G \\ \\text{FLOP/字节}$"),            # a unit keeps its capitals
    ("$d_{\\text{model}} = 512$ and $\\text{softmax}(x)$", "$d_{\\text{model}} = 512$，$\\text{softmax}(x)$"),
    ("$n_{\\text{kv\\_heads}}$ groups", "$n_{\\text{kv\\_heads}}$ 组"),       # a subscript label, an identifier
    ("$\\text{mask}[i, j] = \\text{True}$", "$\\text{mask}[i, j] = \\text{True}$"),  # indexed as code; a constant
    ("at $\\text{past}+i$ after `past` tokens", "`past` 个词元之后的 $\\text{past}+i$ 处"),  # written as code too
    ("$\\text{CrossAttention}(X, C)$", "$\\text{CrossAttention}(X, C)$"),
    ("only 20.4-38.2% of it", "只有 20.4%～38.2% 的"),
    ("chapters 1-7, positions `0-12`", "第 1～7 章，位置 `0-12`"),       # code is not prose
    ("Llama-3-8B at $t - 1$ on 2026-12-05, GPT-2", "2026-12-05 在 $t - 1$ 处的 Llama-3-8B，GPT-2"),
])
def test_the_lint_accepts_correct_chinese(english, chinese):
    assert lint.check_message(english, chinese, page=True) == []


def test_the_lint_wants_a_terms_full_form_at_its_first_mention_on_a_page(tmp_path):
    """KV 缓存（键值缓存，KV Cache）: in full at the first mention on a page (a title before it may keep the short
    form), and only there."""
    from babel.messages.catalog import Catalog

    from coursekit.i18n.catalogs import write_po

    def problems(*messages):
        catalog = Catalog(locale="zh_CN")
        for english, chinese in messages:
            catalog.add(english, chinese)
        path = tmp_path / "page.po"
        write_po(path, catalog)
        return [p for p in lint.check_catalog(path) if "first mention" in p]

    title = ("# Decoding with a KV cache", "# 基于 KV 缓存的解码")
    first, later = "A KV cache holds the keys.", "The KV-cache memory grows."
    assert problems(title, (first, "KV 缓存（键值缓存，KV Cache）保存键。"), (later, "KV 缓存占用的内存会增长。")) == []
    late = problems(title, (first, "KV 缓存保存键。"), (later, "KV 缓存（键值缓存，KV Cache）占用的内存会增长。"))
    assert any("the first mention of 'KV cache'" in p for p in late), late
    assert any("only at the first mention" in p for p in late), late
    assert problems(("PagedAttention on a GPU", "GPU 上的 PagedAttention（分页注意力）")) == []
    assert problems(("PagedAttention on a GPU", "GPU 上的 PagedAttention"))


def test_the_intros_table_names_each_chapter_as_its_title_does():
    """The Chinese intro's chapter table and the sidebar (the chapters' titles) give the same words: no English
    gloss in one that the other lacks. Only a glossary term's full form at the page's first mention may differ
    (KV 缓存（键值缓存，KV Cache）; a title keeps the short form)."""
    import re as regex

    from coursekit.i18n.glossary import entries
    full_forms = {e.full: e.main[0] for e in entries() if "first mention" in e.note}

    def short(text: str) -> str:
        for full, main in full_forms.items():
            text = text.replace(full, main)
        return regex.sub(r"\s+", "", text)   # 'PagedAttention（分页注意力）与' is 'PagedAttention 与' when short

    rows = {}
    for message in read_po(PAGES / "book" / "intro.po"):
        row = regex.fullmatch(r"\[(.+)\]\((ch\d\d_\w+)\.md\)", message.string or "")
        if row:
            rows[row.group(2)] = short(row.group(1))
    assert len(rows) == len(ASSIGNMENTS), rows
    for page, row in rows.items():
        title = next(m.string for m in read_po(PAGES / "book" / f"{page}.po") if m.id)
        assert row == short(regex.sub(r"^\d+\\\. ", "", title)), (page, row, title)


def test_the_glossary_reads_its_terms_and_its_recurring_headings():
    from coursekit.i18n.glossary import entries, headings
    wording = {h.english: h.chinese for h in headings()}
    assert wording["What you build in the exercises"] == "练习内容"
    assert wording["Attention, from QKV to PagedAttention"] == "注意力机制：从 QKV 到 PagedAttention（分页注意力）"
    rows = {e.english[0]: e for e in entries()}
    assert not set(wording) & {english for e in entries() for english in e.english}, "a heading read as a term"
    assert rows["KV cache"].chinese == ("KV 缓存", "键值缓存", "KV Cache")
    assert rows["memory-bound"].rejected == ("受内存限制", "受限于访存", "算力受限", "带宽受限", "受限于显存带宽")
    assert rows["tile"].rejected == () and rows["tile"].rejected_here == ("分片", "分块")
    assert "of an engine" not in rows["bookkeeping"].english, "a bracket that says which sense is meant"


def test_the_catalogs_match_a_fresh_extraction(repo, tmp_path):
    """The pages' messages as Sphinx extracts them now (a gettext build, nothing executed), and the notebooks'
    markdown cells: a catalog that misses a message or keeps a removed one is stale (`make i18n-extract`)."""
    status = build("gettext", tmp_path / "gettext", tmp_path / "doctrees", {"nb_execution_mode": "off"})
    assert status == 0
    found = templates(tmp_path / "gettext")
    pages = {pot: po for pot, po in found.items() if "exercises" not in pot.parts}
    assert {po.relative_to(PAGES) for po in pages.values()} | {Path("_toc.po")} == \
        {p.relative_to(PAGES) for p in PAGES.rglob("*.po")}, "a page without a catalog, or a catalog without a page"
    for pot, po in pages.items():
        assert keys(read_po(pot)) == keys(read_po(po)), f"{po} is stale: run `make i18n-extract`"
    import yaml
    captions = toc_captions(yaml.safe_load((repo / "_toc.yml").read_text(encoding="utf-8")))
    assert {m.id for m in read_po(PAGES / "_toc.po") if m.id} == set(captions)
    for assignment in ASSIGNMENTS:
        release = json.loads((repo / "exercises" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
        assert keys(template(release)) == keys(read_po(catalog_path(assignment))), \
            f"locales/zh_CN/notebooks/{assignment}.po is stale: run `make i18n-extract`"


def test_the_chinese_toc_has_every_page_and_translated_captions(repo):
    import yaml
    toc = chinese_toc()
    text = json.dumps(toc, ensure_ascii=False)
    assert "exercises/" not in text and text.count("exercises-zh/") == len(ASSIGNMENTS)
    english = toc_captions(yaml.safe_load((repo / "_toc.yml").read_text(encoding="utf-8")))
    assert len(toc_captions(toc)) == len(english) and not set(toc_captions(toc)) & set(english)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_chinese_notebook_is_the_english_release_but_for_its_prose(repo, assignment):
    """Same cells, ids, order and metadata; code and test cells byte for byte; every markdown cell translated.
    This is what makes the grader treat both alike (test_zh_grading.py grades them)."""
    english = json.loads((repo / "exercises" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    chinese = json.loads((repo / ZH_EXERCISES / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    assert [(c["cell_type"], c.get("id")) for c in chinese["cells"]] == [(c["cell_type"], c.get("id")) for c in english["cells"]]
    for en, zh in zip(english["cells"], chinese["cells"]):
        assert en["metadata"] == zh["metadata"]
        if en["cell_type"] == "code":
            assert json.dumps(en, sort_keys=True) == json.dumps(zh, sort_keys=True), en.get("id")
        else:
            assert en["source"] != zh["source"], f"markdown cell {en['id']} is not translated"
    assert len({c.get("id") for c in english["cells"]}) == len(english["cells"]), "cell ids key the translations"
    assert notebook_language(chinese) == "zh_CN" and notebook_language(english) == "en"
    data = sorted(p.name for p in (repo / "exercises" / assignment).iterdir() if p.suffix != ".ipynb")
    assert data == sorted(p.name for p in (repo / ZH_EXERCISES / assignment).iterdir() if p.suffix != ".ipynb")


def test_the_search_dictionary_keeps_glossary_terms_whole():
    import jieba

    from coursekit.i18n.glossary import jieba_dictionary
    words = {line.split()[0] for line in jieba_dictionary().splitlines()}
    assert {"键值缓存", "分页注意力", "注意力", "分组查询注意力", "块表"} <= words
    tokenizer = jieba.Tokenizer()
    tokenizer.tmp_dir = None
    assert "键值缓存" not in tokenizer.lcut("使用键值缓存")   # jieba alone cuts it (so the dictionary is needed)
    for word in words:
        tokenizer.add_word(word, 1000)
    assert "键值缓存" in tokenizer.lcut("使用键值缓存")


def test_the_search_index_files_a_short_form_under_the_word_its_first_mention_glosses():
    """A title that says KV 缓存 is found by 键值缓存 as a title (the page glosses it once, in its text), and one
    that says PagedAttention by 分页注意力; other text is cut as Sphinx's Chinese search cuts it."""
    from sphinx.search.zh import SearchChinese

    from coursekit.sphinx_i18n import glossary_search_language
    language = glossary_search_language()({})
    assert isinstance(language, SearchChinese)
    assert "键值缓存" in language.split("带掩码的自注意力与基于 KV 缓存的解码")
    assert "分页注意力" in language.split("GPU 上的 PagedAttention：Triton 核函数")
    plain = "多头潜在注意力的潜在缓存"
    assert language.split(plain) == SearchChinese({}).split(plain)


def _answered(repo: Path, folder: str, assignment: str, answer: str) -> nbformat.NotebookNode:
    nb = nbformat.read(repo / folder / assignment / f"{assignment}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answer
    return nb


def test_make_lab_lang_zh_copies_the_chinese_notebooks_and_refresh_keeps_the_language(repo, tmp_path):
    """`make lab LANG=zh` on an empty work/ gives Chinese notebooks; `make refresh` of a Chinese copy keeps it
    Chinese (it once turned it back to English) and keeps the answers; `make refresh LANG=en` switches it."""
    from coursekit.refresh import refresh
    from coursekit.workspace import RELEASES, ensure_work
    work = tmp_path / "work"
    ensure_work(repo, work, log=lambda _: None, language="zh_CN")
    a = ASSIGNMENTS[0]
    copy = work / a / f"{a}.ipynb"
    assert copy.read_bytes() == (repo / ZH_EXERCISES / a / f"{a}.ipynb").read_bytes()
    mine = _answered(repo, ZH_EXERCISES, a, "# my answer\nx = 1")
    mine.cells[0].source = "# an older release's prose"   # as if the release changed since the copy was made
    nbformat.write(mine, copy)
    release = repo / RELEASES["zh_CN"] / a / f"{a}.ipynb"
    assert refresh(copy, release, work, log=lambda _: None)
    refreshed = nbformat.read(copy, as_version=4)
    assert notebook_language(refreshed) == "zh_CN"
    assert refreshed.cells[0].source == nbformat.read(release, as_version=4).cells[0].source
    answers = [c.source for c in refreshed.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert answers and all("# my answer" in s for s in answers)
    refresh(copy, repo / RELEASES["en"] / a / f"{a}.ipynb", work, log=lambda _: None)
    english = nbformat.read(copy, as_version=4)
    assert notebook_language(english) == "en"
    assert [c.source for c in english.cells if c.cell_type == "markdown"] == \
        [c.source for c in nbformat.read(repo / "exercises" / a / f"{a}.ipynb", as_version=4).cells if c.cell_type == "markdown"]
    assert all("# my answer" in c.source for c in english.cells if c.metadata.get("nbgrader", {}).get("solution"))


def test_make_lab_in_another_language_says_what_becomes_of_the_notebooks_already_in_work(repo, tmp_path):
    """`make lab LANG=zh` over English notebooks copies nothing over them, and says so plainly each time: which
    notebooks stay as they are, and the command that switches them with the answers kept."""
    from coursekit.workspace import ensure_work
    work = tmp_path / "work"
    ensure_work(repo, work, log=lambda _: None)                              # English copies, as `make lab` makes
    a = ASSIGNMENTS[0]
    english = (work / a / f"{a}.ipynb").read_bytes()
    for _ in range(2):                                                       # asked once, and asked again
        said = []
        ensure_work(repo, work, log=said.append, language="zh_CN")
        note = next((line for line in said if line.startswith("note: new notebooks")), said)
        assert "in Chinese" in note and f"the {len(ASSIGNMENTS)} already in work/ ({a[:4]}," in note, note
        assert "stay as they are" in note and "`make refresh LANG=zh` switches them, keeping your answers" in note
    assert (work / a / f"{a}.ipynb").read_bytes() == english, "a learner's notebook is never overwritten"


def test_make_takes_the_language_from_its_command_line_only(repo):
    """The shell's LANG is a locale, not a choice: `make lab` with LANG=en_US.UTF-8 in the environment is not
    Chinese and not an error, and the commands run with a valid locale."""
    import os
    env = {**os.environ, "LANG": "zh_CN.UTF-8"}
    plain = subprocess.run(["make", "-n", "lab"], cwd=repo, env=env, capture_output=True, text=True)
    assert '--lang ""' in plain.stdout, plain.stdout
    chosen = subprocess.run(["make", "-n", "lab", "LANG=zh"], cwd=repo, capture_output=True, text=True)
    assert '--lang "zh"' in chosen.stdout and "LANG=C.UTF-8" in chosen.stdout, chosen.stdout
    refresh = subprocess.run(["make", "-n", "refresh", "LANG=en"], cwd=repo, capture_output=True, text=True)
    assert '--lang "en"' in refresh.stdout, refresh.stdout
    bad = subprocess.run([sys.executable, "-m", "coursekit.refresh", "--lang", "fr"], cwd=repo, capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "LANG=zh" in bad.stderr + bad.stdout


def test_a_learner_with_notebooks_of_both_languages_gets_no_false_note(repo, tmp_path):
    """Each copy is compared with the release of its own language: after switching, `make lab` says nothing
    changed when nothing did (the record's fingerprints are of the release each copy came from)."""
    from coursekit.workspace import ensure_work
    work = tmp_path / "work"
    notes: list[str] = []
    ensure_work(repo, work, log=notes.append)                       # English copies
    ensure_work(repo, work, log=notes.append, language="zh_CN")     # asks for Chinese: existing copies stay
    notes.clear()
    ensure_work(repo, work, log=notes.append)
    ensure_work(repo, work, log=notes.append, language="en")
    assert not [n for n in notes if "has changed" in n], notes


def test_sync_keeps_a_learners_answers_in_exercises_zh_but_not_a_translators_edits(repo, tmp_path):
    """`make sync` copies a notebook of exercises-zh/ into work/ before replacing it only when someone typed an
    answer or added a cell there; a changed translation (the normal translate-then-sync loop) is no answer."""
    from coursekit.release import same_answers_and_cells
    a = ASSIGNMENTS[0]
    release = (repo / ZH_EXERCISES / a / f"{a}.ipynb").read_bytes()
    nb = nbformat.reads(release.decode(), as_version=4)
    nb.cells[0].source = "# 另一种译法"
    retranslated = nbformat.writes(nb).encode()
    assert same_answers_and_cells(retranslated, release)
    answered = nbformat.reads(release.decode(), as_version=4)
    next(c for c in answered.cells if c.metadata.get("nbgrader", {}).get("solution")).source = "x = 1  # mine"
    assert not same_answers_and_cells(nbformat.writes(answered).encode(), release)
    added = nbformat.reads(release.decode(), as_version=4)
    added.cells.append(nbformat.v4.new_markdown_cell("我的笔记"))
    assert not same_answers_and_cells(nbformat.writes(added).encode(), release)


def test_a_display_formula_with_prose_is_a_message_and_its_translation_is_shown_unparsed(tmp_path):
    """A page's display formula whose \\text{} holds prose is extracted between `$$` lines, and the Chinese build
    shows its translation as a formula (Sphinx's own translation of math would print '::'); a formula with names
    only is no message."""
    from babel.messages.catalog import Catalog

    from coursekit.i18n.catalogs import write_po
    from coursekit.i18n.formulas import formula_message

    prose, names = "\\text{bytes per token} = 2 L", "d_{\\text{model}} = \\text{softmax}(x)"
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        "extensions = ['myst_parser', 'coursekit.sphinx_i18n']\nmyst_enable_extensions = ['dollarmath']\n"
        "locale_dirs = ['locales/']\ngettext_compact = False\n", encoding="utf-8")
    (source / "index.md").write_text(f"# Page\n\nText.\n\n$$\n{prose}\n$$\n\n$$\n{names}\n$$\n", encoding="utf-8")

    def sphinx(builder: str, *options: str) -> Path:
        out = tmp_path / builder
        run = subprocess.run([sys.executable, "-m", "sphinx", "-b", builder, "-W", "-q", *options, str(source), str(out)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
        return out

    extracted = {m.id for m in read_po(sphinx("gettext") / "index.pot") if m.id}
    assert formula_message(prose) in extracted and not any(names in m for m in extracted), extracted
    catalog = Catalog(locale="zh_CN")
    catalog.add(formula_message(prose), formula_message("\\text{每词元字节数} = 2 L"))
    write_po(source / "locales" / "zh_CN" / "LC_MESSAGES" / "index.po", catalog)
    html = (sphinx("html", "-D", "language=zh_CN") / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<div class="math[^"]*">\s*\\\[\\text\{每词元字节数\} = 2 L\\\]</div>', html), html
    assert "bytes per token" not in html and "::" not in html
