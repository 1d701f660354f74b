"""What a failed test cell tells the student (autograde/messages.py): the instructor's message in full, for
visible and hidden tests alike, and never text a submission chose when the failure is in the hidden tests."""
from __future__ import annotations

import nbformat
import pytest

from autograde.messages import (HIDDEN_BEGIN, cell_label, failure_message, hidden_part, matched_message,
                                message_nodes)
from coursekit.sync import chapter_notebooks

CELL = '''"""softmax: rows sum to 1."""
p = softmax(x)
assert p.shape == x.shape, f"softmax keeps the shape: expected {x.shape}, got {p.shape}"
### BEGIN HIDDEN TESTS
for shape in [(3, 5)]:
    assert check(shape), f"wrong result for shape {shape}"
    np.testing.assert_allclose(a, b, err_msg="the input array was modified in place")
secret_input = make_the_secret_input_of_this_hidden_test()
### END HIDDEN TESTS
'''


def _error(ename: str, evalue: str, line: int) -> dict:
    return {"ename": ename, "evalue": evalue, "traceback": [f"Cell In[7], line {line}", f"{ename}: {evalue}"]}


def test_a_visible_failure_is_shown_in_full():
    text = failure_message(CELL, _error("AssertionError", "softmax keeps the shape: expected (2, 3), got (3,)", 3))
    assert text == "AssertionError: softmax keeps the shape: expected (2, 3), got (3,)"


def test_a_hidden_failure_shows_the_instructors_message():
    assert failure_message(CELL, _error("AssertionError", "wrong result for shape (3, 5)", 6)) == \
        "failed a hidden test: wrong result for shape (3, 5)"
    numpy_style = "\nNot equal to tolerance rtol=1e-07, atol=0\nthe input array was modified in place\nMismatched"
    assert failure_message(CELL, _error("AssertionError", numpy_style, 7)) == \
        "failed a hidden test: the input array was modified in place"


def test_a_forged_hidden_failure_shows_no_chosen_text():
    """A submission that raises its own AssertionError inside a hidden test cannot choose what is shown."""
    forged = "secret_input = make_the_secret_input_of_this_hidden_test()"
    text = failure_message(CELL, _error("AssertionError", forged, 6))
    assert "secret" not in text and "hidden test" in text
    # an f-string field takes a short value only, on one line
    assert matched_message(CELL, "hidden", "wrong result for shape " + "x" * 500) is None
    assert matched_message(CELL, "hidden", "wrong result for shape (1,)\n" + forged) == "wrong result for shape (1,)"


def test_an_unknown_location_counts_as_hidden():
    text = failure_message(CELL, {"ename": "AssertionError", "evalue": "anything at all", "traceback": []})
    assert "anything" not in text


def test_cell_label_is_the_docstring():
    assert cell_label(CELL, "test_softmax") == "softmax: rows sum to 1."
    assert cell_label("x = 1\n", "test_x") == "test_x"


def _hidden_asserts():
    for notebook in chapter_notebooks():
        for cell in nbformat.read(notebook, as_version=4).cells:
            if HIDDEN_BEGIN in cell.source:
                for node, message in message_nodes(hidden_part(cell.source)):
                    yield notebook.parent.name, cell.metadata["nbgrader"]["grade_id"], node, message


def test_every_hidden_assert_names_the_property_it_checks():
    """A hidden failure shows only the failing assert's message, so each one needs a message."""
    found = list(_hidden_asserts())
    assert len(found) > 100
    bare = [f"{a}/{cell}, line {node.lineno} of the hidden part" for a, cell, node, message in found if message is None]
    assert not bare, "hidden asserts without a message:\n" + "\n".join(bare)


@pytest.mark.parametrize("ename", ["RuntimeError", "IndexError"])
def test_an_error_raised_by_the_students_code_in_a_hidden_test_names_its_type(ename):
    text = failure_message(CELL, _error(ename, "shapes cannot be multiplied", 5))
    assert text.startswith(f"failed a hidden test: your code raised {ename}")


BLOCK_CELL = '''"""generate: in a block."""
with torch.no_grad():
    try:
        out = f()
        assert out == 1, "the visible check's message"
### BEGIN HIDDEN TESTS
        assert out != 2, f"the hidden check for {out}"
### END HIDDEN TESTS
    finally:
        pass
'''


def test_a_hidden_part_inside_a_block_of_the_visible_part():
    """Chapters 5 and 6 put their hidden tests inside a `with` or `try` that the visible part opens."""
    assert failure_message(BLOCK_CELL, _error("AssertionError", "the visible check's message", 5)) == \
        "AssertionError: the visible check's message"
    assert failure_message(BLOCK_CELL, _error("AssertionError", "the hidden check for 7", 7)) == \
        "failed a hidden test: the hidden check for 7"
    assert cell_label(BLOCK_CELL, "test_generate") == "generate: in a block."


def test_every_course_test_cell_gets_a_message_for_any_failure():
    for notebook in chapter_notebooks():
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.metadata.get("nbgrader", {}).get("grade"):
                for line in (2, 10_000):
                    assert failure_message(cell.source, _error("AssertionError", "anything", line))


def test_text_a_submission_chose_is_never_shown():
    secret = "x = make_the_secret_input_of_this_hidden_test()"
    for ename, line in (("RuntimeError", 3), ("RuntimeError", 6), ("AssertionError", 3), ("NotImplementedError", 3)):
        assert secret not in failure_message(CELL, _error(ename, secret, line)), ename
    # an exception class of the submission's own is not named either: its name could carry the secret
    assert "Secret" not in failure_message(CELL, _error("SecretIsMakeTheSecretInput", "", 3))
    # numpy's numeric details stay; any other line after a matched message does not
    evalue = "softmax keeps the shape: expected (2, 3), got (3,)\nMismatched elements: 3 / 6 (50%)\n" + secret
    text = failure_message(CELL, _error("AssertionError", evalue, 3))
    assert "Mismatched elements: 3 / 6 (50%)" in text and secret not in text
