# Attention, from QKV to PagedAttention: every command of the course.
# Each target creates .venv and installs requirements.txt first when needed.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ASSIGNMENT ?= ch01_qkv_softmax
WORKERS ?= 2
ATTNLAB ?=
PORT ?= 8000
LAB_PORT ?= 8888

# OpenMP's busy-waiting slows small torch workloads badly on 2 cores shared with other work.
export OMP_WAIT_POLICY := PASSIVE
# ...except where one process decodes alone (chat, engine, bench): there the worker threads must stay awake
# between a step's small products, or splitting them between the cores loses its gain (chapter 7's page).
DECODING := env -u OMP_WAIT_POLICY
# Nothing may be fetched at build, test or grading time.
export HF_HUB_OFFLINE := 1
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help system setup book serve test test-fast lab refresh check sync export run chat engine grade bench train clean student-release i18n-extract

help:
	@echo "make book     build the website into _build/html (runs the chapters' code)"
	@echo "make serve    serve the website on http://127.0.0.1:$(PORT)"
	@echo "make test     run every check (the CI command)"
	@echo "make test-fast   the checks that take seconds, not minutes: all but grading, the site and the students' copies"
	@echo "make lab      JupyterLab on work/, your own copy of exercises/ (students; LAB_PORT=$(LAB_PORT); LANG=zh: 中文)"
	@echo "make refresh  bring work/ up to date with changed releases, keeping your answers (LANG=zh|en switches)"
	@echo "make check NB=ch01   run your notebook in work/ from the top, as the grader will, and list its checks"
	@echo "make export   build your own attnlab from your notebooks in work/ into _student/"
	@echo "make run SCRIPT=your_script.py   your script on the course's Python, with your own attnlab (make export)"
	@echo "make chat     chat with SmolLM2-135M-Instruct on attnlab (ATTNLAB=_student: on your own export)"
	@echo "make engine   serve many prompts at once on chapter 9's paged engine (PROMPTS=file; ATTNLAB=_student)"
	@echo "make sync     regenerate attnlab/, exercises/ and exercises-zh/ from solutions/ and locales/ (instructors)"
	@echo "make i18n-extract   update the Chinese catalogs in locales/zh_CN/ after an English edit (translators)"
	@echo "make grade    grade the class: autograde/inbox/ASSIGNMENT/*.ipynb (ASSIGNMENT=$(ASSIGNMENT) WORKERS=$(WORKERS); SCHEDULER=tcp://HOST:8786 on a Dask cluster)"
	@echo "make bench    benchmarks, printed as ratios measured in one run"
	@echo "make student-release UPTO=ch03   a copy for a graded class: chapters before UPTO, no answers (UPTO=all: every chapter)"
	@echo "make train    retrain chapter 6's translator checkpoint (about two minutes on 2 cores), then sync"

setup: $(STAMP)

# The Debian packages (chromium, bubblewrap, a Chinese font): checked on every run, installed when missing.
system:
	@bash coursekit/system_packages.sh

$(STAMP): requirements.txt requirements-nodeps.txt Makefile | system
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# requirements.txt pins the whole environment, so pip installs it as it stands, resolving nothing: a
	# dependency's optional extra that the course leaves out stays out (see the file's comments).
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-nodeps.txt
	# Make the repository's packages (attnlab, coursekit, autograde) importable from any folder,
	# e.g. from a notebook's kernel in exercises/chNN_*/.
	$(PY) -c 'import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()["purelib"], "attnlab-course.pth").write_text("$(CURDIR)\n")'
	# Every kernel the build, the tests and the lab start talks to its client over loopback TCP, and
	# ipykernel warns about that at each start (six times a build); only its errors are worth printing.
	mkdir -p $(VENV)/etc/ipython
	echo 'c.IPKernelApp.log_level = "ERROR"  # written by `make setup`: see the Makefile' > $(VENV)/etc/ipython/ipython_kernel_config.py
	touch $@

book: $(STAMP)
	# The figures' Chinese words are drawn when a page runs: a changed locales/zh_CN/figures.po empties the cache.
	$(PY) -m coursekit.i18n.figures fresh-cache
	# --all re-reads every page (executed cells still come from the cache), so a page whose code failed
	# in an earlier build is run again and fails again, instead of being skipped as unchanged.
	$(VENV)/bin/jupyter-book build . --all --builder html -W -n --keep-going
	# The Chinese edition, from the same pages and locales/zh_CN/ (it reuses the English build's executed cells).
	$(PY) -m coursekit.i18n.book zh
	@echo "Open $(CURDIR)/_build/html/index.html (中文: _build/html/zh/index.html), or run: make serve"

