"""nbgrader's Execute preprocessor, made to survive a submission that kills its kernel.

Stock nbgrader aborts the whole submission when the kernel dies (os._exit, a segfault, the kernel
killing itself), so every point is lost, including those earned before. Here the cell that was
running is replaced by an error and the notebook is run again from the top, so the other cells
earn what they earn.
"""
from __future__ import annotations

import copy

from nbclient.exceptions import DeadKernelError
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute

KERNEL_DIED = "KernelDied"


def _died_output(index: int) -> NotebookNode:
    message = (f"the kernel died while this cell ran (cell {index}), for example by os._exit(), "
               "killing its own process or running out of memory; the cell was skipped when grading")
    return NotebookNode(output_type="error", ename=KERNEL_DIED, evalue=message,
                        traceback=[f"{KERNEL_DIED}: {message}"])


class SurvivingExecute(Execute):
    """Execute every cell; when the kernel dies in cell i, rerun with cell i replaced by an error."""

    def preprocess_cell(self, cell, resources, index):
        self._running_index = index
        return super().preprocess_cell(cell, resources, index)

    def preprocess(self, nb, resources, km=None):
        killers: list[int] = []
        while True:
            trial = copy.deepcopy(nb)
            for index in killers:
                trial.cells[index].source = f"raise RuntimeError({_died_output(index).evalue!r})"
            self._running_index = None
            try:
                trial, resources = super().preprocess(trial, resources, km)
            except DeadKernelError:
                index = self._running_index
                if index is None or index in killers or len(killers) >= len(nb.cells):
                    raise
                killers.append(index)
                continue
            for index in killers:
                # Grade what the student wrote, shown with the reason it earned nothing.
                trial.cells[index].source = nb.cells[index].source
                trial.cells[index].outputs = [_died_output(index)]
            return trial, resources


class StderrIsNotFailure(Preprocessor):
    """Keep a test cell's points when something it calls writes to stderr.

    nbgrader scores a grade cell 0 when it has any stderr output, so a library warning (a
    DeprecationWarning from the student's code, say) would cost points that the checks gave. The
    text stays visible, as stdout marked [stderr].
    """

    enabled = Bool(True)   # nbconvert preprocessors are off unless enabled

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
                    output["text"] = "".join(f"[stderr] {line}" for line in output["text"].splitlines(True))
        return cell, resources
