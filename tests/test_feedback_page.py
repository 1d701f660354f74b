"""A feedback page shows a submission's code as text: markup a student writes in a cell (a script, an end tag, an
event handler, a comment that closes the page's own markup) is escaped, never run or parsed, in every language the
highlighter may be told the cell is in. The feedback template highlights code without nbconvert's HTML sanitizer
(autograde/templates/feedback/index.html.j2), because the highlighter's own escaping is the whole defence."""
from __future__ import annotations

import html

import nbformat
import pytest
from nbconvert import HTMLExporter

from autograde.config import grading_config

HOSTILE = ('x = "</pre></div><script>alert(1)</script><img src=x onerror=alert(2)>"  # --><!-- &amp; &lt;\n'
           "</textarea><style>body{display:none}</style>")


@pytest.mark.parametrize("language", [None, "python", "html", "javascript", "no-such-lexer"])
def test_a_cells_markup_is_shown_as_text(tmp_path, language):
    config = grading_config(tmp_path)
    metadata = {"magics_language": language} if language else {}
    cell = nbformat.v4.new_code_cell(HOSTILE, id="hostile", metadata=metadata)
    exporter = HTMLExporter(config=config, template_name="feedback")
    page, _ = exporter.from_notebook_node(nbformat.v4.new_notebook(cells=[cell]), resources={
        "nbgrader": {"notebook": "sample", "score": 0, "max_score": 1}})
    body = page.split('class="input_area"', 1)[1].split("</div>", 1)[0]
    for markup in ("<script", "<img", "<style", "</pre></div>", "</textarea>", "-->"):
        assert markup not in body, f"{markup!r} reached the page as markup ({language})"
    text = html.unescape(__import__("re").sub(r"<[^>]+>", "", body))
    assert HOSTILE in text, "the code is shown whole, as the student wrote it"
