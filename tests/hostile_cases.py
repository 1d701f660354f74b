"""Chapter 1's hostile and broken submissions, each with the score it must get (tests/test_hostile.py grades
them as a class; `python -m bench class` prints the same table). Max score 16: test_softmax_np 3,
test_softmax 3, test_softmax_masked 2, test_attention_scores 2, test_sdpa 3, test_sdpa_mask 3.
"""
from __future__ import annotations

import json

import nbformat

from tests.submissions import REPO, known_wrong, released, solution_code, submission

A = "ch01_qkv_softmax"
REF = solution_code(A)
WRONG = {w["name"]: w for w in known_wrong(A)}
STUBS = {gid: f"#| export attnlab/layers/softmax.py\n" for gid in REF}       # every exercise left empty


def after(gid: str, code: str) -> dict[str, str]:
    """The correct solution of cell `gid`, followed by hostile code."""
    return {gid: REF[gid] + "\n" + code}


def with_added_cell(code: str, softmax_np: str | None = None, replace: dict[str, str] | None = None,
                    **metadata) -> nbformat.NotebookNode:
    """The complete solution (with softmax_np's cell, or those of `replace`, replaced) and one more top-level cell of
    the student's own, after the imports."""
    nb = submission(A, {**({} if softmax_np is None else {"softmax_np": softmax_np}), **(replace or {})})
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first_code + 1, nbformat.v4.new_code_cell(code, metadata=metadata))
    return nb


def with_added_markdown(text: str) -> nbformat.NotebookNode:
    """The complete solution with a markdown cell of the student's own, after the imports."""
    nb = submission(A)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first_code + 1, nbformat.v4.new_markdown_cell(text))
    return nb


def uniform_softmax_np_with(cheat: str) -> dict[str, str]:
    """A wrong softmax_np (uniform weights: finite, right shape and dtype) behind a cheat."""
    return {"softmax_np": cheat + "\n#| export attnlab/layers/softmax.py\n"
            "def softmax_np(x, axis=-1):\n    x = np.asarray(x, dtype=np.result_type(x, np.float64) if np.asarray(x).dtype.kind in 'iub' else np.asarray(x).dtype)\n"
            "    return (np.ones_like(x) / x.shape[axis]).astype(x.dtype)\n"}


SWALLOW = "get_ipython().set_custom_exc((BaseException,), lambda shell, etype, evalue, tb, tb_offset=None: None)"
FLOAT64_SOFTMAX_NP = REF["softmax_np"].replace("def softmax_np(x", "def _softmax_np(x") + (
    "\n\ndef softmax_np(x, axis=-1):\n    return _softmax_np(x, axis=axis).astype(np.float64)\n")


# Ways to swallow the errors of later cells, each behind a softmax that computes in float64 (a known-wrong one):
# honest, it scores 5, the 16 points less the 11 of the four tests its `loses` names (test_grading.py checks that it
# loses those, and only those). Swallowed, every
# test passes in the kernel, and only the re-check can say which passed for real: it must be at least as strict as
# the tests, so that the score is never above the honest one. Before, the re-check of test_softmax_masked and
# test_sdpa_mask never fed float32, and these scored 7 to 10.
SWALLOWERS = {
    "showtraceback": ("get_ipython().showtraceback = lambda *a, **k: None", True),
    "custom_exc_any": (SWALLOW, True),
    "custom_exc_assertion": ("get_ipython().set_custom_exc((AssertionError,), "
                             "lambda shell, etype, evalue, tb, tb_offset=None: None)", True),
    # IPython never calls sys.excepthook for a cell's error: nothing is swallowed, nothing flagged
    "excepthook": ("import sys\nsys.excepthook = lambda *a: None", None),
    "pre_run_cell": ("def _quiet(info):\n    get_ipython().showtraceback = lambda *a, **k: None\n"
                     "get_ipython().events.register('pre_run_cell', _quiet)", True),
}


SAVED_ALIAS = """_saved_softmax = torch.softmax
def softmax(x, dim=-1):
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    return torch.nan_to_num(_saved_softmax(x, dim=dim), nan=0.0)
"""

