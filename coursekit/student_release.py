"""A copy of the course for the students of a graded class: no answers to the chapters still to be graded.

    python -m coursekit.student_release UPTO [--out _release]     (make student-release UPTO=ch03)

UPTO is the first chapter the class has not been graded on yet (say ch03), or `all` at the end of a term: every
chapter, with every chapter's reference code. The copy holds:
- the website's pages of the chapters before UPTO whose code uses only those chapters' modules (chapter 2's
  page runs chapter 4's MiniLM, so it waits for UPTO=ch05), with the intro, and the exercise notebooks of
  every chapter up to UPTO (the releases, with no solutions and no hidden tests);
- the reference attnlab of the chapters before UPTO only, assembled from their export cells (as the grading
  sandbox is), so no line of chapter UPTO or later is in it;
- the student side of the tooling (make lab, make export, make book) and a README;
- with --site (make student-release does it): the website built from the full course, its pages of chapters 1 to
  UPTO only, in site/, so that the chapter being graded can be read (its pages show usage and outputs, not answers).
It holds no solutions/, no autograde/, no tests/ (whose known-wrong set is close to the answers) and no bench/.
Everything in it is generated: make it again for the next chapter.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

from coursekit.workspace import RELEASES
from coursekit.sync import ROOT, chapter_notebooks, chapter_number, name_chapters, reference_package_before

# The student side of the course tooling; coursekit/sync.py comes along because export.py uses two of its
# helpers (it refuses to run without solutions/).
TOOLING = ["coursekit/__init__.py", "coursekit/lab.py", "coursekit/export.py", "coursekit/exporting.py",
           "coursekit/workspace.py", "coursekit/release.py", "coursekit/sync.py", "coursekit/layout.py",
           "coursekit/refresh.py", "coursekit/check.py", "coursekit/system_packages.sh", "coursekit/jupyter_student",
           # _config.yml names the course's Sphinx extension; the notebooks' language is read by refresh.py.
           "coursekit/sphinx_i18n.py", "coursekit/i18n", "coursekit/figures.py"]
TOP_LEVEL = ["requirements.txt", "requirements-nodeps.txt", "_config.yml", "_static", ".gitignore"]

MAKEFILE = """# The student copy of the course (made by `make student-release`): read, practise, export.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8000
LAB_PORT ?= 8888
export OMP_WAIT_POLICY := PASSIVE
export HF_HUB_OFFLINE := 1
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help system setup book serve lab refresh check export run chat engine bench train

# ATTNLAB=_student runs your own package (`make export`) instead of this copy's reference code, as in the course.
ATTNLAB ?=

help:
\t@echo "make book     build the website into _build/html"
\t@echo "make serve    serve the website (site/, English and 中文) on http://127.0.0.1:$(PORT)"
\t@echo "make lab      JupyterLab on work/, your own copy of exercises/ (LAB_PORT=$(LAB_PORT); LANG=zh: 中文)"
\t@echo "make refresh  bring work/ up to date with a new copy of the course, keeping your answers"
\t@echo "make check NB=ch01   run your notebook in work/ from the top, as the grader will, and list its checks"
\t@echo "make export   build your own attnlab from your notebooks in work/ into _student/"
\t@echo "make run SCRIPT=your_script.py   your script on this copy's Python, with your own attnlab (make export)"
\t@echo "make chat     chat with SmolLM2-135M-Instruct (ATTNLAB=_student: on your own export; chapter 7 on)"
\t@echo "make engine   serve many prompts at once on chapter 9's paged engine (PROMPTS=file; ATTNLAB=_student)"

system:
\t@bash coursekit/system_packages.sh

setup: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt Makefile | system
\ttest -x $(PY) || $(PYTHON) -m venv $(VENV)
\t$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt
\t$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-nodeps.txt
\t$(PY) -c 'import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()["purelib"], "attnlab-course.pth").write_text("$(CURDIR)\\n")'
\tmkdir -p $(VENV)/etc/ipython
\techo 'c.IPKernelApp.log_level = "ERROR"' > $(VENV)/etc/ipython/ipython_kernel_config.py
\ttouch $@

