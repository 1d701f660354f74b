"""python -m autograde: grade submissions of one assignment.

    python -m autograde grade ASSIGNMENT FILE.ipynb [FILE.ipynb ...] [--json]
        Grades each file as one student's submission (the student id is the file name without
        .ipynb), prints `NAME: SCORE / MAX` per file, and writes feedback HTML under
        autograde/feedback/NAME/ASSIGNMENT/.
    python -m autograde class ASSIGNMENT [--json]
        Grades every submission under autograde/submitted/STUDENT/ASSIGNMENT/*.ipynb and writes
        autograde/grades.csv.

Exit status 0 when grading ran, whatever the scores; 2 for a usage error (unknown assignment,
missing file).
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

from autograde.config import CELL_TIMEOUT_S, DEFAULT_WORKSPACE
from autograde.grading import SUBMISSION_TIMEOUT_S, Course, Result, UsageError, grade, student_id_for


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograde", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("assignment", help="assignment name, e.g. ch01_qkv_softmax")
    common.add_argument("--json", action="store_true", help="print results per graded cell as JSON")
    common.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE,
                        help="folder for submitted/, autograded/, feedback/ and gradebook.db (default: autograde/)")
    common.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT_S,
                        help=f"seconds one cell may run (default {CELL_TIMEOUT_S})")
    common.add_argument("--submission-timeout", type=int, default=SUBMISSION_TIMEOUT_S,
                        help=f"seconds one whole submission may take (default {SUBMISSION_TIMEOUT_S})")
    one = sub.add_parser("grade", parents=[common], help="grade the given notebook files")
    one.add_argument("files", nargs="+", type=Path, metavar="FILE.ipynb")
    sub.add_parser("class", parents=[common], help="grade every submission under autograde/submitted/")
    return parser


def write_csv(results: list[Result], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "assignment", "score", "max_score", "note"])
        for r in sorted(results, key=lambda r: r.student):
            writer.writerow([r.student, r.assignment, f"{r.score:g}", f"{r.max_score:g}",
                             r.error or "; ".join(r.notes)])


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        course = Course(args.assignment, args.workspace)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.command == "grade":
        missing = [str(f) for f in args.files if not f.is_file()]
        if missing:
            print(f"no such file: {', '.join(missing)}", file=sys.stderr)
            return 2
        taken: set[str] = set()
        jobs = [(student_id_for(f, taken), f) for f in args.files]
    else:
        submitted = course.workspace / "submitted"
        jobs = []
        for folder in sorted(submitted.glob(f"*/{args.assignment}")):
            notebooks = sorted(folder.glob("*.ipynb"))
            # A student folder with no notebook, or another name, is still graded: its first .ipynb, or nothing.
            jobs.append((folder.parent.name, notebooks[0] if notebooks else folder / course.notebook_name))
        if not jobs:
            print(f"no submissions found under {submitted}/STUDENT/{args.assignment}/", file=sys.stderr)

    course.prepare()
    results = []
    for student, file in jobs:
        started = time.monotonic()
        result = grade(course, student, file, args.cell_timeout, args.submission_timeout)
        results.append(result)
        if not args.json:
            print(f"{result.line()}  [{time.monotonic() - started:.1f} s]", flush=True)
    if args.command == "class":
        csv_path = course.workspace / "grades.csv"
        write_csv(results, csv_path)
        if not args.json:
            print(f"wrote {csv_path}")
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    return 0