# Two more routes to the same kernels, which a switch-off by name let through (16, unflagged): softmax as
# log_softmax then exp, and attention by its aten operator's name.
LOG_SOFTMAX_ROUTE = """def softmax(x, dim=-1):
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    return torch.nan_to_num(torch.log_softmax(x, dim=dim).exp(), nan=0.0)
"""
ATEN_ATTENTION_ROUTE = """_attention_by_hand = scaled_dot_product_attention
def scaled_dot_product_attention(q, k, v, mask=None):
    _, weights = _attention_by_hand(q, k, v, mask)
    return torch.ops.aten.scaled_dot_product_attention.default(q, k, v, attn_mask=mask), weights
"""

# The runner's private report (autograde/sandbox_runner.py, private_channel) attacked from the kernel: lines forged
# into every descriptor of the runner the kernel can open, then the runner killed before its check of the kernel.
# The runner's pid is the kernel's JPY_PARENT_PID (its parent is the zygote when it was forked from one).
KILL_RUNNER = """
import os, signal
_runner = int(os.environ["JPY_PARENT_PID"])
for _fd in range(64):
    try:
        _w = os.open(f"/proc/{_runner}/fd/{_fd}", os.O_WRONLY | os.O_APPEND)
        os.write(_w, b'{"kernel": []}\\n{"done": true}\\n')
    except OSError:
        pass
os.kill(_runner, signal.SIGKILL)
"""
# out.ipynb and the runner's next file swapped for links, so that its writes would go elsewhere. The runner writes
# each notebook to a new file and renames it over out.ipynb, so neither link is followed: harmless, graded as its cells.
SYMLINK_RECORD = ("import os\nos.remove('out.ipynb')\nos.symlink('/tmp/elsewhere.ipynb', 'out.ipynb')\n"
                  "os.symlink('/tmp/elsewhere.ipynb', 'out.ipynb.part')")

# The re-check runs in the notebook's sandbox after the last cell (sandbox_runner.recheck_here). A process the
# notebook leaves behind would rewrite the re-check's code.json as it appears, putting a right softmax_np in place
# of the wrong one; the runner kills every such process before it writes the file, so the wrong one is re-checked.
REWRITE_THE_RECHECK = """
import glob, json, os, time
if os.fork() == 0:
    os.setsid()
    right = %r
    while True:
        for path in glob.glob(".probe-*/code.json"):
            try:
                spec = json.load(open(path))
                spec["cells"] = [right if "def softmax_np" in cell else cell for cell in spec["cells"]]
                json.dump(spec, open(path + ".new", "w"))
                os.replace(path + ".new", path)
            except Exception:
                pass
        time.sleep(0.0005)
"""
# The kernel's parent, where it is not the runner, is the process every kernel and the re-check are forked from:
# killed, the kernel goes on, and the grader re-checks in a sandbox of its own. It costs nothing and is not flagged.
# (Killing the runner itself is kill_the_runner's case.)
KILL_THE_ZYGOTE = ("import os, signal\nif os.getppid() != int(os.environ['JPY_PARENT_PID']):\n"
                   "    os.kill(os.getppid(), signal.SIGKILL)")


PROBE_READS = """
import os, glob
for path in [%r, %r, %r, %r, %r]:
    try:
        open(path).read(); print("READ", path)
    except Exception as exc:
        print("NOT FOUND", path, type(exc).__name__)
found = []
for root in ("/tmp", "/work", "/root", "/home", "/srv", "/opt"):
    for folder, subfolders, files in os.walk(root):
        # the read-only Python environment is mounted in; everything else of the course must be absent
        subfolders[:] = [d for d in subfolders if d not in (".venv", ".pyenv", "site-packages")]
        found += [os.path.join(folder, f) for f in files
                  if f in ("gradebook.db", "ch01_qkv_softmax.ipynb", "grades.csv") or "solutions" in folder]
print("FOUND", found[:5])
try:
    import attnlab.layers.softmax; print("IMPORTED the reference")
except ImportError:
    print("reference not importable")
"""