book: $(STAMP)
\t$(VENV)/bin/jupyter-book build . --all --builder html -W -n --keep-going

# The website your instructor built (site/, both languages) when the copy has one, else the one `make book` builds.
SITE := $(if $(wildcard site/index.html),site,_build/html)

serve: $(STAMP)
\t@test -f $(SITE)/index.html || $(MAKE) book
\t@echo "English: http://127.0.0.1:$(PORT)/index.html$(if $(wildcard $(SITE)/zh/index.html),   中文: http://127.0.0.1:$(PORT)/zh/index.html)"
\t$(PY) -m http.server --bind 127.0.0.1 --directory $(SITE) $(PORT)

# `make lab LANG=zh`: the Chinese notebooks (only make's command line chooses; the shell's LANG is a locale).
COURSE_LANG := $(if $(filter command line,$(origin LANG)),$(LANG),)

lab: $(STAMP)
\tenv LANG=C.UTF-8 $(PY) -m coursekit.lab --port $(LAB_PORT) --lang "$(COURSE_LANG)"

refresh: $(STAMP)
\tenv LANG=C.UTF-8 $(PY) -m coursekit.refresh --lang "$(COURSE_LANG)"

check: $(STAMP)
\t@test -n "$(NB)" || { echo "name the notebook to check: make check NB=ch01"; exit 2; }
\t$(PY) -m coursekit.check $(NB)

export: $(STAMP)
\t$(PY) -m coursekit.export

# Your own script on this copy's Python (torch and the rest) and your own attnlab (make export) before the copy's.
run: $(STAMP)
\t@test -n "$(SCRIPT)" || { echo "name your script: make run SCRIPT=your_script.py"; exit 2; }
\tPYTHONPATH=_student $(PY) -P $(SCRIPT)

# Awake threads decode faster: these two run without the PASSIVE OpenMP policy the rest sets.
# This copy's attnlab holds the chapters already graded: a later chapter's module comes from your own export.
chat: $(STAMP)
\t@test -n "$(ATTNLAB)" -o -f attnlab/chat.py || { echo "make chat runs chapter 7's attnlab.chat, which this copy's attnlab does not hold yet: complete chapter 7 in work/, run make export, then make chat ATTNLAB=_student"; exit 2; }
\tPYTHONPATH=$(ATTNLAB) env -u OMP_WAIT_POLICY $(PY) -P -m attnlab.chat

engine: $(STAMP)
\t@test -n "$(ATTNLAB)" -o -f attnlab/serve.py || { echo "make engine runs chapter 9's attnlab.serve, which this copy's attnlab does not hold yet: complete chapter 9 in work/, run make export, then make engine ATTNLAB=_student"; exit 2; }
\tPYTHONPATH=$(ATTNLAB) env -u OMP_WAIT_POLICY $(PY) -P -m attnlab.serve $(if $(PROMPTS),--prompts $(PROMPTS))

# The pages name these two; they need the full course repository (bench/ times the reference code, and the
# translator's checkpoint is written next to chapter 6's solution notebook).
bench train:
\t@echo "make $@ runs in the full course repository, not in this student copy (it has no bench/ or solutions/)"; exit 2
"""

README = """# Attention, from QKV to PagedAttention: your copy of the course

This copy holds the chapters up to {upto_title}: the pages of chapters {pages}, and the exercise notebooks
of chapters {exercises}. Your instructor gives you a new copy when the next chapter opens.

## Set up, once

```sh
make setup     # the Debian packages chromium, bubblewrap and fonts-wqy-microhei (as root; otherwise it prints
               # the command), then the Python packages into .venv, with this copy's attnlab importable
```

Every other `make` command does this first when it has not been done, so you may also start with `make lab`.

## Read the chapters

{site_note}```sh
make serve     # the website on http://127.0.0.1:8000, and its Chinese edition (中文) on /zh/ when site/ holds it
make book      # build the pages this copy runs on its own into _build/html (English only)
```

