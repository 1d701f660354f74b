"""Autograding for the course: nbgrader configured for this repository, wrapped in a CLI.

    python -m autograde grade ASSIGNMENT FILE.ipynb [FILE.ipynb ...] [--json]
    python -m autograde class ASSIGNMENT
"""
import sys

# nbformat imports jsonschema, which imports rfc3987_syntax when it is installed, and that compiles 38 grammars
# at import, about 1.4 s of CPU, to check the "iri" string format. No notebook schema uses that format.
# requirements.txt leaves it out, but an environment set up another way (an instructor's own, with jupyter-events'
# jsonschema[format-nongpl]) has it, and each submission's grading starts several processes that import nbformat,
# so they skip it: with the module marked missing, jsonschema leaves the format unchecked, as it does without it.
sys.modules.setdefault("rfc3987_syntax", None)