# Translators: after an English edit, bring the catalogs of locales/zh_CN/ up to date (changed messages turn
# fuzzy), translate, then `make sync` (the Chinese notebooks) and `make test`.
# The notebooks' messages come from the releases in exercises/, so an edit of solutions/ is released first.
i18n-extract: $(STAMP)
	$(PY) -m coursekit.sync
	$(PY) -m coursekit.i18n.book gettext
	$(PY) -m coursekit.i18n.catalogs update
	@if test -d _build/html/book; then $(PY) -m coursekit.i18n.figures update; \
	else echo "run make book, then make i18n-extract again, for the figures' words"; fi
	$(PY) -m coursekit.i18n.catalogs stat

serve: $(STAMP)
	@test -f _build/html/index.html || $(MAKE) book
	$(PY) -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

# Two processes (pytest-xdist), a test module in one: half the suite waits on browsers, servers and timeouts,
# which the other half's computing fills. Each chapter's graded class is shared by both (tests/conftest.py).
TEST_PROCESSES ?= 2
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile

# The inner loop: everything but grading whole classes, the website in a browser, and the students' own copies.
test-fast: $(STAMP)
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile -m "not slow"

# The course's language comes only from make's command line (`make lab LANG=zh`): the shell's own LANG (a locale
# such as C.UTF-8) is not a choice of language. The commands then run with a real locale again.
COURSE_LANG := $(if $(filter command line,$(origin LANG)),$(LANG),)
WITH_LOCALE := $(if $(COURSE_LANG),env LANG=C.UTF-8,)

lab: $(STAMP)
	$(WITH_LOCALE) $(PY) -m coursekit.lab --port $(LAB_PORT) --lang "$(COURSE_LANG)"

refresh: $(STAMP)
	$(WITH_LOCALE) $(PY) -m coursekit.refresh --lang "$(COURSE_LANG)"

sync: $(STAMP)
	$(PY) -m coursekit.sync

check: $(STAMP)
	@test -n "$(NB)" || { echo "name the notebook to check: make check NB=ch01"; exit 2; }
	$(PY) -m coursekit.check $(NB)

export: $(STAMP)
	$(PY) -m coursekit.export

# Your own script on the course's Python (torch and the rest) and your own attnlab (make export) before the course's.
run: $(STAMP)
	@test -n "$(SCRIPT)" || { echo "name your script: make run SCRIPT=your_script.py"; exit 2; }
	PYTHONPATH=_student $(PY) -P $(SCRIPT)

# ATTNLAB=_student runs the learner's own package (`make export`) instead of the course's reference code.
chat: $(STAMP)
	PYTHONPATH=$(ATTNLAB) $(DECODING) $(PY) -P -m attnlab.chat

# Chapter 9's engine: PROMPTS=file (one prompt a line) instead of its demo; ATTNLAB=_student as for chat.
engine: $(STAMP)
	PYTHONPATH=$(ATTNLAB) $(DECODING) $(PY) -P -m attnlab.serve $(if $(PROMPTS),--prompts $(PROMPTS))

# SCHEDULER=tcp://HOST:8786 grades on a Dask cluster's workers instead (README: "Grading on several machines").
grade: $(STAMP)
	$(PY) -m autograde class $(ASSIGNMENT) $(if $(SCHEDULER),--scheduler $(SCHEDULER),--workers $(WORKERS))

bench: $(STAMP)
	$(DECODING) $(PY) -m bench

# The checkpoint lives next to chapter 6's source notebook; `make sync` releases it with the exercises.
TRANSLATOR := solutions/ch06_decoder/translator_zh_en.pt
train: $(STAMP)
	$(PY) -m attnlab.translator.training --out $(TRANSLATOR)
	$(MAKE) sync

UPTO ?=
student-release: $(STAMP)
	@test -n "$(UPTO)" || { echo "name the first chapter not yet graded: make student-release UPTO=ch03 (or UPTO=all)"; exit 2; }
	@test -f _build/html/index.html || $(MAKE) book
	$(PY) -m coursekit.student_release $(UPTO) --site _build/html

clean:
	rm -rf _build _student _release .pytest_cache
