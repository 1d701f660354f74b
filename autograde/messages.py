"""What a student is told about a failed test cell: the same text in the feedback page and the results.

Everything a submission's kernel reports can be forged, the traceback and the exception's name included, and
the hidden tests' source is readable inside that kernel. So the text shown is the instructor's: the failure's
message is compared with the messages written on the cell's asserts (their f-string fields may take a short,
single-line value), and only a match is shown, in full. A failure that matches no message is told by its
exception's name when that is a built-in or the grader's own (a timeout, a dead kernel), never by its text;
the student sees the whole traceback by running the visible tests in their own notebook. The only text a
submission chooses that can reach the page is an f-string field (at most MAX_FIELD characters, one line).
"""
from __future__ import annotations

import ast
import builtins
import re
import textwrap
from dataclasses import dataclass

HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"
# The assert helpers the tests use, and the keyword that carries their message.
MESSAGE_KEYWORDS = {"assert_close": "msg", "assert_allclose": "err_msg", "assert_array_equal": "err_msg",
                    "assert_equal": "err_msg"}
MAX_FIELD = {"hidden": 40, "visible": 120}   # characters an f-string field of a message may take when shown
MAX_LINE = 2000         # longer lines of a failure are not matched at all (and cannot slow the matching down)
# numpy's and torch's comparison details that carry only numbers: shown after a matched visible message
NUMERIC_DETAIL = re.compile(r"(Mismatched elements: \d+ / \d+ \([\d.]+%\)|"
                            r"Max (absolute|relative) difference( among violations)?: [-+\d.e infa]{1,30}|"
                            r"Greatest (absolute|relative) difference: [-+\d.e infa]{1,30} at index \([\d, ]{0,40}\) "
                            r"\(up to [-+\d.e]{1,20} allowed\))")
BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                  if isinstance(value, type) and issubclass(value, BaseException)}
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
    try:
        return ast.parse(code)
    except SyntaxError:
        pass
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
    if isinstance(node, ast.Lambda) and len(node.args.args) == 1:
        # msg=lambda details: MESSAGE + "\n\n" + details: torch's own report follows the message. The message is
        # what is matched; the report's numeric lines are added after it, as for numpy's.
        body = node.body
        while isinstance(body, ast.BinOp) and isinstance(body.op, ast.Add) and (
                isinstance(body.right, ast.Name)
                or isinstance(body.right, ast.Constant) and isinstance(body.right.value, str) and not body.right.value.strip()):
            body = body.left
        return _pattern(body, field)
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


def _marker_line(source: str) -> int | None:
    return next((i + 1 for i, line in enumerate(source.splitlines()) if HIDDEN_BEGIN in line), None)


def message_patterns(source: str, part: str) -> list[re.Pattern]:
    """The messages the asserts of a test cell's visible or hidden part can produce.

    The whole cell is parsed (the hidden-test markers are comments), since a hidden part may sit inside a
    block that the visible part opens; each assert belongs to the part its line is in."""
    try:
        nodes = message_nodes(source)
    except SyntaxError:
        return []
    marker = _marker_line(source)
    patterns = []
    for node, message in nodes:
        hidden = marker is not None and node.lineno > marker
        if (part == "hidden") != hidden or message is None:
            continue
        pattern = _pattern(message, MAX_FIELD[part])
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
    candidates = [text for text in [evalue.strip()] + [line.strip() for line in evalue.splitlines()]
                  if text and len(text) <= MAX_LINE]
    for pattern in message_patterns(source, part):
        for text in candidates:
            if pattern.fullmatch(text):
                return text
    return None


def _name(ename: str) -> str:
    """An exception's name, shown only when the submission cannot have chosen it."""
    return ename if ename in BUILTIN_ERRORS or ename in GRADER_ERRORS else "an exception"


def failure_message(source: str, error: dict) -> str:
    """What the student and the instructor are told about the first error of a test cell."""
    failure = _failure(error)
    if failure.ename in GRADER_ERRORS:
        return f"{failure.ename}: {GRADER_ERRORS[failure.ename]}"
    if failure.ename == "NotImplementedError":
        # an exercise not written yet, wherever a test first called it
        return "NotImplementedError: an exercise this cell calls is not written yet (delete its raise line)"
    try:
        hidden = failed_in_hidden_part(source, error)
        matched = matched_message(source, "hidden" if hidden else "visible", failure.evalue)
        if hidden and not matched:
            # a check written in the visible part (a helper the hidden tests call again): its message too is
            # the instructor's, and one the student has already seen
            matched = matched_message(source, "visible", failure.evalue)
    except (SyntaxError, ValueError, RecursionError):
        hidden, matched = True, None
    name = _name(failure.ename)
    if not hidden:
        if matched:
            details = [line.strip() for line in failure.evalue.splitlines()
                       if NUMERIC_DETAIL.fullmatch(line.strip())]
            return "\n".join([f"{name}: {matched}", *details])
        return (f"{name} (its message is not repeated here: run this test cell in your notebook to see it "
                "with its traceback)")
    if matched:
        return f"failed a hidden test: {matched}"
    if failure.ename != "AssertionError":
        return (f"failed a hidden test: your code raised {name} on an input the visible tests do not try "
                "(other shapes, batch dimensions, dtypes, masks or extreme values)")
    return ("failed a hidden test (AssertionError). The hidden tests check harder cases than the visible ones: "
            "other shapes, batch dimensions, dtypes, masks and extreme values.")


def safe_failure_message(source: str, error: dict) -> str:
    """failure_message, and a plain statement if building it fails: a message must never cost a grade."""
    try:
        return failure_message(source, error)
    except Exception as exc:  # noqa: BLE001 - the grader's own failure, named by its type (never the submission's text)
        return f"this test cell failed (its message could not be shown: {type(exc).__name__} in the grader)"


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
