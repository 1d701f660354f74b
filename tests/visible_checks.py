"""The visible checks a student sees, run without the grader: which of a released notebook's test cells fail
for given answers, and with what message. This proves that each message a visible check can print is printed
for the mistake it names (the `says` of a known-wrong implementation), at a fraction of grading's cost.

One process per chapter (`python -m tests.visible_checks ASSIGNMENT`, runs as JSON on stdin): it runs the
released notebook's code cells in order in a fresh namespace per run, as the student's kernel does, in the
notebook's own folder and with the grader's environment (ATTNLAB_GRADING: the closing demos skip themselves).
With --demos (the closing demos, without ATTNLAB_GRADING), each run is a process forked from that one.
Test cells run in order up to the last one asked for, as in the student's kernel (one may define a helper a
later one uses); the errors of those not asked for are not reported. Each cell's source is registered with
linecache under its own name, as IPython does, so that code reading a function's source (Triton, inspect) works.
"""
from __future__ import annotations

import ast
import json
import linecache
import os
import re
import subprocess
import sys
from dataclasses import dataclass

from coursekit.layout import REPO_ROOT as REPO
from tests.submissions import released, solution_code


@dataclass(frozen=True)
class Message:
    """One message a visible check can show: the test cell it is in, its source, and a pattern found in every
    error it produces (its constant text literally, each interpolated value as anything; numpy.testing and
    torch.testing put their own lines around it)."""
    cell: str
    source: str
    pattern: str
    literal: str            # the constant text alone: what tells two messages apart

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text, re.DOTALL) is not None


def _pattern(node: ast.expr) -> tuple[str, str] | None:
    """(regex, constant text) of a message expression, or None when its text is not written in the cell."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value), node.value
    if isinstance(node, ast.JoinedStr):
        parts = [(re.escape(v.value), v.value) if isinstance(v, ast.Constant) else (".*", "") for v in node.values]
        return "".join(p for p, _ in parts), "".join(t for _, t in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _pattern(node.left), _pattern(node.right)
        left, right = left or (".*", ""), right or (".*", "")
        return left[0] + right[0], left[1] + right[1]
    if isinstance(node, ast.Lambda):          # torch.testing.assert_close(msg=lambda details: "..." + details)
        return _pattern(node.body)
    return None


def visible_messages(assignment: str) -> list[Message]:
    """Every message of the release's visible test cells: the checks a student reads when a visible test fails.
    A message whose text is built at run time (a variable, .format) has no text of its own (`literal` empty)."""
    found = []
    for cell in released(assignment).cells:
        grading = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not grading.get("grade"):
            continue
        for node in ast.walk(ast.parse(cell.source)):
            messages = [node.msg] if isinstance(node, ast.Assert) and node.msg is not None else []
            if isinstance(node, ast.Call):
                # torch.testing.assert_close(msg=...), numpy.testing's err_msg=, AssertionError("...")
                messages += [keyword.value for keyword in node.keywords if keyword.arg in ("msg", "err_msg")]
                if isinstance(node.func, ast.Name) and node.func.id == "AssertionError" and node.args:
                    messages.append(node.args[0])
            for message in messages:
                pattern = _pattern(message) or (".*", "")      # text built at run time: none of its own to match
                found.append(Message(grading["grade_id"], ast.unparse(message), *pattern))
    return found


def which_message(messages: list[Message], cell: str, text: str) -> Message | None:
    """The visible message of `cell` that produced `text`: the one matching it with the most text of its own."""
    candidates = [m for m in messages if m.cell == cell and m.literal.strip() and m.matches(text)]
    return max(candidates, key=lambda m: len(m.literal), default=None)


def failures(assignment: str, runs: list[dict[str, str]], timeout: int = 1800) -> list[dict[str, str | None]]:
    """For each run, {"answers": {answer cell: code} (the reference answers elsewhere), "tests": [test cells]}:
    {test cell: its error as "Type: message", or None}."""
    process = subprocess.run([sys.executable, "-m", "tests.visible_checks", assignment], input=json.dumps(runs),
                             capture_output=True, text=True, cwd=REPO, timeout=timeout,
                             env=os.environ | {"ATTNLAB_GRADING": "1", "TRITON_INTERPRET": "1"})
    assert process.returncode == 0, process.stderr[-4000:]
    return json.loads(process.stdout.splitlines()[-1])


def _execute(source: str, name: str, namespace: dict) -> None:
    filename = f"<cell {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def demo_failures(assignment: str, runs: list[dict[str, str]], timeout: int = 3600) -> list[dict[str, str] | None]:
    """For each run, {"answers": {answer cell: code}}: the first error of the notebook's cells outside the tests,
    the closing demos included (as "restart and run all" runs them, outside the grader), as {cell, error}, or None.
    Each run goes in a process of its own, forked from one that imported the notebook's modules once (_forked)."""
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_GRADING"} | {"TRITON_INTERPRET": "1"}
    process = subprocess.run([sys.executable, "-m", "tests.visible_checks", assignment, "--demos"], cwd=REPO, env=env,
                             input=json.dumps(runs), capture_output=True, text=True, timeout=timeout)
    assert process.returncode == 0, process.stderr[-4000:]
    return json.loads(process.stdout.splitlines()[-1])


