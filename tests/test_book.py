"""The website: builds with -W -n, and a real browser finds typeset math, working search, and no remote request."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser import browser, serve

pytestmark = pytest.mark.slow       # grades classes or drives the built site: not in `make test-fast`

CHAPTERS = ["book/ch01_qkv_softmax", "book/ch02_multihead", "book/ch03_add_norm_ffn", "book/ch04_encoder",
            "book/ch05_decoding", "book/ch06_decoder", "book/ch07_llama_gqa",
            "book/ch08_mla", "book/ch09_paged", "book/ch10_paged_kernels"]
EXERCISE_PAGES = [f"exercises/{Path(c).name}/{Path(c).name}" for c in CHAPTERS]
ZH_EXERCISE_PAGES = [f"exercises-zh/{Path(c).name}/{Path(c).name}" for c in CHAPTERS]
# The two sites: (folder under _build/html, the pages, the exercise pages).
LANGUAGES = {"en": ("", CHAPTERS, EXERCISE_PAGES), "zh": ("zh/", CHAPTERS, ZH_EXERCISE_PAGES)}
SCREENSHOTS = Path("_build") / "screenshots"


@pytest.fixture(scope="module")
def site(repo):
    """The two sites, built as `make book` builds them: English, then Chinese into _build/html/zh."""
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    subprocess.run([sys.executable, "-m", "coursekit.i18n.figures", "fresh-cache"], cwd=repo, check=True)
    run = subprocess.run([str(jupyter_book), "build", ".", "--all", "--builder", "html", "-W", "-n", "--keep-going"],
                         cwd=repo, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, "book build failed:\n" + run.stdout[-6000:] + run.stderr[-3000:]
    run = subprocess.run([sys.executable, "-m", "coursekit.i18n.book", "zh"], cwd=repo, capture_output=True, text=True,
                         timeout=1800)
    assert run.returncode == 0, "Chinese book build failed:\n" + run.stdout[-6000:] + run.stderr[-3000:]
    assert not run.stderr.strip(), "the Chinese build printed to stderr:\n" + run.stderr[-3000:]
    return repo / "_build" / "html"


def test_pages_reference_nothing_remote(site):
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        remote = re.findall(r"""<(?:script|link|img|iframe)[^>]+(?:src|href)=["'](?:https?:)?//[^"']+""", html)
        assert not remote, f"{page.relative_to(site)} loads {remote[:3]}"
        # an address inside inline code counts too: a theme extension can fetch it later from a click
        inline = " ".join(re.findall(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", html, flags=re.S))
        assert not re.search(r"https?://", inline), f"{page.relative_to(site)}: inline script with a remote address"


def test_chapter_math_renders_offline_and_search_finds_softmax(site):
    """(test_no_equation_code_or_output_runs_past_the_column screenshots each chapter, its math typeset.)"""
    with serve(site) as base, browser() as b:
        for chapter in CHAPTERS:
            b.page.goto(f"{base}/{chapter}.html", wait_until="load")
            n_math = b.wait_for_math(minimum=5)
            assert b.page.locator("mjx-container[display='true']").count() >= 1
            untypeset = b.page.locator("div.math, span.math").evaluate_all(
                "els => els.filter(e => !e.querySelector('mjx-container')).length")
            assert untypeset == 0, f"{untypeset} formulas left as raw TeX"
            assert b.page.locator(".course-figure img.course-figure-en").count() >= 2, "the chapter's figures are missing"
            assert n_math > 0
        b.page.goto(f"{base}/search.html?q=softmax", wait_until="load")
        b.page.wait_for_selector("#search-results ul.search li a", timeout=30000)
        hits = b.page.locator("#search-results ul.search li a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
        assert any("ch01_qkv_softmax" in h for h in hits), hits
        assert not b.remote_requests(), b.remote_requests()
        assert any(u.split("?")[0].endswith("tex-chtml.js") for u in b.requests), "MathJax was not loaded locally"
        assert not [f for f in b.failed if "favicon" not in f[0]], b.failed


@pytest.mark.parametrize("language", LANGUAGES)
def test_chapter_code_prints_no_warning_or_error(site, language):
    folder = LANGUAGES[language][0]
    for chapter in CHAPTERS:
        html = (site / f"{folder}{chapter}.html").read_text(encoding="utf-8")
        # myst-nb renders a cell's stderr (warnings such as a font's missing glyph) in this block.
        assert 'class="output stderr' not in html, f"{chapter}: a code cell wrote to stderr"
        assert "Traceback" not in html, f"{chapter}: a code cell raised"


def test_exercise_page_is_shown_unexecuted_with_a_download(site):
    page = (site / "exercises" / "ch01_qkv_softmax" / "ch01_qkv_softmax.html").read_text(encoding="utf-8")
    assert "NotImplementedError" in page           # the stub is shown...
    assert "Traceback" not in page                  # ...but never run
    assert "ch01_qkv_softmax.ipynb" in page         # the download button links the notebook
    assert (site / "_sources" / "exercises" / "ch01_qkv_softmax" / "ch01_qkv_softmax.ipynb").is_file()


def test_solutions_are_not_published(site):
    assert not list(site.rglob("*solution*")), "no page or file of solutions/ may be on the website"
    for page in site.rglob("*.html"):
        assert "### BEGIN SOLUTION" not in page.read_text(encoding="utf-8")


def test_chapter_6_offers_the_trained_checkpoint_for_download(site, repo):
    """A reader who downloads the exercise notebook from the website needs the weights its last exercise uses."""
    page = (site / "book" / "ch06_decoder.html").read_text(encoding="utf-8")
    links = re.findall(r'href="([^"]*_downloads/[^"]*translator_zh_en\.pt)"', page)
    assert links, "no download link for translator_zh_en.pt on the chapter 6 page"
    served = (site / "book" / links[0]).resolve()
    assert served.read_bytes() == (repo / "exercises" / "ch06_decoder" / "translator_zh_en.pt").read_bytes()


LAYOUT = """() => {
  const article = document.querySelector('article.bd-article');
  const edge = article.getBoundingClientRect().right;
  // A line of a <pre> that wraps shows as two line boxes: count the distinct tops of the text's rectangles.
  const shownLines = e => { const range = document.createRange(); range.selectNodeContents(e);
    return new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top))).size; };
  const boxes = [...document.querySelectorAll('mjx-container[display="true"]')].map(e => ['equation', e])
    .concat([...article.querySelectorAll('pre')].map(e => [e.closest('div.cell_output, div.output') ? 'output' : 'code', e]));
  return boxes.map(([kind, e]) => ({kind, text: (e.textContent || '').slice(0, 60), right: e.getBoundingClientRect().right,
    edge, width: e.scrollWidth, visible: e.clientWidth,
    lines: (e.textContent || '').replace(/\\n+$/, '').split('\\n').length, shown: shownLines(e)}));
}"""


WIDTHS = [1280, 800]     # a laptop's, then a tablet's: each page is loaded once and measured at both


@pytest.mark.parametrize("language", LANGUAGES)
def test_no_equation_code_or_output_runs_past_the_column(site, repo, language):
    """At a laptop's and a tablet's width, nothing is cut off or hidden behind a scrollbar: every displayed
    equation, code block and printed output fits the text column. At 1280 px no line of a chapter's code or output
    wraps either: the column holds the code's 120 characters, and outputs (tables, aligned numbers) are printed to
    fit. Only the exercise pages' longest test lines wrap at the column's edge (course.css).

    Each page is loaded and typeset at the first width, then the window is narrowed, as a reader would narrow it:
    the layout is CSS alone, and MathJax's output keeps its size."""
    shots = repo / SCREENSHOTS
    shots.mkdir(parents=True, exist_ok=True)
    problems = []
    with serve(site) as base, browser() as b:
        folder, chapters, exercise_pages = LANGUAGES[language]
        for chapter in chapters + exercise_pages:
            b.page.set_viewport_size({"width": WIDTHS[0], "height": 900})
            b.page.goto(f"{base}/{folder}{chapter}.html", wait_until="load")
            b.wait_for_math(minimum=1)
            for width in WIDTHS:
                b.page.set_viewport_size({"width": width, "height": 900})
                b.page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
                assert b.page.evaluate("() => window.innerWidth") == width
                boxes = b.page.evaluate(LAYOUT)
                assert any(box["kind"] == "equation" for box in boxes) or chapter in exercise_pages, chapter
                assert any(box["kind"] == "output" for box in boxes) or chapter in exercise_pages, chapter
                for box in boxes:
                    where = f"{chapter} at {width} px, {box['kind']} {box['text']!r}"
                    if box["right"] > box["edge"] + 1:
                        problems.append(f"{where}: runs past the text column")
                    if box["width"] > box["visible"] + 1:
                        problems.append(f"{where}: {box['width']} px wide in a {box['visible']} px column")
                    wraps_allowed = box["kind"] == "code" and chapter in exercise_pages   # the notebooks' test cells
                    if width == 1280 and box["kind"] != "equation" and not wraps_allowed and box["shown"] > box["lines"]:
                        problems.append(f"{where}: {box['lines']} printed lines take {box['shown']} on the page")
                # The whole page at a laptop's width; at a tablet's, the first screen (a full page there is as
                # costly again: the shots were 40% of this test's CPU time).
                b.page.screenshot(path=str(shots / f"{folder.replace('/', '-')}{chapter.replace('/', '-')}-{width}px.png"),
                                  full_page=width == WIDTHS[0])
    assert not problems, "\n".join(problems)


def test_the_intro_table_lists_every_chapter_of_the_table_of_contents(repo):
    """The intro's chapter table, against _toc.yml and each page's own title: a chapter added, renamed or
    reordered without the table fails here (the table once said chapter 9 was "coming" after it shipped)."""
    import yaml
    toc = yaml.safe_load((repo / "_toc.yml").read_text(encoding="utf-8"))
    pages = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    expected = []
    for number, page in enumerate(pages, start=1):
        title = next(line[2:] for line in (repo / f"{page}.md").read_text(encoding="utf-8").splitlines()
                     if line.startswith("# "))
        stem = page.split("/")[-1]
        expected.append((str(number), f"{number}. ", title, stem))
    rows = re.findall(r"^\| (\d+) \| \[([^\]]+)\]\(([\w]+)\.md\) \| \[notebook\]\(\.\./exercises/(\w+)/(\w+)\.ipynb\) \|$",
                      (repo / "book" / "intro.md").read_text(encoding="utf-8"), re.M)
    assert [(n, f"{n}. {t}", f) for n, t, f, _, _ in rows] == [(n, t, s) for n, _, t, s in expected], (
        "book/intro.md's chapter table must list _toc.yml's chapters in order, each with its page's title")
    assert all(d == f == s for (_, _, _, d, f), (_, _, _, s) in zip(rows, expected)), "each row links its notebook"


@pytest.mark.parametrize("upto", ["ch03", "ch07", "ch09"])
def test_a_student_copy_carries_the_site_of_its_chapters_and_no_answer(site, tmp_path, upto):
    """make student-release puts the built website of chapters 1..UPTO into the copy, so that the chapter being
    graded can be read; no line of a solution or a hidden test of chapter UPTO or later may be in it, in the
    HTML (read as text: highlighting splits code into spans) or in the downloadable sources."""
    import html

    from coursekit.student_release import write_release
    from tests.submissions import answer_lines
    out = write_release(upto, tmp_path / "copy", site=site)
    number = int(upto[2:])
    assert (out / "site" / "book" / f"{CHAPTERS[number - 1].split('/')[1]}.html").is_file(), "the graded chapter's page"
    assert not (out / "site" / "book" / f"{CHAPTERS[number].split('/')[1]}.html").exists(), "the next chapter's page"
    later = [Path(c).name for c in CHAPTERS[number - 1:]]
    answers = {line: a for a in later for line in answer_lines(a)}
    leaks = []
    for path in (out / "site").rglob("*"):
        if path.suffix not in (".html", ".md", ".ipynb", ".txt", ".js", ".py"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".html":
            text = html.unescape(re.sub(r"<[^>]+>", "", text))
        leaks += [f"{path.relative_to(out)}: {line!r} ({answers[line]})" for line in answers if line in text]
    assert not leaks, "the copy's site holds answers:\n" + "\n".join(leaks[:10])
    # the check can fail: an answer line highlighted as Pygments writes it, token by token, is found
    line = sorted(answers)[0]
    spans = "".join(f'<span class="n">{html.escape(part)}</span>' for part in re.split(r"(\W)", line) if part)
    planted = html.unescape(re.sub(r"<[^>]+>", "", f"<pre>{spans}</pre>"))
    assert line in planted


# The article's prose: code, outputs and math removed (Python's `**` is no broken emphasis).
ARTICLE_TEXT = """() => { const a = document.querySelector('article.bd-article').cloneNode(true);
  a.querySelectorAll('pre, code, mjx-container, div.cell_output, script').forEach(e => e.remove());
  return a.textContent; }"""


def test_the_chinese_site_has_every_page_translated_with_the_same_math(site, repo):
    """Each Chinese page against its English twin, in the browser: the same number of typeset display equations
    (a translated equation once showed as '::'), the chapter's number in its title (a heading written '1. ' stays
    English), Chinese text, no asterisks printed by broken emphasis, and the theme's labels in Chinese."""
    shots = repo / SCREENSHOTS
    shots.mkdir(parents=True, exist_ok=True)
    problems = []
    with serve(site) as base, browser() as b:
        for number, (page, exercise) in enumerate(zip(CHAPTERS, ZH_EXERCISE_PAGES), start=1):
            counts = {}
            for folder in ("", "zh/"):
                b.page.goto(f"{base}/{folder}{page}.html", wait_until="load")
                b.wait_for_math(minimum=1)
                counts[folder] = (b.page.locator("mjx-container[display='true']").count(),
                                  b.page.locator("mjx-container").count(),
                                  b.page.locator(".course-figure").count())
            text = b.page.evaluate(ARTICLE_TEXT)
            title = b.page.locator("article h1").first.inner_text()
            if counts[""] != counts["zh/"]:
                problems.append(f"zh/{page}: (display equations, formulas, figures) {counts['zh/']}, English {counts['']}")
            if not title.startswith(f"{number}. ") or not re.search(r"[\u4e00-\u9fff]", title):
                problems.append(f"zh/{page}: title {title!r} is not the translated chapter {number}")
            if "**" in text or re.search(r"^::", text, re.M):
                problems.append(f"zh/{page}: markup printed as text ('**' or '::')")
            if len(re.findall(r"[\u4e00-\u9fff]", text)) < len(text) / 10:
                problems.append(f"zh/{page}: mostly not Chinese")
            if b.page.get_attribute("html", "lang") != "zh-CN":
                problems.append(f"zh/{page}: <html lang> is not zh-CN")
            shown = b.page.locator(".course-figure img").evaluate_all(
                "els => els.filter(e => e.offsetWidth > 0).map(e => e.getAttribute('lang'))")
            if shown != ["zh-CN"] * counts["zh/"][2]:
                problems.append(f"zh/{page}: the figures shown are {shown}, not one Chinese image each")
            labels = b.page.evaluate("() => document.body.innerText")
            if "Contents" in labels.split("\n") or "On this page" in labels or "Search this book" in labels:
                problems.append(f"zh/{page}: an English label of the theme")
            # the course's title (sidebar, <title>) and author (footer) as the glossary's table words them
            if ("注意力机制：从 QKV 到 PagedAttention（分页注意力）" not in b.page.title()
                    or "Attention, from QKV" in labels or "The course authors" in labels or "课程作者" not in labels):
                problems.append(f"zh/{page}: the course's title or author is not the Chinese of the glossary "
                                f"(<title> {b.page.title()!r})")
            b.page.screenshot(path=str(shots / f"zh-{Path(page).name}.png"), full_page=False)
            b.page.goto(f"{base}/zh/{exercise}.html", wait_until="load")
            text = b.page.evaluate(ARTICLE_TEXT)
            if len(re.findall(r"[\u4e00-\u9fff]", text)) < 100 or "**" in text:
                problems.append(f"zh/{exercise}: the notebook's prose is not Chinese, or shows '**'")
        assert not b.remote_requests(), b.remote_requests()
    assert not problems, "\n".join(problems)


def test_the_themes_labels_are_chinese_and_the_switcher_sits_in_the_header(site):
    """Tooltips and screen-reader names of the Chinese pages (title, aria-label, ...) are Chinese: some are written
    by the themes in English whatever the language, and locales/zh_CN/theme.po replaces them. The English image of
    a bilingual figure, hidden there, keeps its English alt. The switcher shares the header's row with the theme's
    buttons, at a desktop's width and a phone's."""
    from coursekit.i18n.catalogs import THEME, read_po
    replaced = {m.id for m in read_po(THEME) if m.id}     # the themes' own values, Taiwan's 列印 among them
    english = {}
    for page in (site / "zh").rglob("*.html"):
        text = re.sub(r'<img class="course-figure-en"[^>]*>', "", page.read_text(encoding="utf-8"))
        text = re.sub(r'<a class="btn btn-sm course-lang-switcher".*?</a>', "", text, flags=re.S)
        for value in re.findall(r'\b(?:title|aria-label|data-bs-title|placeholder)="([^"]*)"', text):
            if value in replaced or re.search(r"[A-Za-z]{3,}", value) and not re.search(r"[\u4e00-\u9fff]", value):
                english.setdefault(value, str(page.relative_to(site)))
    assert not english, f"labels on the Chinese site not translated by locales/zh_CN/theme.po: {english}"
    with serve(site) as base, browser() as b:
        for width in (1200, 420):
            b.page.set_viewport_size({"width": width, "height": 900})
            for folder in ("", "zh/"):
                b.page.goto(f"{base}/{folder}{CHAPTERS[0]}.html", wait_until="load")
                header = b.page.locator(".bd-header-article").bounding_box()
                for item in (".course-lang-switcher", ".article-header-buttons"):
                    box = b.page.locator(item).first.bounding_box()
                    inside = box and header["y"] <= box["y"] <= box["y"] + box["height"] <= header["y"] + header["height"] + 1
                    assert inside, f"{folder}{CHAPTERS[0]} at {width}px: {item} {box} outside the header {header}"


def test_the_language_switcher_leads_to_the_same_page_and_back(site):
    """Every page of both sites links to its twin in the other language, and the twin links back."""
    pages = ["book/intro", *CHAPTERS, *EXERCISE_PAGES]
    with serve(site) as base, browser() as b:
        for page in pages:
            start = f"{base}/{page}.html"
            b.page.goto(start, wait_until="load")
            switcher = b.page.locator("a.course-lang-switcher")
            assert switcher.count() == 1 and switcher.inner_text().strip() == "中文", page
            switcher.click()
            b.page.wait_for_load_state("load")
            expected = f"{base}/zh/{page.replace('exercises/', 'exercises-zh/')}.html"
            assert b.page.url == expected, (page, b.page.url)
            assert b.page.get_attribute("html", "lang") == "zh-CN"
            back = b.page.locator("a.course-lang-switcher")
            assert back.inner_text().strip() == "English", page
            back.click()
            b.page.wait_for_load_state("load")
            assert b.page.url == start, (page, b.page.url)
        # the search page's query goes along both ways
        b.page.goto(f"{base}/search.html?q=softmax", wait_until="load")
        b.page.locator("a.course-lang-switcher").click()
        b.page.wait_for_load_state("load")
        assert b.page.url == f"{base}/zh/search.html?q=softmax", b.page.url
        b.page.locator("a.course-lang-switcher").click()
        b.page.wait_for_load_state("load")
        assert b.page.url == f"{base}/search.html?q=softmax", b.page.url


@pytest.mark.parametrize("query,pages", [
    ("注意力", ["book/ch01_qkv_softmax", "book/ch02_multihead"]),
    ("键值缓存", ["book/ch05_decoding", "book/ch07_llama_gqa", "book/ch09_paged"]),
])
def test_chinese_search_finds_the_pages(site, query, pages):
    """Sphinx's Chinese search cuts words with jieba; 键值缓存 is one glossary word (coursekit/i18n/glossary.py)."""
    with serve(site) as base, browser() as b:
        b.page.goto(f"{base}/zh/search.html?q={query}", wait_until="load")
        b.page.wait_for_selector("#search-results ul.search li a", timeout=30000)
        b.page.wait_for_function("() => !document.querySelector('#search-progress') || "
                                 "document.querySelector('#search-progress').innerText !== ''", timeout=30000)
        hits = b.page.locator("#search-results ul.search li a").evaluate_all(
            "els => els.map(e => new URL(e.href).pathname)")
        for page in pages:
            assert f"/zh/{page}.html" in hits, (query, page, hits)
        assert all(h.startswith("/zh/") for h in hits), f"an English page among the Chinese results: {hits}"


# The chapter that teaches each term, which a search for it on the Chinese site must list among its first three.
TAUGHT_IN = {"分页注意力": "book/ch09_paged", "连续批处理": "book/ch09_paged", "分块预填充": "book/ch09_paged",
             "访存受限": "book/ch10_paged_kernels", "多头潜在注意力": "book/ch08_mla", "键值缓存": "book/ch05_decoding"}
TEX = re.compile(r"\\[A-Za-z]+|\\[()\[\]]")   # \top, \text, \( ... \): TeX source shown as text
# Each result of the search page, once all are listed with their snippets (fetched one page at a time).
SEARCH_RESULTS = """() => {
  const items = [...document.querySelectorAll('#search-results ul.search li')];
  if (!document.querySelector('#search-results p.search-summary')?.innerText
      || !items.every(li => li.querySelector('p.context'))) return null;
  return items.map(li => [new URL(li.querySelector('a').href).pathname, li.querySelector('p.context').textContent]);
}"""


def _search(b, base: str, folder: str, query: str) -> list[tuple[str, str]]:
    """(page, snippet) of each result of a search of the site in `folder`, in the order shown."""
    b.page.goto(f"{base}/{folder}search.html?q={query}", wait_until="load")
    return b.page.wait_for_function(SEARCH_RESULTS, timeout=60000).json_value()


def test_a_search_finds_the_chapter_that_teaches_a_term_and_shows_plain_snippets(site, repo):
    """On the Chinese site a search for each of the course's key terms lists the chapter that teaches it among its
    first three results (jieba with the glossary, coursekit/sphinx_i18n.py). No snippet, in either language, shows
    the language switcher's label or TeX source (_static/course-search.js): they are made from the page's HTML
    before MathJax typesets it."""
    shots = repo / SCREENSHOTS
    shots.mkdir(parents=True, exist_ok=True)
    problems = []
    with serve(site) as base, browser() as b:
        for query, chapter in TAUGHT_IN.items():
            results = _search(b, base, "zh/", query)
            first = [page for page, _ in results[:3]]
            if f"/zh/{chapter}.html" not in first:
                problems.append(f"{query}: {chapter} is not among the first three results {first}")
            for page, snippet in results:
                if "English" in snippet or TEX.search(snippet):
                    problems.append(f"{query}: the snippet of {page} shows the switcher or TeX: {snippet[:160]!r}")
            if query == "键值缓存":
                b.page.screenshot(path=str(shots / "zh-search.png"), full_page=False)
        for query in ("softmax", "KV cache", "causal mask"):
            for page, snippet in _search(b, base, "", query):
                if snippet.lstrip(".").lstrip().startswith("中文") or TEX.search(snippet):
                    problems.append(f"{query}: the snippet of {page} shows the switcher or TeX: {snippet[:160]!r}")
        # a formula's TeX as a snippet writes it
        plain = b.page.evaluate("() => [String.raw`\\(QK^\\top\\)`, String.raw`\\(d_{\\text{model}}\\)`,"
                                " String.raw`\\(\\frac{QK^\\top}{\\sqrt{d_k}}\\)`].map(window.coursePlainMath)")
        assert plain == ["QKᵀ", "d_model", "(QKᵀ)/(√d_k)"], plain
        # a translated formula on its Chinese page (coursekit/sphinx_i18n.py, FormulaMessages), for a look
        b.page.goto(f"{base}/zh/book/ch01_qkv_softmax.html", wait_until="load")
        b.wait_for_math(minimum=5)
        formula = b.page.locator("div.math", has_text="若查询").first
        formula.scroll_into_view_if_needed()
        b.page.screenshot(path=str(shots / "zh-translated-formula.png"), full_page=False)
        assert not b.remote_requests(), b.remote_requests()
    assert not problems, "\n".join(problems)


def test_the_chinese_exercise_page_offers_the_chinese_notebook(site, repo):
    page = (site / "zh" / "exercises-zh" / "ch01_qkv_softmax" / "ch01_qkv_softmax.html").read_text(encoding="utf-8")
    assert "NotImplementedError" in page and "Traceback" not in page
    served = site / "zh" / "_sources" / "exercises-zh" / "ch01_qkv_softmax" / "ch01_qkv_softmax.ipynb"
    assert served.read_bytes() == (repo / "exercises-zh" / "ch01_qkv_softmax" / "ch01_qkv_softmax.ipynb").read_bytes()


def test_every_figure_is_drawn_in_chinese_with_the_current_catalog(site):
    """Each figure's words (titles, axis labels, legends, texts) have a translation in locales/zh_CN/figures.po,
    and the catalog holds exactly the words the figures have (`make i18n-extract` after `make book`)."""
    from coursekit.figures import FIGURES_PO
    from coursekit.i18n.catalogs import read_po
    from coursekit.i18n.figures import figure_blocks, site_words
    catalog = {m.id: m for m in read_po(FIGURES_PO) if m.id}
    words = site_words(site)
    assert words, "no figure words found: is the site built with coursekit.figures?"
    assert set(catalog) == set(words), (f"figures.po is stale: missing {sorted(set(words) - set(catalog))[:5]}, "
                                        f"unused {sorted(set(catalog) - set(words))[:5]}: run `make i18n-extract`")
    for page in sorted((site / "zh" / "book").glob("*.html")):
        for block_words, untranslated in figure_blocks(page):
            assert not untranslated, f"{page.name}: a figure drawn without the translation of {untranslated}"
