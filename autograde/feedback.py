"""Preprocessors and a filter for the feedback HTML: offline math and no view of the hidden tests."""
from __future__ import annotations

import sysconfig
from functools import lru_cache
from pathlib import Path

import json

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode
from traitlets import Bool

from autograde.messages import GRADER_ERRORS, cell_label, safe_failure_message

# MathJax 3 as shipped by the sphinx-mathjax-offline package (installed from requirements.txt).
MATHJAX_SVG = Path(sysconfig.get_paths()["purelib"]) / "sphinx-mathjax-offline" / "static" / "mathjax" / "tex-svg.js"


@lru_cache(maxsize=1)
def _mathjax_source() -> str:
    if not MATHJAX_SVG.is_file():
        raise FileNotFoundError(f"MathJax not found at {MATHJAX_SVG}: install requirements.txt (make setup)")
    source = MATHJAX_SVG.read_text(encoding="utf-8")
    # Inlined into a <script> element, so it must not close that element early.
    return source.replace("</script", "<\\/script")


def mathjax_source(_unused: str = "") -> str:
    """Jinja filter for templates/feedback/mathjax.html.j2 (an imported macro cannot see `resources`)."""
    return _mathjax_source()


class GraderWrittenOutputs(Preprocessor):
    """Replace every code cell's outputs by a line the grader writes, and name each graded cell.

    Outputs are text the submission controls, and the hidden tests ran in its kernel, where IPython keeps
    the source of every cell: an output could quote (or encode) the hidden tests. So the feedback shows, for
    a test cell, "passed" or the message autograde.messages.failure_message builds (the instructor's message
    of the failing assert, in full), and nothing for other cells. Each test cell also gets the name the
    summary at the top of the page lists (its docstring's first line).
    """

    enabled = Bool(True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        meta = cell.metadata.get("nbgrader", {})
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not meta.get("grade"):
            # Only the grader's own verdicts on a cell (stopped at its timeout, killed its kernel) are shown.
            stopped = [e for e in errors if e.get("ename") in GRADER_ERRORS]
            cell.outputs = [NotebookNode(output_type="stream", name="stdout",
                                         text=safe_failure_message(cell.source, stopped[0]) + "\n")] if stopped else []
            return cell, resources
        text = "passed\n" if not errors else safe_failure_message(cell.source, errors[0]) + "\n"
        cell.metadata["feedback"] = {"label": cell_label(cell.source, meta.get("grade_id", "")),
                                     "passed": not errors}
        cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=text)]
        return cell, resources


class RedactHiddenEcho(Preprocessor):
    """Remove any output that quotes a hidden test line.

    The hidden tests run in the student's kernel, so code that ran before them can read their source
    (IPython keeps it) and print it in a later output. Runs before ClearHiddenTests, while the test
    cells still hold the hidden source it looks for.
    """

    enabled = Bool(True)
    min_chars = 20

    def preprocess(self, nb, resources):
        hidden = set()
        for cell in nb.cells:
            if "### BEGIN HIDDEN TESTS" in cell.source:
                part = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
                hidden |= {line.strip() for line in part.splitlines() if len(line.strip()) >= self.min_chars}
        visible = {line.strip() for cell in nb.cells
                   for line in cell.source.replace("### BEGIN HIDDEN TESTS", "\0").split("\0")[0].splitlines()}
        hidden -= visible
        if not hidden:
            return nb, resources
        for cell in nb.cells:
            for index, output in enumerate(cell.get("outputs", [])):
                text = json.dumps(output, ensure_ascii=False)
                if any(json.dumps(line, ensure_ascii=False)[1:-1] in text or line in text for line in hidden):
                    cell.outputs[index] = NotebookNode(
                        output_type="stream", name="stdout",
                        text="[output removed by the grader: it quoted hidden test code]\n")
        return nb, resources


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTMLExporter without its last step, which parses the finished page again with BeautifulSoup
    (pure Python) to give an <img> that has no alt text one, and the cells of the lab template a tabindex.

    A feedback page has neither: it uses the classic template, and GraderWrittenOutputs replaces every output, so
    no image is left but those the markdown gives, with their own alt. That step was half the CPU of rendering a
    page: 0.7 s of chapter 9's, whose highlighted code makes 15,000 tags. A page with an <img> anyway takes
    HTMLExporter's whole path, the step included."""

    def from_notebook_node(self, nb: NotebookNode, resources: dict | None = None, **kw) -> tuple[str, dict]:
        # HTMLExporter.from_notebook_node (nbconvert 7, pinned) up to its template render
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        self.register_filter("highlight_code",
                             self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata,
                                                                       parent=self, resources=resources))
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        if "<img" in page:
            return super().from_notebook_node(nb, resources, **kw)
        return page, resources