AT_ONCE = 2             # forked runs side by side: the machine's cores (the notebooks compute on one thread each)


def _forked(work, items: list) -> list:
    """[work(item) for item in items], each call in a child forked from this process, AT_ONCE at a time: a run
    starts with what this process imported, and nothing one run changes (a module's globals, a patched function)
    reaches the next. A child that dies without a result is reported as a failed run, with its exit status."""
    import tempfile
    results: dict[int, object] = {}
    with tempfile.TemporaryDirectory(prefix="visible-checks-") as folder:
        running: dict[int, int] = {}                  # pid -> index
        pending = list(enumerate(items))
        while pending or running:
            while pending and len(running) < AT_ONCE:
                index, item = pending.pop(0)
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    code = 0
                    try:
                        result = json.dumps(work(item))
                        with open(os.path.join(folder, f"{index}.json"), "w", encoding="utf-8") as out:
                            out.write(result)
                    except BaseException:  # noqa: BLE001 - reported through the missing result
                        import traceback
                        traceback.print_exc()
                        code = 1
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)          # as a run of its own ends: nothing it left behind may hold this one
                running[pid] = index
            pid, status = os.wait()
            if pid in running:
                index = running.pop(pid)
                path = os.path.join(folder, f"{index}.json")
                ended = f"ended with status {os.waitstatus_to_exitcode(status)} and no result"
                results[index] = (json.loads(open(path, encoding="utf-8").read()) if os.path.isfile(path) else
                                  {"cell": "(the run's process)", "error": ended})
    return [results[i] for i in range(len(items))]


def _preload(assignment: str) -> None:
    """Import what the notebook's code cells import at their top level (torch, transformers...), once, before the
    runs fork: each run would import the same modules again. attnlab's are left to the runs, as a kernel meets them."""
    import importlib

    from autograde.sandbox_runner import top_level_imports
    sources = [cell.source for cell in released(assignment).cells if cell.cell_type == "code"]
    for module, _ in top_level_imports(sources):
        if not module.startswith("attnlab"):
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - the run meets the same error in its own cell, where it belongs
                pass


def _demo(assignment: str, answers: dict[str, str]) -> dict[str, str] | None:
    namespace: dict = {"__name__": "__main__"}
    for number, cell in enumerate(released(assignment).cells):
        grading = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or grading.get("grade"):
            continue
        name = grading.get("grade_id") or f"cell {number}"
        try:
            _execute(answers.get(grading.get("grade_id"), cell.source), name, namespace)
        except Exception as error:     # noqa: BLE001 - a failed demo is the result
            return {"cell": name, "error": f"{type(error).__name__}: {error}"}
    return None


def _run(assignment: str, answers: dict[str, str], tests: set[str] | None) -> dict[str, str | None]:
    results: dict[str, str | None] = {}
    namespace: dict = {"__name__": "__main__"}
    for number, cell in enumerate(released(assignment).cells):
        if cell.cell_type != "code":
            continue
        grading = cell.metadata.get("nbgrader", {})
        name = grading.get("grade_id") or f"cell {number}"
        if grading.get("grade"):
            try:
                _execute(cell.source, name, namespace)
                error = None
            except Exception as failure:     # noqa: BLE001 - a failed check is the result
                error = f"{type(failure).__name__}: {failure}"
            if tests is None or name in tests:
                results[name] = error
            if tests is not None and set(results) >= tests:
                break
        else:
            _execute(answers.get(name, cell.source), name, namespace)
    return results


def main(assignment: str, demos: bool) -> None:
    runs = json.loads(sys.stdin.read())
    os.chdir(REPO / "exercises" / assignment)
    reference = solution_code(assignment)
    if demos:
        _preload(assignment)
        out = _forked(lambda run: _demo(assignment, reference | run.get("answers", {})), runs)
    else:
        out = [_run(assignment, reference | run.get("answers", {}), set(run["tests"]) if run.get("tests") else None)
               for run in runs]
    print("\n" + json.dumps(out))       # on a line of its own, whatever the cells printed last


if __name__ == "__main__":
    main(sys.argv[1], "--demos" in sys.argv[2:])
