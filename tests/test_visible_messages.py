"""Every message a visible check can print is printed for the mistake it names.

A visible check whose message names a misconception ("use repeat_interleave", "eps goes inside the square root")
helps only if that mistake reaches it. A check that cannot fire (two heads that are equal under both orders, a
permutation that is its own inverse) tells the student something wrong instead. So each such message has a
mistake written for it (tests/known_wrong/messages/<chapter>.toml, or a graded known-wrong with `says`), run
against the release's visible checks as the student's kernel runs them (tests/visible_checks.py): the first cell
of its `loses` must fail with that very message. The messages that only state what was expected and what came
(a shape, a dtype) are listed as `plain`, each with its reason."""
from __future__ import annotations

import functools

import pytest

from coursekit.sync import chapter_notebooks
from tests.submissions import known_wrong, message_wrongs, plain_messages
from tests.visible_checks import Message, failures, visible_messages, which_message

CHAPTERS = [nb.parent.name for nb in chapter_notebooks()]


@functools.cache
def fired(assignment: str) -> tuple[tuple[dict, str | None, Message | None], ...]:
    """(mistake, the error of its first `loses` cell or None, the visible message that error is) for each mistake
    with a `says`: the chapter's message mistakes and its graded known-wrongs, in one process."""
    wrongs = message_wrongs(assignment) + [w for w in known_wrong(assignment) if w["says"]]
    runs = [{"answers": {w["cell"]: w["code"]}, "tests": [w["loses"][0]]} for w in wrongs]
    messages = visible_messages(assignment)
    out = []
    for wrong, result in zip(wrongs, failures(assignment, runs)):
        error = result.get(wrong["loses"][0])
        text = error.split(": ", 1)[1] if error and ": " in error else error
        out.append((wrong, error, which_message(messages, wrong["loses"][0], text) if text else None))
    return tuple(out)


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_each_message_mistake_prints_its_message(assignment):
    problems = []
    for wrong, error, message in fired(assignment):
        if wrong not in message_wrongs(assignment):
            continue        # a graded known-wrong may name its mistake in a hidden check (test_grading.py)
        where = f"[{wrong['name']}] in {wrong['loses'][0]}"
        if error is None:
            problems.append(f"{where}: the visible checks pass ({wrong['why']})")
        elif not wrong["says"]:
            problems.append(f"{where}: no `says`: which message is it written for?")
        elif wrong["says"] not in error:
            problems.append(f"{where}: printed {error[:300]!r}, not {wrong['says']!r}")
        elif message is None:
            problems.append(f"{where}: failed with an error no visible message states: {error[:300]!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_every_visible_message_can_fire(assignment):
    messages = visible_messages(assignment)
    assert messages, f"{assignment}: no visible message found"
    unreadable = [m.source for m in messages if not m.literal.strip()]
    assert not unreadable, f"messages whose text is built at run time cannot be checked; write them out: {unreadable}"
    plain = plain_messages(assignment)
    stale = {text: [m.source for m in messages if text in m.literal] for text in plain}
    stale = {text: found for text, found in stale.items() if len(found) != 1}
    assert not stale, f"each `plain` text must be in exactly one visible message: {stale}"
    covered = {message for _, _, message in fired(assignment) if message is not None}
    missing = [m for m in messages if m not in covered and not any(text in m.literal for text in plain)]
    assert not missing, (f"{len(missing)} of {len(messages)} visible messages of {assignment} are printed by no "
                         "mistake of tests/known_wrong/messages/ (nor listed as plain):\n"
                         + "\n".join(f"  {m.cell}: {m.source[:160]}" for m in missing))
