"""Forged passes a student might try in any chapter, each as a cell that goes before the exercises.

Each makes the notebook's own tests pass without the work: the out-of-process re-check, which calls the
student's functions itself, must take the points away and flag the submission.
"""
from __future__ import annotations

import nbformat

from tests.submissions import known_wrong, solution_code, submission

# Makes IPython run `pass` instead of every later cell, tests included.
INPUT_TRANSFORMER = "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])\n"
# Hides every exception a later cell raises, so failing tests print nothing and count as passed.
SWALLOW = "get_ipython().set_custom_exc((BaseException,), lambda shell, etype, evalue, tb, tb_offset=None: None)\n"
# Comparison functions that always agree.
PATCH = ("import numpy, numpy.testing, torch, torch.testing\n"
         "numpy.testing.assert_allclose = numpy.testing.assert_array_equal = lambda *a, **k: None\n"
         "numpy.allclose = torch.allclose = lambda *a, **k: True\n"
         "torch.testing.assert_close = lambda *a, **k: None\n")

# A known-wrong implementation to hide behind patched comparisons, in chapters whose tests those patches fool.
HIDDEN_BEHIND_PATCHES = {
    "ch02_multihead": "mha_without_output_projection",
    "ch03_add_norm_ffn": "feed_forward_tanh_gelu",
    "ch04_encoder": "mean_pool_counts_padding",
}


def patched_wrong(assignment: str) -> dict | None:
    """The known-wrong case hidden behind PATCH in `assignment`, if it has one."""
    name = HIDDEN_BEHIND_PATCHES.get(assignment)
    return next((w for w in known_wrong(assignment) if w["name"] == name), None)


def cheat_submissions(assignment: str) -> dict[str, nbformat.NotebookNode]:
    """{case: notebook}: every exercise left unwritten behind a cheat in the first exercise cell, and
    (where the chapter has one) a wrong exercise behind patched comparisons, the others right."""
    first = next(iter(solution_code(assignment)))
    cases = {"input_transformer": submission(assignment, {first: INPUT_TRANSFORMER}, complete=False),
             "swallow_exceptions": submission(assignment, {first: SWALLOW}, complete=False)}
    wrong = patched_wrong(assignment)
    if wrong:
        cases["patch_comparisons"] = submission(assignment, {wrong["cell"]: PATCH + wrong["code"]})
    return cases
