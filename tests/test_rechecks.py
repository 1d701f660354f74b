"""The re-check probes (autograde/rechecks/), run by the grader's own runner on trusted code, outside the sandbox:
every probe passes on the reference solution, and fails on each known-wrong implementation for the cells it must
lose. (The sandboxed run of the same probes is exercised by test_grading.py and test_hostile.py.)"""
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import nbformat
from safetensors.torch import load_file, save_file

from autograde.recheck import student_code_cells
from autograde.sandbox import GRADING_ENV
from autograde.rechecks import compare, fresh_inputs, probes_for, reference_outputs
from coursekit.sync import chapter_notebooks
from tests.submissions import REPO, known_wrong, solution_code, submission

WITH_PROBES = [nb.parent.name for nb in chapter_notebooks() if probes_for(nb.parent.name)]


def verdicts(assignment: str, replace: dict[str, str] | None = None, seed: int = 0) -> dict[str, str]:
    """The re-check as the grader runs it, minus the sandbox: autograde/sandbox_runner.py in a subprocess."""
    return many_verdicts(assignment, [replace or {}], seed)[0]


def many_verdicts(assignment: str, replacements: list[dict[str, str]], seed: int = 0,
                  seeds: list[int] | None = None) -> list[dict[str, str]]:
    """verdicts() for each replacement, the runs forked from one process that imported the cells' modules once
    (tests/probe_runs.py), on the same inputs (drawn from `seed`), or each on its own (seeds, one a replacement)."""
    probes = probes_for(assignment)
    seeds = seeds or [seed] * len(replacements)
    drawn = {s: fresh_inputs(probes, torch.Generator().manual_seed(s)) for s in dict.fromkeys(seeds)}
    with tempfile.TemporaryDirectory() as tmp:
        folders = []
        for number, (replace, inputs) in enumerate(zip(replacements, (drawn[s] for s in seeds), strict=True)):
            work = Path(tmp) / f"run{number}"
            work.mkdir()
            for data in (REPO / "exercises" / assignment).iterdir():       # the notebook's data files, as in grading
                if data.suffix != ".ipynb":
                    shutil.copyfile(data, work / data.name)
            save_file({f"{name}.{key}": value.contiguous() for name, values in inputs.items()
                       for key, value in values.items()}, str(work / "inputs.safetensors"))
            (work / "code.json").write_text(json.dumps({
                "cells": student_code_cells(submission(assignment, replace)),
                "probes": {name: probe.sandbox_code for name, probe in probes.items()}}))
            folders.append(str(work))
        run = subprocess.run([sys.executable, "-m", "tests.probe_runs"], cwd=REPO, input=json.dumps(folders),
                             capture_output=True, text=True, timeout=1800, env={**os.environ, **GRADING_ENV})
        assert run.returncode == 0, run.stderr[-4000:]
        statuses = json.loads(run.stdout.strip().splitlines()[-1])
        assert statuses == [0] * len(folders), f"runner exit statuses {statuses}:\n{run.stderr[-4000:]}"
        results = []
        for folder, inputs in zip(map(Path, folders), (drawn[s] for s in seeds)):
            out = {}
            for name, probe in probes.items():
                result = folder / f"{name}.safetensors"
                if not result.is_file():
                    out[name] = "no result: " + json.loads((folder / "report.json").read_text())["probes"][name]
                else:
                    out[name] = compare(reference_outputs(probe, inputs[name]), load_file(str(result)), probe)
            results.append(out)
        return results


def test_chapters_with_probes():
    assert set(WITH_PROBES) == {nb.parent.name for nb in chapter_notebooks()}, "every chapter has re-check probes"


@pytest.mark.parametrize("assignment", WITH_PROBES)
def test_reference_solution_passes_every_probe(assignment):
    # two draws of the inputs, in one process's runs
    assert many_verdicts(assignment, [{}, {}], seeds=[0, 1]) == [{name: "" for name in probes_for(assignment)}] * 2


