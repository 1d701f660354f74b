"""Hostile and broken submissions (chapter 1), graded as a class through the real CLI, in parallel.

Each case is a submission with the score it must get. The scores must be right whatever the student
code does before the tests run; nothing may leak, nothing outside its sandbox may change, and no case
may stop the others from being graded. Max score 16: test_softmax_np 3, test_softmax 3,
test_softmax_masked 2, test_attention_scores 2, test_sdpa 3, test_sdpa_mask 3.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.hostile_cases import A, cases, hidden_lines
from tests.submissions import REPO, write

pytestmark = pytest.mark.slow       # grades classes or drives the built site: not in `make test-fast`


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("class")
    inbox = workspace / "inbox" / A
    inbox.mkdir(parents=True)
    for name, (content, *_rest) in cases().items():
        path = inbox / f"{name}.ipynb"
        path.write_bytes(content) if isinstance(content, bytes) else write(content, path)
    protected = [REPO / "attnlab" / "layers" / "softmax.py", REPO / "solutions" / A / f"{A}.ipynb"]
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in protected}
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "autograde", "class", A, "--workspace", str(workspace), "--workers", "2",
                          "--cell-timeout", "10", "--submission-timeout", "240", "--json"],
                         cwd=REPO, capture_output=True, text=True, timeout=3600)
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    after_hash = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in protected}
    assert before == after_hash, "a submission changed the course's files"
    results = {r["student"]: r for r in json.loads(run.stdout)}
    return results, workspace, seconds


@pytest.mark.parametrize("name", list(cases()))
def test_hostile_case_gets_its_expected_score(graded, name):
    _, expected, flagged, note = cases()[name]
    result = graded[0][name]
    cells = {c["cell"]: c for c in result["cells"]}
    if expected is None:   # only the cheated exercise is constrained: it must earn nothing
        assert cells["test_attention_scores"]["score"] == 0, result
    else:
        assert result["score"] == expected, json.dumps(result, indent=1)[:3000]
    if flagged is not None:
        assert result["flagged"] == flagged, json.dumps(result, indent=1)[:3000]
    if note:
        assert note in result["error"] + " ".join(result["notes"]), result


def test_every_case_was_graded_in_one_class_run(graded):
    results, workspace, seconds = graded
    assert set(results) == set(cases())
    csv_text = (workspace / "grades.csv").read_text()
    assert all(name in csv_text for name in cases())
    assert (workspace / "reports" / A / "summary.md").is_file() and (workspace / "reports" / A / "summary.png").is_file()
    print(f"{len(results)} submissions graded in {seconds:.0f} s")


def test_nothing_leaks_into_feedback(graded):
    hidden = hidden_lines()
    assert hidden
    for name, result in graded[0].items():
        text = open(result["feedback"], encoding="utf-8").read()
        leaked = [line for line in hidden if line in text]
        assert not leaked, f"{name}: feedback shows hidden test lines {leaked[:2]}"


def _outputs(workspace, student: str) -> str:
    path = workspace / ".work" / "runs" / A / student / "autograded" / student / A / f"{A}.ipynb"
    nb = nbformat.read(path, as_version=4)
    return "\n".join(o.get("text", "") + o.get("ename", "") + o.get("evalue", "")
                     for c in nb.cells for o in c.get("outputs", []))


def test_sandbox_hid_files_blocked_writes_and_network(graded):
    workspace = graded[1]
    reads = _outputs(workspace, "read_forbidden_files")
    assert "READ" not in reads.replace("NOT FOUND", "") and reads.count("NOT FOUND") == 5, reads[:2000]
    assert "FOUND []" in reads and "reference not importable" in reads
    writes = _outputs(workspace, "write_outside")
    # Only the sandbox's private /tmp (thrown away with it) takes ../../escape.txt; nothing reaches the host.
    assert writes.count("REFUSED") == 4 and "WROTE ../../escape.txt" in writes, writes[:2000]
    assert not Path("/tmp/escape.txt").exists()
    network = _outputs(workspace, "network")
    assert "CONNECTED" not in network and network.count("BLOCKED") == 2, network[:2000]
    assert "MemoryError" in _outputs(workspace, "memory_bomb")
    flood = _outputs(workspace, "output_flood")
    assert 1000 < flood.count("x" * 200) * 200 <= 200_000, "the flood's output must have been capped"
