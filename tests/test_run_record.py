"""What the grader concludes from the sandbox runner's private report (autograde/execute.py, run_record).

The runner reports the digest of every out.ipynb it writes, the check of the kernel after the last cell, and its
end, on a descriptor only it holds. Everything in the sandbox's work folder can be rewritten by a process the
notebook leaves running, so the report decides: these are the cases it must tell apart. test_hostile.py has the
same attacks, made by real submissions through the CLI."""
from __future__ import annotations

import hashlib

import pytest

from autograde.execute import run_record

NOTEBOOK = b'{"cells": []}\n'
DIGEST = hashlib.sha256(NOTEBOOK).hexdigest()
FINISHED = [{"notebook": "0" * 64}, {"notebook": DIGEST}, {"kernel": []}, {"notebook": DIGEST}, {"done": True}]


def test_a_run_that_ended_as_the_runner_wrote_it_is_trusted_and_unflagged():
    record = run_record(FINISHED, NOTEBOOK, timed_out=False)
    assert record.flags == [] and record.distrusted == ""


def test_a_changed_kernel_is_flagged_and_the_notebook_still_counts():
    record = run_record([{"notebook": DIGEST}, {"kernel": ["a custom exception handler"]}, {"done": True}],
                        NOTEBOOK, timed_out=False)
    assert record.distrusted == "" and len(record.flags) == 1
    assert "changed how its kernel runs cells: a custom exception handler" in record.flags[0]


@pytest.mark.parametrize("found", [NOTEBOOK + b" ", None], ids=["rewritten", "missing or unreadable"])
def test_a_notebook_other_than_the_runners_last_is_not_used(found):
    record = run_record(FINISHED, found, timed_out=False)
    assert "changed after the grader wrote them" in record.distrusted
    assert record.distrusted in record.flags


def test_an_earlier_notebook_of_the_runners_own_is_used_only_when_the_runner_was_stopped():
    """The runner reports each notebook before swapping it in: stopped in between, it leaves the one before.
    A runner that reached its end left its last one, so an earlier one was put back by someone else."""
    record = run_record([{"notebook": DIGEST}, {"notebook": "1" * 64}], NOTEBOOK, timed_out=True)
    assert record.flags == [] and record.distrusted == ""
    put_back = run_record([{"notebook": DIGEST}, {"kernel": []}, {"notebook": "1" * 64}, {"done": True}], NOTEBOOK,
                          timed_out=False)
    assert put_back.distrusted in put_back.flags


def test_a_notebook_the_runner_never_reported_is_not_used():
    record = run_record([{"kernel": []}, {"done": True}], NOTEBOOK, timed_out=False)
    assert record.distrusted


def test_forged_lines_before_the_runners_own_change_nothing():
    """The first "kernel" line counts: the runner writes exactly one, after the last cell."""
    record = run_record([{"notebook": DIGEST}, {"kernel": ["an entry of ast_transformers"]}, {"kernel": []},
                         {"done": True}], NOTEBOOK, timed_out=False)
    assert record.flags and "ast_transformers" in record.flags[0]


@pytest.mark.parametrize("report,why", [
    ([{"notebook": DIGEST}], "runner was stopped before its end"),
    ([{"notebook": DIGEST}, {"done": True}], "the kernel kept dying"),
    ([{"notebook": DIGEST}, {"error": "OSError: disk full"}], "runner failed (OSError: disk full)"),
])
def test_a_run_whose_kernel_check_never_ran_is_flagged_with_the_reason(report, why):
    record = run_record(report, NOTEBOOK, timed_out=False)
    assert record.distrusted == "" and len(record.flags) == 1
    assert record.flags[0].startswith("the grader could not check the kernel after the last cell") and why in record.flags[0]


def test_the_wall_clock_cutting_the_check_short_is_nobodys_doing():
    record = run_record([{"notebook": DIGEST}], NOTEBOOK, timed_out=True)
    assert record.flags == [] and record.distrusted == ""


def test_the_runner_writes_a_new_file_and_follows_no_link_the_notebook_planted(tmp_path):
    """A link at out.ipynb or at the runner's next file would send its writes outside the work folder."""
    import nbformat

    from autograde.sandbox_runner import save

    elsewhere = tmp_path / "elsewhere.ipynb"
    elsewhere.write_text("untouched")
    out = tmp_path / "out.ipynb"
    for link in (out, tmp_path / "out.ipynb.part"):
        link.symlink_to(elsewhere)
    reported = []
    save(nbformat.v4.new_notebook(), str(out), lambda **entry: reported.append(entry))
    assert not out.is_symlink() and elsewhere.read_text() == "untouched"
    assert reported == [{"notebook": hashlib.sha256(out.read_bytes()).hexdigest()}]
    assert not (tmp_path / "out.ipynb.part").exists()


@pytest.mark.parametrize("with_probe_fd", [False, True])
def test_a_runner_that_fails_reports_why_on_its_descriptor(tmp_path, with_probe_fd):
    """Grading hands the runner a second descriptor (the re-check's inputs): its error must still be reported, or
    run_record blames the notebook's code for a runner that failed on its own."""
    import json
    import os
    import subprocess
    import sys

    from autograde.sandbox import RUNNER
    (tmp_path / "in.ipynb").write_text("not a notebook")
    report_read, report_write = os.pipe()
    probe_read, probe_write = os.pipe()
    os.close(probe_write)                   # no re-check inputs: the runner reads an empty spec
    fds = [str(report_write)] + ([str(probe_read)] if with_probe_fd else [])
    try:
        subprocess.run([sys.executable, str(RUNNER), "execute", "in.ipynb", "out.ipynb", "10", *fds], cwd=tmp_path,
                       pass_fds=(report_write, probe_read), capture_output=True, timeout=120)
    finally:
        os.close(report_write)
        os.close(probe_read)
    with os.fdopen(report_read, "rb") as lines:
        report = [json.loads(line) for line in lines]
    assert any("NotJSONError" in str(entry.get("error")) for entry in report), report
