"""The grading workers' forkserver (autograde/worker.py) imports PRELOAD once and renders one feedback page
(autograde/warm.py), so that each forked worker starts warm. The warm-up swallows its own errors (a failed head
start must not stop grading), so this checks that it does work, and that it leaves the pages as they were."""
from __future__ import annotations

import importlib
import re
import subprocess
import sys

from autograde.worker import PRELOAD
from tests.submissions import REPO


def test_every_preloaded_module_imports_and_the_warm_up_comes_last():
    for name in PRELOAD:
        importlib.import_module(name)
    assert PRELOAD[0] == "autograde" and PRELOAD[-1] == "autograde.warm", PRELOAD


def test_the_warm_up_renders_a_feedback_page_with_offline_math():
    from autograde.feedback import MATHJAX_SVG
    from autograde.sample_page import render_sample_page
    page = render_sample_page()
    assert len(page) > MATHJAX_SVG.stat().st_size, "the page inlines MathJax, as a real feedback page does"


def test_the_warm_up_changes_no_page():
    """The same page rendered first in a fresh process, and after the warm-up: byte for byte the same."""
    code = ("import autograde, sys\n"
            "if sys.argv[1] == 'warm':\n    import autograde.warm\n"
            "from autograde.sample_page import render_sample_page\n"
            "sys.stdout.write(render_sample_page())")
    pages = [subprocess.run([sys.executable, "-c", code, mode], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout for mode in ("cold", "warm")]
    assert pages[0] and pages[0] == pages[1]
    assert not re.search(r"<script[^>]+src=\"https?:", pages[0]), "no script may come from the network"
