"""What a student is told about a failed test cell: the same text in the feedback page and the results.

A failure is shown through the message the instructor wrote on the failing assert: the failure's text is
compared with the messages of the cell's asserts (their f-string fields may take any short value), and a
match is shown in full, however long, with the comparison's details for a visible test. A hidden test's
failure that matches no message shows only the exception's type: a submission cannot make the feedback print
a hidden test's code, whatever its exception says, and a student learns which property failed without seeing
the inputs that found it. A visible test's failure that matches no message (an exception raised inside the
student's code) shows its first line, as a traceback would.
"""
from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"
# The assert helpers the tests use, and the keyword that carries their message.
MESSAGE_KEYWORDS = {"assert_close": "msg", "assert_allclose": "err_msg", "assert_array_equal": "err_msg",
                    "assert_equal": "err_msg"}
MAX_FIELD = {"hidden": 80, "visible": 400}   # characters an f-string field of a message may take when shown
MAX_DETAIL_LINES = 12   # lines of a visible comparison's details (mismatched elements, largest difference)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Errors the grader puts in place of a cell's outputs (autograde/sandbox_runner.py, execute.py): each is told
# in the grader's own words, since the text of an output could have been written by the submission.
GRADER_ERRORS = {
    "CellTimeout": "this cell ran past the time limit for one cell and was interrupted; the notebook went on "
                   "without it. Look for a loop that does not end, or work far larger than the exercise needs.",
    "CellStopped": "this cell ran past the time limit for one cell and ignored the interrupt (it caught "
                   "KeyboardInterrupt, or sat in C code), so it was stopped; the notebook was graded without it.",
    "KernelDied": "the kernel died while this cell ran (os._exit, a crash, or running out of memory); the "
                  "notebook was graded without it.",
    "NotRun": "this cell was not run: the notebook ran past the time limit for a whole submission before it "
              "reached this cell.",
    "GradingError": "this cell could not be graded: the notebook's run produced no readable result.",
}


def hidden_part(source: str) -> str:
    return source.split(HIDDEN_BEGIN, 1)[1].split(HIDDEN_END, 1)[0] if HIDDEN_BEGIN in source else ""


def _parse(code: str) -> ast.Module:
    code = textwrap.dedent(code)
    try:
        return ast.parse(code)
    except SyntaxError:   # a hidden part inside an indented block (a `with` or `for` of the visible part)
        return ast.parse("if True:\n" + textwrap.indent(code, "    "))


def _pattern(node: ast.expr, field: int) -> str | None:
    """A regular expression for the text a message expression can produce, or None if it is not a string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(re.escape(str(value.value)))
            else:
                parts.append(f"[^\\n]{{0,{field}}}?")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _pattern(node.left, field), _pattern(node.right, field)
        return left + right if left is not None and right is not None else None
    return None


def message_nodes(code: str) -> list[tuple[ast.AST, ast.expr | None]]:
    """(assertion, its message expression or None) for every assert and assert helper call in `code`."""
    found = []
    for node in ast.walk(_parse(code)):
        if isinstance(node, ast.Assert):
            found.append((node, node.msg))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in MESSAGE_KEYWORDS:
                found.append((node, next((k.value for k in node.keywords if k.arg == MESSAGE_KEYWORDS[name]), None)))
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                getattr(node.exc.func, "id", "") == "AssertionError" and node.exc.args:
            found.append((node, node.exc.args[0]))
    return found


def visible_part(source: str) -> str:
    return source.split(HIDDEN_BEGIN, 1)[0]


def message_patterns(source: str, part: str) -> list[re.Pattern]:
    """The messages the asserts of a test cell's visible or hidden part can produce."""
    code = hidden_part(source) if part == "hidden" else visible_part(source)
    patterns = []
    for _, message in message_nodes(code):
        pattern = _pattern(message, MAX_FIELD[part]) if message is not None else None
        if pattern:
            patterns.append(re.compile(pattern))
    return patterns


@dataclass
class Failure:
    ename: str
    evalue: str
    traceback: str


def _failure(error: dict) -> Failure:
    return Failure(str(error.get("ename", "Error"))[:80], ANSI.sub("", str(error.get("evalue", ""))),
                   ANSI.sub("", "\n".join(error.get("traceback", []))))


def failed_in_hidden_part(source: str, error: dict) -> bool:
    """True when the test cell's own frame of the traceback is at or after the hidden-test marker."""
    lines = source.splitlines()
    marker = next((i + 1 for i, line in enumerate(lines) if HIDDEN_BEGIN in line), None)
    if marker is None:
        return False
    frames = re.findall(r"Cell In\[\d+\], line (\d+)", _failure(error).traceback)
    # Unknown location: treat as hidden, so no student-controlled text is shown.
    return not frames or int(frames[0]) >= marker


def matched_message(source: str, part: str, evalue: str) -> str | None:
    """The part of `evalue` that one of the messages of the cell's `part` produces, if any."""
    candidates = [evalue.strip()] + [line.strip() for line in evalue.splitlines() if line.strip()]
    for pattern in message_patterns(source, part):
        for text in candidates:
            if pattern.fullmatch(text):
                return text
    return None


def failure_message(source: str, error: dict) -> str:
    """What the student and the instructor are told about the first error of a test cell."""
    failure = _failure(error)
    if failure.ename in GRADER_ERRORS:
        return f"{failure.ename}: {GRADER_ERRORS[failure.ename]}"
    if failure.ename == "NotImplementedError":
        # an exercise not written yet, wherever a test first called it
        first = (failure.evalue.strip().splitlines() or [""])[0][:300]
        return f"NotImplementedError: {first}" if first else "NotImplementedError: this exercise is not written yet"
    if not failed_in_hidden_part(source, error):
        matched = matched_message(source, "visible", failure.evalue)
        if matched:
            # numpy's comparisons add what differed (tolerances, mismatched elements, largest difference)
            details = [line.strip()[:200] for line in failure.evalue.strip().splitlines()
                       if line.strip() and line.strip() != matched][:MAX_DETAIL_LINES]
            return "\n".join([f"{failure.ename}: {matched}", *details])
        first = (failure.evalue.strip().splitlines() or [""])[0][:300]
        return f"{failure.ename}: {first}" if first else failure.ename
    matched = matched_message(source, "hidden", failure.evalue)
    if matched:
        return f"failed a hidden test: {matched}"
    if failure.ename != "AssertionError":
        first = (failure.evalue.strip().splitlines() or [""])[0][:200]
        return (f"failed a hidden test: your code raised {failure.ename}: {first} (on an input the visible "
                "tests do not try)")
    return ("failed a hidden test (AssertionError). The hidden tests check harder cases than the visible ones: "
            "other shapes, batch dimensions, dtypes, masks and extreme values.")


def cell_label(source: str, grade_id: str) -> str:
    """A test cell's name for the summary: its docstring's first line (what it checks), else its grade id."""
    try:
        body = _parse(source).body        # the hidden-test markers are comments: the whole cell parses
    except SyntaxError:
        return grade_id
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        first = body[0].value.value.strip().splitlines()[0].strip()
        return first or grade_id
    return grade_id
