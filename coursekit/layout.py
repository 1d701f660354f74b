"""The repository's layout, in one place: where its root is, and nbgrader's view of it.

source = solutions/, release = exercises/; nbgrader's runtime folders (submitted/, autograded/, feedback/,
gradebook.db) live under a workspace folder, autograde/ by default, and are git-ignored. `make sync`
releases the exercises with this configuration, and the grader (autograde/config.py) adds its own steps.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKSPACE = REPO_ROOT / "autograde"
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


def nbgrader_config(workspace: Path = DEFAULT_WORKSPACE, source_root: Path = REPO_ROOT,
                    release_root: Path = REPO_ROOT):
    """A traitlets Config for nbgrader with this repository's layout.

    nbgrader resolves every folder as root/<folder>/<assignment>/, so source and release are given
    relative to the workspace (which becomes nbgrader's course root).
    """
    from traitlets.config import Config

    # nbgrader runs the `alembic` and `jupyter` commands by name: make this interpreter's own ones found
    # first, even when the virtual environment is not activated.
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    workspace = Path(workspace).resolve()
    workspace.mkdir(parents=True, exist_ok=True)  # nbgrader's gradebook folder must exist beforehand
    c = Config()
    c.CourseDirectory.root = str(workspace)
    c.CourseDirectory.source_directory = os.path.relpath(Path(source_root).resolve() / "solutions", workspace)
    c.CourseDirectory.release_directory = os.path.relpath(Path(release_root).resolve() / "exercises", workspace)
    c.CourseDirectory.autograded_directory = "autograded"
    c.CourseDirectory.feedback_directory = "feedback"
    c.CourseDirectory.db_url = f"sqlite:///{workspace / 'gradebook.db'}"
    c.CourseDirectory.course_id = "attention-course"
    c.ClearSolutions.code_stub = {"python": CODE_STUB}
    c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
    c.CourseDirectory.submitted_directory = "submitted"
    return c