WRITES = """
import os
for path in [%r, %r, "/etc/hacked", "/usr/lib/hacked", "../../escape.txt"]:
    try:
        open(path, "w").write("x"); print("WROTE", path)
    except Exception as exc:
        print("REFUSED", path, type(exc).__name__)
"""

ECHO = """
_real_softmax_np = softmax_np
def softmax_np(x, axis=-1):
    import base64
    source = get_ipython().user_ns["_ih"][-1]
    print(source)
    print(base64.b64encode(source.encode()).decode())
    return _real_softmax_np(x, axis)
"""


def cases() -> dict[str, tuple]:
    """name -> (notebook or bytes, expected score, must be flagged, note substring expected in the result)."""
    other_student = str(REPO / "autograde" / "submitted" / "alice" / A / f"{A}.ipynb")
    reads = PROBE_READS % (str(REPO / "solutions" / A / f"{A}.ipynb"), str(REPO / "autograde" / "gradebook.db"),
                           other_student, "/root/.bash_history", str(REPO / "attnlab" / "layers" / "softmax.py"))
    writes = WRITES % (str(REPO / "attnlab" / "layers" / "softmax.py"), str(REPO / "autograde" / "grades.csv"))
    tamper_meta = submission(A, {WRONG["sdpa_inverted_mask"]["cell"]: WRONG["sdpa_inverted_mask"]["code"]})
    for cell in tamper_meta.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") == "test_sdpa_mask":
            meta.update(points=100, locked=False, checksum="0" * 32)
            cell.source = "pass"
        if meta.get("grade_id") == "test_sdpa":
            meta["grade_id"] = "renamed"
    reordered = submission(A)
    reordered.cells.reverse()
    duplicated = submission(A)
    duplicated.cells += [c for c in duplicated.cells if c.metadata.get("nbgrader", {}).get("grade")]
    v3 = json.loads(nbformat.writes(released(A)))
    v3["nbformat"] = 3
    other_assignment = nbformat.read(REPO / "exercises" / "ch02_multihead" / "ch02_multihead.ipynb", as_version=4)
    return {
        "solution": (submission(A), 16, False, None),
        "untouched": (released(A), 0, False, None),
        # runaway resources
        "infinite_loop": (submission(A, after("softmax_np", "while True:\n    pass")), 16, False, None),
        "memory_bomb": (submission(A, after("softmax", "import numpy\n# reserved, not touched: the address-space limit stops it at once, however loaded the machine\n"
                                           "hog = [numpy.empty(2**30, dtype=numpy.uint8) for _ in range(64)]")), 16, False, None),
        "output_flood": (submission(A, after("softmax_np", "for _ in range(10**8):\n    print('x' * 200)")), 16, False, None),
        # one output larger than the cap, the cell's first: cut as it arrives, so the notebook stays readable
        "print_100_mb": (submission(A, after("softmax_np", "print('x' * 100_000_000)")), 16, False, None),
        "print_a_long_list": (submission(A, after("softmax", "print(list(range(10_000_000)))")), 16, False, None),
        # odd but harmless cells: graded, with a note where something was set aside
        "markdown_with_hidden_marker": (with_added_markdown("Notes\n\n### BEGIN HIDDEN TESTS\nmy own words"), 16, False,
                                        "marker of hidden tests"),
        "nbgrader_metadata_a_string": (with_added_cell("y = 1", nbgrader="solution"), 16, False, None),
        # In a cell of its own: forking a kernel that holds torch takes 4 s here on a quiet machine, and past
        # the 10 s cell limit under load, when the cell is stopped and costs its own points (an answer cell
        # would lose them; that rule is the slow cells' below). What is tested is that the process limit
        # stops the bomb, and that the cells after it, run while its children live, are graded.
        "fork_bomb": (with_added_cell("import os, time\nfor _ in range(100000):\n    try:\n        pid = os.fork()\n"
                                      "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(20)\n"
                                      "        os._exit(0)"), 16, False, None),
        # A slow or endless cell of the student's own (an endless sleep, a file-system walk, a loop that swallows
        # the interrupt) costs its own time only: test_grading_robustness.py grades those, idle and under load.
        "background_sleep": (submission(A, after("softmax_np",
                             "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()")),
                             16, False, None),
        # killing the kernel
        "sys_exit": (submission(A, after("attention_scores", "import sys\nsys.exit(3)")), 16, False, None),
        "os_exit": (submission(A, {"attention_scores": "import os\nos._exit(1)"}), 8, False, None),
        # the killing cell is skipped and the notebook rerun: the later, independent exercises keep their points
        "os_exit_after_def": (submission(A, after("softmax_np", "import os\nos._exit(1)")), 13, False, None),
        "kill_self": (submission(A, {"attention_scores": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"}),
                      8, False, None),
        # tampering with test cells
        "delete_test": (_without(submission(A), "test_softmax_np"), 16, False, "was deleted"),
        "edit_tests_and_metadata": (tamper_meta, 13, False, "was edited"),
        "reorder_cells": (reordered, 16, False, None),
        "duplicate_tests": (duplicated, 16, False, "appears 2 times"),
        # faking a pass: wrong code behind a cheat must score 0 on that exercise, and be flagged
        "patch_comparisons": (submission(A, uniform_softmax_np_with(
            "import numpy, numpy.testing, torch, torch.testing, builtins\n"
            "numpy.testing.assert_allclose = numpy.testing.assert_array_equal = lambda *a, **k: None\n"
            "numpy.allclose = torch.allclose = lambda *a, **k: True\n"
            "torch.testing.assert_close = lambda *a, **k: None")), 13, True, None),
        "always_equal_tensor": (submission(A, {"attention_scores": REF["attention_scores"].replace(
            "return q @ k.transpose(-2, -1) / math.sqrt(d_k)",
            "class Yes(torch.Tensor):\n        def __eq__(self, other):\n            return True\n"
            "    torch.testing.assert_close = lambda *a, **k: None\n"
            "    return torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype).as_subclass(Yes)")}),
                                None, True, None),
        "input_transformer": (submission(A, {**STUBS, "softmax_np":
            "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])"}), 0, True, None),
        "patched_run_cell": (submission(A, {**STUBS, "softmax_np":
            "ip = get_ipython()\n_orig = ip.run_cell\nip.run_cell = lambda raw_cell, *a, **k: _orig('pass', *a, **k)"}),
            0, True, None),
        "swallow_exceptions": (submission(A, {**STUBS, "softmax_np":
            "get_ipython().set_custom_exc((BaseException,), lambda shell, etype, evalue, tb, tb_offset=None: None)"}),
            0, True, None),
        # torch's softmax kept under another name before the tests switch it off, in a softmax right in every
        # other way: the switch works at the dispatcher, so the saved name reaches it too. test_softmax (3) is
        # lost in the kernel; the re-check, which refuses the kernel in every test that calls softmax, zeroes
        # and flags test_softmax_masked (2), test_sdpa (3) and test_sdpa_mask (3). Before: 16, unflagged.
        "saved_library_alias": (submission(A, {"softmax": STUBS["softmax"] + SAVED_ALIAS}), 5, True, None),
        # The switch-off refuses the operators, however they are reached: log_softmax loses what the saved alias
        # loses (5, flagged); attention by its aten name loses test_sdpa (3) in the kernel, and the re-check zeroes
        # and flags test_sdpa_mask (3), whose notebook test has no switch-off. Before: 16 and 16, unflagged.
        "log_softmax_route": (submission(A, {"softmax": STUBS["softmax"] + LOG_SOFTMAX_ROUTE}), 5, True, None),
        "aten_attention_route": (submission(A, after("scaled_dot_product_attention", ATEN_ATTENTION_ROUTE)), 10, True,
                                 None),
        # a mistake only a hidden test sees (float32 logits give float64 weights) behind a cell that swallows every
        # exception: the kernel's run shows every test passed, the kernel check flags the handler, and the
        # re-check, which checks the dtype as the hidden test does, takes test_softmax_np's 3 points: 13, as honest
        "swallow_beside_a_hidden_only_mistake": (with_added_cell(SWALLOW, softmax_np=FLOAT64_SOFTMAX_NP), 13, True,
                                                 "changed how its kernel runs cells"),
        # The grader's record of the run, attacked from inside the sandbox, beside a handler that swallows every
        # exception (harmless here: the solution is right). Before the runner reported over a channel of its own:
        # a folder where it wrote the kernel check's answer, or a killed runner, hid the handler (16, unflagged),
        # and a linked out.ipynb made the whole run unreadable (0). Now each is flagged, and the re-check grades.
        "block_the_kernel_checks_answer": (with_added_cell(SWALLOW + "\nimport os\nos.mkdir('out.ipynb.kernel.json')"),
                                           16, True, "changed how its kernel runs cells"),
        "kill_the_runner": (with_added_cell(SWALLOW + KILL_RUNNER), 16, True, "runner was stopped before its end"),
        "link_the_record_elsewhere": (with_added_cell(SYMLINK_RECORD), 16, False, None),
        # wrong softmax_np behind a swallowing handler, and a process left to put the right one into the re-check
        "rewrite_the_recheck": (submission(A, uniform_softmax_np_with(SWALLOW + REWRITE_THE_RECHECK % REF["softmax_np"])),
                                13, True, "changed how its kernel runs cells"),
        "kill_the_zygote": (with_added_cell(KILL_THE_ZYGOTE), 16, False, None),
        "settrace_skip_asserts": (submission(A, uniform_softmax_np_with(
            "import sys\ndef _skip(frame, event, arg):\n    return _skip\nsys.settrace(_skip)")), 13, None, None),
        **{f"swallow_{name}_float64_softmax": (with_added_cell(code, replace={"softmax": WRONG["softmax_in_float64"]["code"]}),
                                               5, flagged, None) for name, (code, flagged) in SWALLOWERS.items()},
        # reading what it must not, and echoing hidden tests
        "read_forbidden_files": (submission(A, after("softmax_np", reads)), 16, False, None),
        "import_reference": (submission(A, {"softmax_np": "from attnlab.layers.softmax import softmax_np"}), 13, False, None),
        # its softmax_np needs IPython to run, so it fails the plain-Python re-check: 0 for that exercise, flagged
        "echo_hidden_tests": (submission(A, after("softmax_np", ECHO)), 13, True, None),
        # reaching outside
        "write_outside": (submission(A, after("softmax_np", writes)), 16, False, None),
        "network": (submission(A, after("softmax_np",
            "import socket\nfor host in [('1.1.1.1', 80), ('127.0.0.1', 22)]:\n    try:\n"
            "        socket.create_connection(host, timeout=3); print('CONNECTED', host)\n"
            "    except OSError as exc:\n        print('BLOCKED', host, type(exc).__name__)")), 16, False, None),
        # broken files
        "invalid_json": (b'{"cells": [', 0, False, "not valid notebook JSON"),
        "nbformat_3": (json.dumps(v3).encode(), 0, False, "nbformat version 3"),
        "not_utf8": (b'{"cells": [], "nbformat": 4, "x": "\xff\xfe"}', 0, False, "not UTF-8"),
        "other_assignment": (other_assignment, 0, False, "another assignment"),
        "empty_file": (b"", 0, False, "empty"),
    }


def _without(nb, grade_id):
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != grade_id]
    return nb


def hidden_lines() -> set[str]:
    """Lines of chapter 1's hidden tests that its release does not show (none may reach a feedback page)."""
    source = nbformat.read(REPO / "solutions" / A / f"{A}.ipynb", as_version=4)
    visible = {line.strip() for c in released(A).cells for line in c.source.splitlines()}
    lines = set()
    for cell in source.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            lines |= {line.strip() for line in hidden.splitlines() if len(line.strip()) > 25}
    return lines - visible
