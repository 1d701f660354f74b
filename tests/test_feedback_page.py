"""A feedback page shows a submission's code as text: markup a student writes in a cell (a script, an end tag, an
event handler, a comment that closes the page's own markup) is escaped, never run or parsed, in every language the
highlighter may be told the cell is in. The feedback template highlights code without nbconvert's HTML sanitizer
(autograde/templates/feedback/index.html.j2), because the highlighter's own escaping is the whole defence."""
from __future__ import annotations

import html

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert import HTMLExporter

from autograde.config import grading_config
from autograde.feedback import FeedbackExporter
from tests.submissions import submission

HOSTILE = ('x = "</pre></div><script>alert(1)</script><img src=x onerror=alert(2)>"  # --><!-- &amp; &lt;\n'
           "</textarea><style>body{display:none}</style>")


@pytest.mark.parametrize("language", [None, "python", "html", "javascript", "no-such-lexer"])
def test_a_cells_markup_is_shown_as_text(tmp_path, language):
    config = grading_config(tmp_path)
    metadata = {"magics_language": language} if language else {}
    cell = nbformat.v4.new_code_cell(HOSTILE, id="hostile", metadata=metadata)
    exporter = FeedbackExporter(config=config, template_name="feedback")
    page, _ = exporter.from_notebook_node(nbformat.v4.new_notebook(cells=[cell]), resources={
        "nbgrader": {"notebook": "sample", "score": 0, "max_score": 1}})
    body = page.split('class="input_area"', 1)[1].split("</div>", 1)[0]
    for markup in ("<script", "<img", "<style", "</pre></div>", "</textarea>", "-->"):
        assert markup not in body, f"{markup!r} reached the page as markup ({language})"
    text = html.unescape(__import__("re").sub(r"<[^>]+>", "", body))
    assert HOSTILE in text, "the code is shown whole, as the student wrote it"


@pytest.mark.parametrize("with_image", [False, True])
def test_the_feedback_exporter_gives_nbconverts_page(tmp_path, with_image):
    """FeedbackExporter skips the pass in which HTMLExporter parses its page again with BeautifulSoup: its page,
    parsed and written out as that pass does, is HTMLExporter's page. A page with an image still gets the pass
    (alt text for an image that has none) from HTMLExporter itself."""
    config = grading_config(tmp_path)
    nb = submission("ch09_paged")                     # markdown, math, long highlighted code
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)           # scores come from the gradebook while grading
    if with_image:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell('<img src="figure.png">', id="image"))
    resources = {"nbgrader": {"notebook": "ch09_paged", "score": 1, "max_score": 2}}
    ours, _ = FeedbackExporter(config=config, template_name="feedback").from_notebook_node(nb, dict(resources))
    theirs, _ = HTMLExporter(config=config, template_name="feedback").from_notebook_node(nb, dict(resources))
    assert "highlight" in ours and "MathJax" in ours
    if with_image:
        assert ours == theirs and 'alt="No description has been provided for this image"' in ours
    else:
        assert str(BeautifulSoup(ours, features="html.parser")) == theirs
