"""`make book` fails when a page's code prints a warning or raises, and its output names the page and the cell.
Built on a two-cell scratch book with the course's own _config.yml, so the check takes seconds."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
# A page

```{code-cell} ipython3
print("fine")
```

```{code-cell} ipython3
CELL
```
"""


def _build(repo, tmp_path, cell: str) -> subprocess.CompletedProcess:
    shutil.copy(repo / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/page\n")
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "page.md").write_text(PAGE.replace("CELL", cell))
    jupyter_book = str(Path(sys.executable).with_name("jupyter-book"))
    # the same flags as `make book`
    return subprocess.run([jupyter_book, "build", ".", "--all", "--builder", "html", "-W", "-n", "--keep-going"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def _plain(run) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)


@pytest.mark.slow
def test_a_warning_in_a_page_fails_the_build_and_names_page_and_cell(repo, tmp_path):
    run = _build(repo, tmp_path, 'import warnings\nwarnings.warn("Glyph 25105 missing from font(s) DejaVu Sans.")')
    assert run.returncode != 0, "a page whose code warns must fail the build"
    assert re.search(r"book/page\.md:\d+: WARNING: stderr was found in the cell outputs of cell 3", _plain(run)), \
        _plain(run)[-3000:]


@pytest.mark.slow
def test_an_error_in_a_page_fails_the_build_and_shows_the_cell(repo, tmp_path):
    run = _build(repo, tmp_path, 'raise ValueError("the figure could not be drawn")')
    out = _plain(run)
    assert run.returncode != 0
    assert "book/page.md: WARNING: Executing notebook failed" in out, out[-3000:]
    assert 'raise ValueError("the figure could not be drawn")' in out, "the build's output quotes the failing cell"


@pytest.mark.slow
def test_a_clean_page_builds(repo, tmp_path):
    run = _build(repo, tmp_path, "x = 1")
    assert run.returncode == 0, _plain(run)[-3000:]
