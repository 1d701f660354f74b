"""The grader stamps each new gradebook with nbgrader's migration head read in process (autograde.worker.alembic_head)
instead of nbgrader's `alembic heads` subprocess: the stamp must be the one that command names, or `nbgrader db
upgrade` would later migrate an instructor's gradebook from the wrong revision."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from autograde.worker import alembic_head
from tests.submissions import REPO


def heads_by_the_alembic_command() -> str:
    """What nbgrader.api.get_alembic_version reads: the first word of `alembic heads` on nbgrader's migrations."""
    from nbgrader.dbutil import _temp_alembic_ini

    with _temp_alembic_ini("sqlite:///gradebook.db") as ini:
        output = subprocess.run([str(Path(sys.executable).with_name("alembic")), "-c", ini, "heads"],
                                capture_output=True, text=True, check=True).stdout
    return output.split("\n")[0].split(" ")[0]


def test_a_prepared_gradebook_is_stamped_with_the_head_the_alembic_command_names(tmp_path):
    expected = heads_by_the_alembic_command()
    assert expected and alembic_head() == expected
    run = subprocess.run([sys.executable, "-m", "autograde.worker", "prepare", "ch01_qkv_softmax", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(expected,)]
