"""Each chapter's closing demo runs the student's code and checks what it shows: the translator's sentences against
the corpus (chapter 6), SmolLM2 against transformers' Llama on the same weights (7), the exact MLA rewrite against
chapter 7's logits (8), the engine's outputs against generating each request alone (9), every kernel call against
the torch path (10). A demo that only prints would tell a student with a wrong answer that all is well.

So every known-wrong implementation of the chapter, put in place of the reference answer, must make the demo fail
(an assertion or an error, in the notebook's cells outside the tests, run as "restart and run all" runs them).
A mistake the demo cannot see (bad input the demo never gives, memory or compile-time only) says why in its
`demo` field, and must then pass the demo, or the reason is stale. A mistake with `demo_says` (a graded
known-wrong, or a mistake written for a visible message) must make the demo's error say that text: a demo that
meets a bare IndexError or KeyError names the function that raised it, and what that usually means."""
from __future__ import annotations

import pytest

from tests.submissions import known_wrong, message_wrongs
from tests.visible_checks import demo_failures

DEMO_CHAPTERS = ["ch06_decoder", "ch07_llama_gqa", "ch08_mla", "ch09_paged", "ch10_paged_kernels"]


@pytest.mark.slow
@pytest.mark.parametrize("assignment", DEMO_CHAPTERS)
def test_known_wrong_implementations_fail_the_closing_demo(assignment):
    wrongs = known_wrong(assignment) + [w for w in message_wrongs(assignment) if w["demo_says"]]
    # The reference answers pass the demo: test_student_path.py runs every cell of each chapter on them, twice.
    results = demo_failures(assignment, [{"answers": {w["cell"]: w["code"]}} for w in wrongs])
    problems = []
    for wrong, failure in zip(wrongs, results):
        if wrong["demo"] and failure is not None:
            problems.append(f"[{wrong['name']}] fails the demo ({failure['cell']}: {failure['error'][:200]!r}), "
                            f"though its `demo` says it cannot: {wrong['demo']}")
        elif not wrong["demo"] and failure is None:
            problems.append(f"[{wrong['name']}] passes the closing demo: {wrong['why']}")
        elif wrong["demo_says"] and wrong["demo_says"] not in failure["error"]:
            problems.append(f"[{wrong['name']}] fails the demo with {failure['error'][:300]!r}, which does not say "
                            f"{wrong['demo_says']!r}")
    assert not problems, "\n".join(problems)