@pytest.mark.slow
@pytest.mark.parametrize("assignment", WITH_PROBES)
def test_known_wrong_implementations_fail_their_probes(assignment):
    wrongs = known_wrong(assignment)
    runs = many_verdicts(assignment, [{wrong["cell"]: wrong["code"]} for wrong in wrongs])
    for wrong, got in zip(wrongs, runs):
        for cell in wrong["loses"]:
            if cell in got:
                assert got[cell], f"{wrong['name']} ({wrong['why']}) passes the re-check of {cell}"
        for cell, verdict in got.items():
            # a cell that keeps its points in the notebook must pass its re-check too, or it would be flagged
            assert cell in wrong["loses"] or not verdict, \
                f"{wrong['name']} fails the re-check of {cell}, which keeps its points in the notebook: {verdict}"


def test_the_runner_ends_when_its_results_are_written_whatever_threads_the_student_left():
    """A student cell that leaves a thread running (or an atexit hook waiting) must not hold the re-check
    until its wall clock stops it: that would cost every such submission minutes and no result."""
    assignment = "ch01_qkv_softmax"
    lingering = ("import atexit, threading, time\n"
                 "threading.Thread(target=time.sleep, args=(3600,)).start()\n"
                 "atexit.register(time.sleep, 3600)\n")
    cells = student_code_cells(submission(assignment))
    cells.insert(1, lingering)
    probes = probes_for(assignment)
    inputs = {name: probe.inputs(torch.Generator().manual_seed(0)) for name, probe in probes.items()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        save_file({f"{name}.{key}": value.contiguous() for name, values in inputs.items()
                   for key, value in values.items()}, str(work / "inputs.safetensors"))
        (work / "code.json").write_text(json.dumps({"cells": cells, "probes": {n: p.sandbox_code for n, p in probes.items()}}))
        # generous: the run itself takes seconds, the threads it leaves behind an hour
        run = subprocess.run([sys.executable, str(REPO / "autograde" / "sandbox_runner.py"), "probe", "code.json",
                              "inputs.safetensors", ".", "60"], cwd=work, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        for name, probe in probes.items():
            assert compare(reference_outputs(probe, inputs[name]), load_file(str(work / f"{name}.safetensors")), probe) == ""


def test_stand_ins_are_passed_explicitly_wherever_the_code_lives():
    """Chapter 5's generate is re-checked on the course's cache and mask, given to CausalLM as arguments, not
    patched into a module's globals. With CausalLM imported from another module (as a later chapter's sandbox
    would give it) instead of defined in the notebook, the probe still passes the reference, catches every
    known-wrong generate, and charges a wrong cache or mask only to their own cells."""
    assignment = "ch05_decoding"
    moved = {"causal_lm": "from attnlab.models.causal_lm import CausalLM, CausalLMConfig, CausalSelfAttention\n"}
    wrongs = known_wrong(assignment)
    reference, *runs = many_verdicts(assignment, [moved] + [{**moved, wrong["cell"]: wrong["code"]} for wrong in wrongs])
    assert reference == {name: "" for name in probes_for(assignment)}
    for wrong, got in zip(wrongs, runs):
        for cell, verdict in got.items():
            assert bool(verdict) == (cell in wrong["loses"]), (wrong["name"], cell, verdict)


@pytest.mark.parametrize("assignment", ["ch05_decoding", "ch06_decoder"])
def test_references_agree_when_computed_by_concurrent_grading_threads(assignment):
    """These chapters' references seed torch's global generator and build a model from it. The class grader
    computes them in several threads at once; without one-at-a-time they drew each other's numbers, and a
    correct cell was flagged (it happened in CI with the known-wrong runs, two threads)."""
    for name, probe in probes_for(assignment).items():
        inputs = probe.inputs(torch.Generator().manual_seed(0))
        alone = reference_outputs(probe, inputs)
        with ThreadPoolExecutor(max_workers=4) as pool:
            together = list(pool.map(lambda _: reference_outputs(probe, inputs), range(8)))
        for outputs in together:
            assert all(torch.equal(a, b) for a, b in zip(outputs, alone)), f"{name}'s reference changed under threads"


@pytest.mark.parametrize("assignment", ["ch05_decoding", "ch06_decoder", "ch07_llama_gqa"])
def test_references_agree_while_other_threads_draw_inputs(assignment):
    """Some inputs seed torch's global generator to draw a module's weights. While one grading thread computes
    a seeded reference, another draws the next student's inputs: unguarded, the draw reseeded the reference's
    build halfway and an honest cell was flagged (it happened in a full test run, chapter 6's transformer)."""
    probes = probes_for(assignment)
    inputs = fresh_inputs(probes, torch.Generator().manual_seed(0))
    alone = {name: reference_outputs(probe, inputs[name]) for name, probe in probes.items()}

    def reference(name: str):
        return name, reference_outputs(probes[name], inputs[name])

    def draw(seed: int):
        return fresh_inputs(probes, torch.Generator().manual_seed(seed))

    with ThreadPoolExecutor(max_workers=4) as pool:
        jobs = [pool.submit(reference, name) for _ in range(12) for name in probes]
        draws = [pool.submit(draw, seed) for seed in range(1, 25)]
        together = [job.result() for job in jobs]
        for job in draws:
            job.result()
    for name, outputs in together:
        assert all(torch.equal(a, b) for a, b in zip(outputs, alone[name])), \
            f"{name}'s reference changed while another thread drew inputs"


HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.S)


def refusing_tests(assignment: str) -> set[str]:
    """The test cells whose hidden tests require a ValueError on bad input."""
    source = nbformat.read(REPO / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    return {cell.metadata["nbgrader"]["grade_id"] for cell in source.cells
            if cell.metadata.get("nbgrader", {}).get("grade")
            and any("except ValueError" in part for part in HIDDEN.findall(cell.source))}


# Refusals a chapter's solution need not make itself: with its own checks disarmed, the bad input still meets an
# earlier chapter's check, which the sandbox's attnlab holds, and the hidden test passes too.
REFUSED_UPSTREAM = {
    "ch04_encoder/test_encoder": "chapter 1's attention refuses a mask that does not broadcast to the scores",
    "ch06_decoder/test_cross_attention": "chapter 1's attention refuses a mask that does not broadcast to the scores",
    "ch07_llama_gqa/test_llama": "chapter 5's KVCache refuses more positions than max_seq_len",
}


def disarmed(code: str) -> str:
    """The code with each `raise ValueError(...)` turned into an expression that builds the error and drops it."""
    return code.replace("raise ValueError(", "ValueError(").replace(") from None", ")")


@pytest.mark.parametrize("assignment", WITH_PROBES)
def test_what_the_hidden_tests_refuse_the_re_check_refuses(assignment):
    """A forged pass (a cell that swallows the notebook's errors) is graded by the re-check alone, so the re-check
    must require every refusal the hidden tests require. With every `raise ValueError` of the solution disarmed,
    each test cell whose hidden tests expect a ValueError fails its re-check (unless an earlier chapter's code
    refuses the same input: REFUSED_UPSTREAM), and the others pass."""
    mutant = {cell: disarmed(code) for cell, code in solution_code(assignment).items() if "raise ValueError(" in code}
    expected = refusing_tests(assignment)
    assert mutant or not expected, f"{assignment}: hidden tests expect a ValueError that no solution raises"
    got = verdicts(assignment, mutant)
    for test, verdict in got.items():
        if test in expected and f"{assignment}/{test}" not in REFUSED_UPSTREAM:
            assert verdict, f"{test}: a function that refuses nothing passes the re-check"
        else:
            assert not verdict, f"{test} fails the re-check, though its hidden tests pass: {verdict}"
    for test, probe in probes_for(assignment).items():
        assert test in expected or not probe.refusals, f"{test} refuses input that its hidden tests accept"
