"""The known-wrong set is stored as small edits of the solution cells (tests/known_wrong/<chapter>.toml): an
edit that no longer applies exactly once fails by name, instead of silently testing something else."""
from __future__ import annotations

import pytest

import tests.submissions as submissions
from coursekit.sync import chapter_notebooks
from tests.submissions import KnownWrongError, known_wrong, solution_code

CHAPTERS = [nb.parent.name for nb in chapter_notebooks()]


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_every_edit_applies_and_changes_its_cell(assignment):
    solutions = solution_code(assignment)
    for wrong in known_wrong(assignment):
        assert wrong["code"].strip() != solutions[wrong["cell"]].strip(), wrong["name"]
        assert wrong["loses"] and wrong["why"], wrong["name"]


def _entry(tmp_path, monkeypatch, body: str) -> None:
    (tmp_path / "ch01_qkv_softmax.toml").write_text(body)
    monkeypatch.setattr(submissions, "KNOWN_WRONG", tmp_path)


def test_an_edit_that_no_longer_applies_is_named(tmp_path, monkeypatch):
    _entry(tmp_path, monkeypatch, '[stale]\ncell = "softmax_np"\nloses = ["test_softmax_np"]\nwhy = "x"\n'
                                  '[[stale.edit]]\nold = "a line the solution does not have"\nnew = "y"\n')
    with pytest.raises(KnownWrongError, match=r"\[stale\], edit 1: its `old` text occurs 0 times"):
        known_wrong("ch01_qkv_softmax")


def test_an_edit_whose_old_text_is_ambiguous_is_named(tmp_path, monkeypatch):
    _entry(tmp_path, monkeypatch, '[twice]\ncell = "softmax_np"\nloses = ["test_softmax_np"]\nwhy = "x"\n'
                                  '[[twice.edit]]\nold = "x"\nnew = "y"\n')
    with pytest.raises(KnownWrongError, match=r"occurs \d+ times"):
        known_wrong("ch01_qkv_softmax")


def test_an_unknown_cell_is_named(tmp_path, monkeypatch):
    _entry(tmp_path, monkeypatch, '[lost]\ncell = "no_such_cell"\nloses = []\nwhy = "x"\n')
    with pytest.raises(KnownWrongError, match="no_such_cell"):
        known_wrong("ch01_qkv_softmax")
