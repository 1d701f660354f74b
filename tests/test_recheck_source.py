"""What the re-check runs of each student cell (autograde/sandbox_runner.py, recheck_source): what the notebook's run
ran of it. A cell stopped at its time limit is never run a second time past the line where it was stopped, so a slow
cell costs its own time once, not again in the re-check; the statements it ran before that line still count."""
from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_output

from autograde.sandbox_runner import (CELL_STOPPED, CELL_TIMEOUT, KERNEL_DIED, interrupted_line, recheck_cells,
                                      recheck_source, statements_before)

SLOW = "import time\n\n@staticmethod\ndef helper():\n    return 1\n\ntime.sleep(10**6)\nafter = 1\n"


def _stopped(source: str, ename: str, evalue: str = "") -> nbformat.NotebookNode:
    cell = new_code_cell(source)
    cell.outputs = [new_output("error", ename=ename, evalue=evalue, traceback=[])]
    return cell


def test_a_cell_interrupted_at_a_line_runs_its_statements_before_it():
    cell = _stopped(SLOW, CELL_TIMEOUT, "this cell ran past the 60 s limit and was interrupted at line 7")
    assert recheck_source(cell) == "import time\n\n@staticmethod\ndef helper():\n    return 1\n"


def test_the_statement_holding_the_line_goes_whole_with_its_decorators():
    assert statements_before(SLOW, 5) == "import time\n"
    assert statements_before(SLOW, 3) == "import time\n"
    assert statements_before(SLOW, 1) == ""


def test_a_cell_stopped_where_nobody_knows_is_left_out():
    assert recheck_source(_stopped(SLOW, CELL_TIMEOUT, "this cell ran past the 60 s limit and was interrupted")) == ""
    for ename in (CELL_STOPPED, KERNEL_DIED):
        assert recheck_source(_stopped(SLOW, ename, "interrupted at line 7")) == ""


def test_other_cells_run_whole_with_magics_blanked_in_place():
    cell = new_code_cell("%matplotlib inline\nx = 1\n!ls\ny = 2")
    cell.outputs = [new_output("error", ename="ValueError", evalue="interrupted at line 2", traceback=[])]
    assert recheck_source(cell) == "\nx = 1\n\ny = 2"


def test_only_code_cells_that_are_not_tests_are_rechecked():
    nb = nbformat.v4.new_notebook()
    test = new_code_cell("assert f() == 1", metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 1}})
    nb.cells = [nbformat.v4.new_markdown_cell("# f"), new_code_cell("def f():\n    return 1"), test]
    assert recheck_cells(nb) == ["def f():\n    return 1"]


def test_the_interrupted_line_is_read_from_this_cells_frame_of_the_traceback():
    frames = ["\x1b[31m----\x1b[39m", "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[4]\x1b[39m\x1b[32m, line 3\x1b[39m\n",
              "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[2]\x1b[39m\x1b[32m, line 9\x1b[39m, in f()\n"]
    cell = new_code_cell("x = 1\n\nf()", execution_count=4)
    cell.outputs = [new_output("error", ename="KeyboardInterrupt", evalue="", traceback=frames)]
    assert interrupted_line(cell) == 3
    cell.execution_count = 5          # no frame of this cell: where it stopped is not known
    assert interrupted_line(cell) is None
