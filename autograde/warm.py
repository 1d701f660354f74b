"""Imported last by the grading workers' forkserver (worker.PRELOAD): renders one small feedback page, so that
every worker forked from it starts with the work a first page costs already done.

A worker grades one submission and exits, so each used to pay for its page's first render in a fresh
process: nbconvert compiling its templates, the sanitizer and the highlighter compiling their regular
expressions, MathJax read from disk to be inlined. That was 0.4 s of the page's 0.7 s of CPU (chapter 3).
Only caches are warmed: the page is thrown away, and nothing of a submission exists yet in this process."""
from __future__ import annotations

import tempfile
from pathlib import Path


def render_page_text() -> str:
    """A notebook like a feedback page (markdown with math, a code cell, a grader's line), rendered through the
    grading config's feedback exporter."""
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

    from autograde.config import grading_config

    with tempfile.TemporaryDirectory(prefix="autograde-warm-") as scratch:
        config = grading_config(Path(scratch))
    cells = [nbformat.v4.new_markdown_cell("# A chapter\n\nScores $s = q k^\\top / \\sqrt{d_k}$, **bold**, `code`:\n\n"
                                           "$$\\mathrm{softmax}(x)_i = e^{x_i} / \\sum_j e^{x_j}$$", id="prose"),
             nbformat.v4.new_code_cell("import torch\n\ndef f(x: torch.Tensor) -> torch.Tensor:\n    return x.softmax(-1)",
                                       outputs=[nbformat.v4.new_output("stream", text="Passed: 3 / 3 points\n")], id="code")]
    exporter = HTMLExporter(config=config, template_name="feedback")
    exporter.register_preprocessor(CSSHTMLHeaderPreprocessor, enabled=True)
    page, _ = exporter.from_notebook_node(nbformat.v4.new_notebook(cells=cells), resources={
        "nbgrader": {"notebook": "warm", "score": 3, "max_score": 3}})
    return page


def render_a_page() -> int:
    """render_page_text's length."""
    return len(render_page_text())


try:
    render_a_page()
except Exception:  # noqa: BLE001 - only a head start: a worker renders its own page either way, and says why not
    pass