## Do the exercises

```sh
make lab            # JupyterLab on work/, your own copy of the exercises (made on first use; nothing overwrites it)
make lab LANG=zh    # new notebooks in Chinese (中文); those already in work/ stay as they are: make refresh LANG=zh switches them
make refresh        # after a new copy of the course: update the given cells in work/, keeping your answers
```

Open `chNN_.../chNN_....ipynb` in work/, fill in each cell marked `# YOUR CODE HERE` (delete its
`raise NotImplementedError()`), then run the test cell below it: its messages name the likely mistake. The
hidden tests check harder cases when your notebook is graded. Code, test messages and feedback are in English
in both languages.

## Check a notebook before you submit it

In JupyterLab: Kernel, then "Restart Kernel and Run All Cells"; every test cell should end with "visible checks
passed". Or from a terminal, which runs your notebook from the top in a fresh kernel as the grader will, without
changing it:

```sh
make check NB=ch03     # each test cell: passed, or its whole message; "not written yet" for an unwritten exercise
```

Then submit the `.ipynb` file in work/ as your instructor asks.

## Your own attnlab

```sh
make export                  # your own attnlab, from the notebooks in work/, into _student/attnlab
make run SCRIPT=my_test.py   # your own script on your own attnlab, with this copy's Python
make chat ATTNLAB=_student   # from chapter 7 on: chat with SmolLM2-135M-Instruct on your own code
```

The copy's Python is `.venv/bin/python` (made by `make setup`): it has torch and everything the course uses, which
the `python` of a fresh shell may not. `make run` and the other targets use it.

The `attnlab` folder holds the course's reference code for the chapters you have been graded on, so that the
exercises of the current chapter can build on it; `make setup` makes it importable from every notebook in work/.
"""


SITE_NOTE = """`site/index.html` is the course website up to chapter {last}, the chapter being graded included, as your
instructor built it from the full course (its links to later chapters lead nowhere yet); `site/zh/index.html` is
its Chinese edition. Every page has a switcher, English ⇄ 中文, in its header, which leads to the same page in
the other language. Open the files in a browser, or serve them:

