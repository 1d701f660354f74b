"""A sample feedback page, rendered as a submission's would be: what autograde/warm.py renders to warm a grading
worker's caches, and what tests check the page's offline math on."""
from __future__ import annotations

from pathlib import Path

from autograde.config import grading_config
from autograde.feedback import FeedbackExporter


def render_sample_page() -> str:
    """A notebook like a feedback page (markdown with math, a code cell, a grader's line), rendered through the
    grading config's feedback exporter: what autograde/warm.py renders to warm a worker's caches."""
    import tempfile

    import nbformat
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

    with tempfile.TemporaryDirectory(prefix="autograde-sample-") as scratch:
        config = grading_config(Path(scratch))
    prose = ("# A chapter\n\nScores $s = q k^\\top / \\sqrt{d_k}$, **bold**, `code`:\n\n"
             "$$\\mathrm{softmax}(x)_i = e^{x_i} / \\sum_j e^{x_j}$$")
    code = "import torch\n\ndef f(x: torch.Tensor) -> torch.Tensor:\n    return x.softmax(-1)"
    cells = [nbformat.v4.new_markdown_cell(prose, id="prose"),
             nbformat.v4.new_code_cell(code, id="code", outputs=[
                 nbformat.v4.new_output("stream", text="Passed: 3 / 3 points\n")])]
    exporter = FeedbackExporter(config=config, template_name="feedback")
    exporter.register_preprocessor(CSSHTMLHeaderPreprocessor, enabled=True)
    page, _ = exporter.from_notebook_node(nbformat.v4.new_notebook(cells=cells), resources={
        "nbgrader": {"notebook": "sample", "score": 3, "max_score": 3}})
    return page
