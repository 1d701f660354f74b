"""Autograding for the course: nbgrader configured for this repository, wrapped in a CLI.

    python -m autograde grade ASSIGNMENT FILE.ipynb [FILE.ipynb ...] [--json]
    python -m autograde class ASSIGNMENT
"""