"""


def page_needs(page: Path, chapters: dict[str, int]) -> int:
    """The latest chapter whose attnlab code the page imports (0 if none). For `from attnlab.m import a, b`
    it is the chapters that define a and b (a module may grow over several chapters); for `import attnlab.m`,
    the last chapter that writes anything into m. An unknown name counts as not written yet (99)."""
    text = page.read_text(encoding="utf-8")
    needed = [0]
    for module, names in re.findall(r"from\s+(attnlab(?:\.\w+)+)\s+import\s+(\([^)]*\)|[\w ,]+)", text):
        for part in names.strip("()").split(","):
            name = part.split("#")[0].split(" as ")[0].strip()
            if name:
                needed.append(chapters.get(f"{module}.{name}", 99))
    for module in re.findall(r"^\s*import\s+(attnlab(?:\.\w+)+)", text, flags=re.M):
        needed.append(max((c for name, c in chapters.items() if name == module or name.startswith(module + ".")),
                          default=99))
    return max(needed)


def _toc(pages: list[str], exercises: list[str]) -> str:
    lines = ["# Generated by `make student-release`.", "format: jb-book", "root: book/intro", "chapters:"]
    for name in exercises:
        if name in pages:
            lines += [f"  - file: book/{name}", "    sections:", f"      - file: exercises/{name}/{name}"]
        else:
            lines += [f"  - file: exercises/{name}/{name}"]
    return "\n".join(lines) + "\n"


def _intro(text: str, pages: list[str], exercises: list[str]) -> str:
    """The intro, its links to chapters not in this copy turned into plain text."""
    def unlink(match: re.Match) -> str:
        return match[0] if match[2] in pages else f"{match[1]} (not in this copy yet)"
    text = re.sub(r"\[([^\]]+)\]\((ch\d\d_[a-z0-9_]+)\.md\)", unlink, text)
    # the exercise column: a notebook this copy does not hold yet is named, not linked
    return re.sub(r"\[([^\]]+)\]\(\.\./exercises/(ch\d\d_[a-z0-9_]+)/\2\.ipynb\)",
                  lambda m: m[0] if m[2] in exercises else "(not in this copy yet)", text)


def _later(rel: Path, upto: int) -> bool:
    """Whether a file of the built site belongs to a chapter after upto (its page, exercise page or sources)."""
    return any(re.fullmatch(r"ch(\d\d)_[a-z0-9_]+(\.\w+)*", part) and int(part[2:4]) > upto for part in rel.parts)


def copy_site(site: Path, out: Path, upto: int) -> None:
    """The built website into out/site, without the pages, exercise pages and sources of chapters after upto."""
    if not (site / "index.html").is_file():
        raise SystemExit(f"{site} holds no built website: run `make book` first")
    for path in sorted(site.rglob("*")):
        rel = path.relative_to(site)
        if path.is_file() and not _later(rel, upto) and not rel.parts[0].startswith("."):
            (out / "site" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, out / "site" / rel)


def write_release(upto_name: str, out: Path, root: Path = ROOT, site: Path | None = None) -> Path:
    names = [nb.parent.name for nb in chapter_notebooks(root)]
    if upto_name == "all":        # the end of a term: every chapter graded, every chapter's reference code given
        upto, title = max(map(chapter_number, names)) + 1, f"{names[-1]}, every one of them graded (UPTO=all)"
    else:
        matches = [n for n in names if n == upto_name or n.startswith(upto_name + "_") or n[:4] == upto_name[:4]]
        if not re.fullmatch(r"ch\d\d(_[a-z0-9_]+)?", upto_name) or not matches:
            raise SystemExit(f"UPTO must name a chapter, such as ch03 or ch03_add_norm_ffn, or be all (every "
                             f"chapter with its reference code); the chapters are {', '.join(names)}")
        upto, title = chapter_number(matches[0]), matches[0]
    chapters = name_chapters(root)
    pages = [n for n in names if chapter_number(n) < upto and (root / "book" / f"{n}.md").is_file()
             and page_needs(root / "book" / f"{n}.md", chapters) < upto]
    exercises = [n for n in names if chapter_number(n) <= upto]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for rel in TOOLING + TOP_LEVEL:
        source = root / rel
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            shutil.copy2(source, target)
    (out / "book").mkdir()
    for name in pages:
        shutil.copy2(root / "book" / f"{name}.md", out / "book" / f"{name}.md")
    (out / "book" / "intro.md").write_text(_intro((root / "book" / "intro.md").read_text(), pages, exercises))
    for name in exercises:
        for folder in RELEASES.values():   # exercises/ and its Chinese edition exercises-zh/
            shutil.copytree(root / folder / name, out / folder / name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for rel, text in reference_package_before(upto, root, command="make student-release").items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    if site is not None:
        copy_site(site, out, upto)
    (out / "_toc.yml").write_text(_toc(pages, exercises))
    (out / "Makefile").write_text(MAKEFILE)
    (out / "README.md").write_text(README.format(
        upto_title=title, site_note=SITE_NOTE.format(last=min(upto, max(map(chapter_number, names)))) if site is not None else "", pages=", ".join(str(chapter_number(n)) for n in pages) or "none",
        exercises=", ".join(str(chapter_number(n)) for n in exercises)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("upto", help="the first chapter not yet graded, e.g. ch03; all: every chapter, graded")
    parser.add_argument("--out", type=Path, default=None, help="folder to write (default: _release/student-UPTO)")
    parser.add_argument("--site", type=Path, default=None, help="a built website of the full course (_build/html) "
                        "whose pages of chapters 1 to UPTO go into the copy's site/")
    args = parser.parse_args(argv)
    out = write_release(args.upto, args.out or ROOT / "_release" / f"student-{args.upto}", site=args.site)
    print(f"wrote the student copy to {out}: give students this folder (for example as a repository of its own)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
