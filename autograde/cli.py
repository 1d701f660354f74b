"""python -m autograde: grade submissions of one assignment.

    python -m autograde grade ASSIGNMENT FILE.ipynb [FILE.ipynb ...] [--json]
        Grades each file as one student's submission (the student id is the file name without
        .ipynb), prints `NAME: SCORE / MAX  [SECONDS: notebook S, re-check S]` per file (where the time
        went: the notebook's run in the sandbox, and the out-of-process re-check), and writes feedback
        HTML under autograde/feedback/NAME/ASSIGNMENT/.
    python -m autograde class ASSIGNMENT [--workers N | --scheduler tcp://HOST:8786] [--roster roster.csv] [--json]
        Grades every submission in autograde/inbox/ASSIGNMENT/STUDENT.ipynb (or, in nbgrader's layout,
        autograde/submitted/STUDENT/ASSIGNMENT/*.ipynb), in parallel; a rerun grades only new or changed
        files. Writes autograde/grades.csv and autograde/reports/ASSIGNMENT/ (summary.md, summary.csv,
        summary.png); summary.md ends with each submission's grading time and the cells stopped at the
        cell limit. With --scheduler, the submissions are graded on a Dask cluster's workers
        (autograde/cluster.py); without, in this machine's --workers threads.

Student code runs in a sandbox (bubblewrap): no network, no view of the course files or of other
students, limited memory (per process, and --memory-limit for all of a submission's processes together),
processes and time. Exit status 0 when grading ran, whatever the scores;
2 for a usage error (unknown assignment, missing file, no sandbox).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from autograde import memory_group, sandbox
from autograde.config import CELL_TIMEOUT_S, DEFAULT_WORKSPACE
from autograde.grading import Course, Result, UsageError, grade, student_id_for
from autograde.report import read_roster, write_grades_csv, write_summary


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograde", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("assignment", help="assignment name, e.g. ch01_qkv_softmax")
    common.add_argument("--json", action="store_true", help="print results per graded cell as JSON")
    common.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE,
                        help="folder for inbox/, submitted/, feedback/, results/ ... (default: autograde/)")
    common.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT_S,
                        help=f"seconds one cell may run (default {CELL_TIMEOUT_S})")
    common.add_argument("--submission-timeout", type=int, default=None,
                        help="seconds the notebook of one submission may run in all (default: 4 cell "
                             "timeouts + 120 s; the re-check has a budget of its own)")
    common.add_argument("--workers", type=int, default=1, help="submissions graded at once (default 1)")
    common.add_argument("--scheduler", default=None, metavar="tcp://HOST:8786",
                        help="grade on a Dask cluster: its scheduler's address (its workers then set how many "
                             "submissions are graded at once; --workers is not used). See autograde/cluster.py")
    common.add_argument("--memory-limit", type=float, default=None, metavar="GIB",
                        help=f"GiB that all the processes of one submission may hold together (default "
                             f"{memory_group.DEFAULT_GIB:g}); past it the largest is stopped")
    common.add_argument("--no-sandbox", action="store_true",
                        help="run student code without the sandbox (only for trusted code: a student could "
                             "then read the hidden tests and forge results)")
    one = sub.add_parser("grade", parents=[common], help="grade the given notebook files")
    one.add_argument("files", nargs="+", type=Path, metavar="FILE.ipynb")
    many = sub.add_parser("class", parents=[common], help="grade every submission of the class")
    many.add_argument("--roster", type=Path, default=None,
                      help="CSV with columns id,name (default: WORKSPACE/roster.csv if it exists)")
    many.add_argument("--regrade", action="store_true", help="grade every submission again, changed or not")
    return parser


def class_submissions(course: Course) -> list[tuple[str, Path]]:
    """(student id, file) for every submission: the inbox first, then nbgrader's submitted/ layout."""
    found: dict[str, Path] = {}
    inbox = course.workspace / "inbox" / course.assignment
    for path in sorted(inbox.glob("*.ipynb")) if inbox.is_dir() else []:
        found[student_id_for(path, set())] = path
    for folder in sorted((course.workspace / "submitted").glob(f"*/{course.assignment}")):
        if folder.parent.name not in found:
            # The assignment's notebook name first; otherwise the only (or first) notebook in the folder.
            canonical = folder / course.notebook_name
            notebooks = sorted(folder.glob("*.ipynb"))
            found[folder.parent.name] = canonical if canonical.is_file() or not notebooks else notebooks[0]
    return sorted(found.items())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        course = Course(args.assignment, args.workspace)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.memory_limit is not None:
        if args.memory_limit <= 0:
            print(f"--memory-limit must be a positive number of GiB, got {args.memory_limit:g}", file=sys.stderr)
            return 2
        os.environ[memory_group.ENVIRONMENT] = str(args.memory_limit)     # read by every worker's sandbox
    use_sandbox = not args.no_sandbox
    if use_sandbox and (reason := sandbox.available()):
        print(f"cannot sandbox student code: {reason}. Fix that, or pass --no-sandbox for trusted code only.",
              file=sys.stderr)
        return 2
    if args.command == "grade":
        missing = [str(f) for f in args.files if not f.is_file()]
        if missing:
            print(f"no such file: {', '.join(missing)}", file=sys.stderr)
            return 2
        taken: set[str] = set()
        jobs = [(student_id_for(f, taken), f) for f in args.files]
    else:
        jobs = class_submissions(course)
        if not jobs:
            print(f"no submissions in {course.workspace / 'inbox' / args.assignment}/ "
                  f"or {course.workspace / 'submitted'}/STUDENT/{args.assignment}/", file=sys.stderr)

    try:
        course.prepare()
    except Exception as exc:  # noqa: BLE001 - e.g. exercises/ out of date with solutions/
        print(f"cannot prepare {args.assignment}: {exc}", file=sys.stderr)
        return 2
    results: list[Result] = []

    def run(job):
        student, file = job
        started = time.monotonic()
        result = grade(course, student, file, args.cell_timeout, args.submission_timeout, use_sandbox,
                       only_if_changed=args.command == "class" and not args.regrade)
        return result, time.monotonic() - started

    def graded_locally():
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            for future in as_completed([pool.submit(run, job) for job in jobs]):
                yield future.result()

    if args.scheduler:
        from autograde.cluster import grade_on_cluster
        graded = grade_on_cluster(args.scheduler, course, jobs, args.cell_timeout, args.submission_timeout,
                                  use_sandbox, only_if_changed=args.command == "class" and not args.regrade,
                                  memory_limit_gib=args.memory_limit)
    else:
        graded = graded_locally()
    for result, seconds in graded:
        results.append(result)
        if not args.json:
            spent = result.time_line()
            print(f"{result.line()}  [{seconds:.1f} s{': ' + spent if spent else ''}]", flush=True)
    results.sort(key=lambda r: r.student)

    if args.command == "class":
        roster_path = args.roster or (course.workspace / "roster.csv")
        roster = read_roster(roster_path) if roster_path.is_file() else None
        csv_path = course.workspace / "grades.csv"
        write_grades_csv(results, csv_path, course, roster)
        report = write_summary(results, course.workspace / "reports" / args.assignment)
        if not args.json:
            print(f"wrote {csv_path} and {report}")
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    return 0
