"""Class outputs: grades.csv (with the roster's names) and a per-cell summary (table and plot)."""
from __future__ import annotations

import collections
import csv
import statistics
from pathlib import Path


def read_roster(path: Path) -> dict[str, str]:
    """{student id: name} from a CSV with the columns id and name."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or not {"id", "name"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: a roster needs the columns id,name; found {reader.fieldnames}")
        return {row["id"].strip(): row["name"].strip() for row in reader if row["id"].strip()}


def write_grades_csv(results, path: Path, course, roster: dict[str, str] | None) -> None:
    """One row per student: graded ones, plus roster students with no submission (score 0)."""
    by_student = {r.student: r for r in results}
    max_score = course.max_score()
    students = sorted(set(by_student) | set(roster or {}))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "name", "assignment", "score", "max_score", "flagged", "note"])
        for student in students:
            r = by_student.get(student)
            name = (roster or {}).get(student, "")
            if r is None:
                writer.writerow([student, name, course.assignment, "0", f"{max_score:g}", "", "no submission"])
                continue
            note = r.error or "; ".join(r.notes)
            if roster is not None and student not in roster:
                note = ("not on the roster; " + note).strip("; ")
            flagged = "; ".join(f"{c.cell}: {c.flagged}" for c in r.cells if c.flagged)
            writer.writerow([student, name, r.assignment, f"{r.score:g}", f"{r.max_score:g}", flagged, note])


def write_summary(results, folder: Path) -> Path:
    """summary.csv / summary.md (per graded cell: mean, distribution, most common failures) and summary.png."""
    folder.mkdir(parents=True, exist_ok=True)
    cells: dict[str, dict] = {}
    for r in results:
        for c in r.cells:
            entry = cells.setdefault(c.cell, {"max": c.max_score, "scores": [], "failures": collections.Counter()})
            entry["scores"].append(c.score)
            if c.score < c.max_score:
                # a message's first line names the failed property; the rest (numbers) would split the table
                first = (c.error.splitlines() or [""])[0]
                entry["failures"][(c.flagged and "flagged: " + c.flagged) or first or "(no message)"] += 1
    ungraded = sum(1 for r in results if r.error)
    rows = []
    for name, e in cells.items():
        scores = e["scores"]
        full = sum(1 for s in scores if s == e["max"])
        zero = sum(1 for s in scores if s == 0)
        common = "; ".join(f"{n}x {msg[:90]}" for msg, n in e["failures"].most_common(3))
        rows.append([name, f"{e['max']:g}", f"{statistics.mean(scores):.2f}", str(full), str(len(scores) - full - zero),
                     str(zero), common])
    header = ["cell", "max", "mean", "full marks", "partial", "zero", "most common failures"]
    with (folder / "summary.csv").open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
    lines = [f"# Summary: {len(results)} submissions ({ungraded} could not be graded)", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    # Where the class's time went, slowest first: an instructor sees which submissions held the graders, and in what.
    timed = sorted((r for r in results if r.time_line()), key=lambda r: -r.timings.get("sandbox_run", 0.0)
                   - r.timings.get("recheck", 0.0))
    if timed:
        lines += ["", "## Grading time per submission", "", "| student | notebook and re-check | slow cells |",
                  "|---|---|---|"]
        lines += [f"| {r.student} | {r.time_line()} | "
                  + "; ".join(r.slow_cells).replace("|", "/") + " |" for r in timed]
    (folder / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if rows:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(max(6, len(rows) * 1.2), 3.5))
        names = [row[0] for row in rows]
        full = [int(row[3]) for row in rows]
        partial = [int(row[4]) for row in rows]
        zero = [int(row[5]) for row in rows]
        ax.bar(names, full, label="full marks", color="#4c9a2a")
        ax.bar(names, partial, bottom=full, label="partial", color="#e0a030")
        ax.bar(names, zero, bottom=[f + p for f, p in zip(full, partial)], label="zero", color="#c0392b")
        ax.set_ylabel("submissions")
        ax.set_title(f"Scores per graded cell ({len(results)} submissions)")
        ax.tick_params(axis="x", rotation=30)
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "summary.png", dpi=100)
        plt.close(fig)
    return folder
