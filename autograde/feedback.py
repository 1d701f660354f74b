"""Preprocessors and a filter for the feedback HTML: offline math and no view of the hidden tests."""
from __future__ import annotations

import sysconfig
from functools import lru_cache
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

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


class MinimalTestTracebacks(Preprocessor):
    """Show a failed test cell's error type and message only.

    IPython's traceback quotes the source lines around the failure, which for a hidden test would
    print the hidden test itself; the assertion message already says what to look at.
    """

    enabled = Bool(True)   # nbconvert preprocessors are off unless enabled

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
