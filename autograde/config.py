"""nbgrader settings for grading: the repository's layout (coursekit/layout.py) and the grader's own steps."""
from __future__ import annotations

import os
from pathlib import Path

from coursekit.layout import DEFAULT_WORKSPACE, REPO_ROOT
from coursekit.layout import nbgrader_config as layout_config

__all__ = ["DEFAULT_WORKSPACE", "REPO_ROOT", "CELL_TIMEOUT_S", "nbgrader_config", "grading_config"]

TEMPLATES = Path(__file__).resolve().parent / "templates"

# Seconds one cell may run while grading before it is interrupted (nbgrader's Execute preprocessor).
CELL_TIMEOUT_S = int(os.environ.get("AUTOGRADE_CELL_TIMEOUT", "60"))


def nbgrader_config(workspace: Path = DEFAULT_WORKSPACE, source_root: Path = REPO_ROOT,
                    release_root: Path = REPO_ROOT):
    """The repository's layout, with the grader's cell timeout (the plain `nbgrader` command uses this too)."""
    c = layout_config(workspace, source_root, release_root)
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
    c.GenerateFeedback.exporter_class = "autograde.feedback.FeedbackExporter"
    # nbgrader's API always uses its template named "feedback"; templates/feedback/ holds only a
    # mathjax.html.j2, which shadows nbconvert's CDN version because our folder is searched first.
    c.HTMLExporter.filters = {"offline_mathjax": "autograde.feedback.mathjax_source"}
    c.HTMLExporter.extra_template_basedirs = [
        str(TEMPLATES), str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]
    return c
