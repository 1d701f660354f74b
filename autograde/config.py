"""nbgrader settings for this repository, in one place.

source = solutions/, release = exercises/; the runtime folders (submitted/, autograded/, feedback/,
gradebook.db) live under a workspace folder, autograde/ by default, and are git-ignored.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from traitlets.config import Config

# nbgrader runs the `alembic` and `jupyter` commands by name: make this interpreter's own ones found first,
# even when the virtual environment is not activated.
_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKSPACE = REPO_ROOT / "autograde"
TEMPLATES = Path(__file__).resolve().parent / "templates"

# Seconds one cell may run while grading before it is interrupted (nbgrader's Execute preprocessor).
CELL_TIMEOUT_S = int(os.environ.get("AUTOGRADE_CELL_TIMEOUT", "60"))
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


def nbgrader_config(workspace: Path = DEFAULT_WORKSPACE, source_root: Path = REPO_ROOT,
                    release_root: Path = REPO_ROOT) -> Config:
    """A traitlets Config for nbgrader with this repository's layout.

    nbgrader resolves every folder as root/<folder>/<assignment>/, so source and release are given
    relative to the workspace (which becomes nbgrader's course root).
    """
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
    c.Execute.timeout = CELL_TIMEOUT_S
    c.Execute.interrupt_on_timeout = True
    c.Execute.execute_retries = 0
    return c


# Inside a sandbox package folder: the release's files other than the notebook (chapter 6's trained
# checkpoint), copied next to the notebook before it runs, as they sit next to it in a student's folder.
ASSIGNMENT_FILES = "_files"


def grading_config(workspace: Path = DEFAULT_WORKSPACE, cell_timeout_s: int = CELL_TIMEOUT_S,
                   sandbox_package: Path | None = None, use_sandbox: bool = True, wall_s: int = 900) -> Config:
    """nbgrader settings for autograding and feedback, for one submission's private course folder.

    nbgrader reads the submission from .work/normalized/ (the rebuilt copy, see submission.py), runs it
    in the sandbox (execute.SandboxedExecute) unless use_sandbox is False, and writes feedback that
    hides hidden tests and renders math offline.
    """
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import ClearHiddenTests, GetGrades

    import nbgrader

    from autograde.execute import SandboxedExecute, StderrIsNotFailure, SurvivingExecute
    from autograde.feedback import GraderWrittenOutputs, RedactHiddenEcho

    c = nbgrader_config(workspace)
    c.CourseDirectory.submitted_directory = str(Path(".work") / "normalized")
    c.Execute.timeout = cell_timeout_s
    execute = SandboxedExecute if use_sandbox else SurvivingExecute
    if use_sandbox:
        c.SandboxedExecute.package = str(sandbox_package or "")
        c.SandboxedExecute.scratch = str(Path(workspace) / "sandbox")
        c.SandboxedExecute.wall_s = wall_s
        if sandbox_package:
            c.SandboxedExecute.files = str(Path(sandbox_package) / ASSIGNMENT_FILES)
    steps = [execute if step.__name__ == "Execute" else step
             for step in Autograde.class_traits()["autograde_preprocessors"].default()]
    steps.insert(steps.index(execute) + 1, StderrIsNotFailure)
    c.Autograde.autograde_preprocessors = steps
    c.GenerateFeedback.preprocessors = [GetGrades, GraderWrittenOutputs, RedactHiddenEcho, ClearHiddenTests,
                                        CSSHTMLHeaderPreprocessor]
    # nbgrader's API always uses its template named "feedback"; templates/feedback/ holds only a
    # mathjax.html.j2, which shadows nbconvert's CDN version because our folder is searched first.
    c.HTMLExporter.filters = {"offline_mathjax": "autograde.feedback.mathjax_source"}
    c.HTMLExporter.extra_template_basedirs = [
        str(TEMPLATES), str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]
    return c
