"""Imported last by the grading workers' forkserver (worker.PRELOAD): renders one small feedback page, so that
every worker forked from it starts with the work a first page costs already done.

A worker grades one submission and exits, so each used to pay for its page's first render in a fresh
process: nbconvert compiling its templates, the sanitizer and the highlighter compiling their regular
expressions, MathJax read from disk to be inlined. That was 0.4 s of the page's 0.7 s of CPU (chapter 3).
Only caches are warmed: the page is thrown away, and nothing of a submission exists yet in this process."""
from autograde.sample_page import render_sample_page

try:
    render_sample_page()
except Exception:  # noqa: BLE001 - only a head start: a worker renders its own page either way, and says why not
    pass
