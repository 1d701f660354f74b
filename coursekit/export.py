"""Build a student's own attnlab from their exercise notebooks.

    python -m coursekit.export [--exercises work] [--out _student]

Every `#| export` cell of work/chNN_*/*.ipynb (the learner's own copy of the exercises, made by
`make lab` or here on first use) is written into OUT/attnlab/, exactly as the student left it. Exercises not yet written raise NotImplementedError naming the chapter and the
cell. Run code on the student's package by putting OUT first on the import path:

    PYTHONPATH=_student python -P your_script.py
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from coursekit.exporting import PACKAGE, ExportError, assemble_modules, package_inits, read_export_cells, student_code
from coursekit.sync import ROOT
from coursekit.workspace import WORK, ensure_work


def student_package(exercises: Path, root: Path = ROOT) -> dict[str, str]:
    modules: dict[str, str] = {}
    cells = []
    chapters = {}
    for folder in sorted(Path(exercises).glob("ch[0-9][0-9]_*")):
        notebook = folder / f"{folder.name}.ipynb"
        if not notebook.is_file():
            continue
        for cell in read_export_cells(notebook, root):
            cells.append(cell)
            chapters[cell] = f"chapter {int(folder.name[2:4])}"
    if cells:
        modules = assemble_modules(cells, lambda c: student_code(c, chapters[c]),
                                   "Your own code: edit your exercise notebook, then run `make export` again.",
                                   command="make export")
    return modules | package_inits(cells, sorted(modules), origin="your exercise notebooks", command="make export")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exercises", type=Path, default=None,
                        help="the folder of completed notebooks (default: work/, made from exercises/ if missing)")
    parser.add_argument("--out", type=Path, default=ROOT / "_student")
    args = parser.parse_args(argv)
    if args.exercises is None:
        ensure_work(ROOT)
        args.exercises = ROOT / WORK
    exercises = args.exercises.resolve()
    try:
        modules = student_package(exercises, root=exercises.parent)
    except ExportError as exc:
        print(f"export failed: {exc}", file=sys.stderr)
        return 1
    target = args.out / PACKAGE
    shutil.rmtree(target, ignore_errors=True)
    for rel, text in modules.items():
        path = args.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    # The course's own interpreter, which has torch; the `python` of a fresh shell may not.
    print(f"\nRun your code on it with:  make run SCRIPT=your_script.py\n"
          f"or:  PYTHONPATH={args.out} {sys.executable} -P your_script.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
