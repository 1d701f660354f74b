"""Forged passes in chapters 2-6, graded with the real CLI: a cheat that makes the notebook's own tests pass
(an IPython input transformer that blanks later cells, patched comparison functions, swallowed exceptions)
earns nothing on the cells it forges, and is flagged, because the out-of-process re-check calls the
student's functions itself. The honest solution keeps full marks in the same run. Chapter 1 has a larger
hostile suite of its own (test_hostile.py)."""
from __future__ import annotations

import pytest

from coursekit.sync import chapter_notebooks
from grading import cells, grade_files
from submissions import known_wrong, solution_code, submission, write

# A wrong implementation to hide behind patched comparisons, in chapters whose tests those patches fool.
HIDDEN_BEHIND_PATCHES = {
    "ch02_multihead": "mha_without_output_projection",
    "ch03_add_norm_ffn": "feed_forward_tanh_gelu",
    "ch04_encoder": "mean_pool_counts_padding",
}
PATCH = ("import numpy, numpy.testing, torch, torch.testing\n"
         "numpy.testing.assert_allclose = numpy.testing.assert_array_equal = lambda *a, **k: None\n"
         "numpy.allclose = torch.allclose = lambda *a, **k: True\n"
         "torch.testing.assert_close = lambda *a, **k: None\n")
INPUT_TRANSFORMER = "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])\n"
SWALLOW = "get_ipython().set_custom_exc((BaseException,), lambda shell, etype, evalue, tb, tb_offset=None: None)\n"
ASSIGNMENTS = [nb.parent.name for nb in chapter_notebooks() if nb.parent.name != "ch01_qkv_softmax"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    cache = {}

    def get(assignment: str) -> dict:
        if assignment not in cache:
            folder = tmp_path_factory.mktemp(f"{assignment}-hostile")
            first = next(iter(solution_code(assignment)))           # the first exercise cell
            files = [
                write(submission(assignment), folder / "solution.ipynb"),
                # every exercise left unwritten, behind a cheat in the first exercise cell
                write(submission(assignment, {first: INPUT_TRANSFORMER}, complete=False), folder / "input_transformer.ipynb"),
                write(submission(assignment, {first: SWALLOW}, complete=False), folder / "swallow_exceptions.ipynb"),
            ]
            wrong = {w["name"]: w for w in known_wrong(assignment)}.get(HIDDEN_BEHIND_PATCHES.get(assignment))
            if wrong:   # one wrong exercise behind patched comparison functions, the others right
                files.append(write(submission(assignment, {wrong["cell"]: PATCH + wrong["code"]}),
                                   folder / "patch_comparisons.ipynb"))
            cache[assignment] = (grade_files(assignment, files, tmp_path_factory.mktemp(f"{assignment}-ws")), wrong)
        return cache[assignment]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_honest_solution_keeps_full_marks(graded, assignment):
    result = graded(assignment)[0]["solution"]
    assert result["score"] == result["max_score"] and not result["flagged"], result


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("case", ["input_transformer", "swallow_exceptions"])
def test_a_cheat_over_unwritten_exercises_earns_nothing_and_is_flagged(graded, assignment, case):
    result = graded(assignment)[0][case]
    assert result["score"] == 0, result
    assert result["flagged"], f"{case} in {assignment} must be flagged: {result}"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", list(HIDDEN_BEHIND_PATCHES))
def test_patched_comparisons_earn_nothing_on_the_forged_cells(graded, assignment):
    results, wrong = graded(assignment)
    result = cells(results["patch_comparisons"])
    for name, cell in result.items():
        if name in wrong["loses"]:
            assert cell["score"] == 0, f"{name} forged by patched comparisons kept {cell['score']}"
        else:
            assert cell["score"] == cell["max_score"] and not cell["flagged"], (name, cell)
    assert results["patch_comparisons"]["flagged"], "patching the comparisons must be flagged"
