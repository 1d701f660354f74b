"""A learner's own copy of the exercises: work/, made on first use and never regenerated.

exercises/ (and exercises-zh/, its Chinese edition) is generated: `make sync` rewrites it from solutions/. A learner who typed their answers
there could lose them, so learners work in work/ instead. `make lab` serves it and `make export` reads it.
A chapter released after the copy was made is added on the next `make lab`; a notebook already in
work/ is never replaced, even when its release has changed since (the learner is told where the new one is).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from coursekit.release import read_view

WORK = "work"
# Which release each copy in work/ was made from, so a changed release can be pointed out.
RECORD = ".releases.json"


def _fingerprint(path: Path) -> str:
    view = read_view(path) if path.suffix == ".ipynb" else None
    text = json.dumps(view, sort_keys=True) if view is not None else path.read_bytes().hex()
    return hashlib.sha256(text.encode()).hexdigest()


# The release each language's copies are made from (make lab LANG=zh).
RELEASES = {"en": "exercises", "zh_CN": "exercises-zh"}
LANGUAGE_KEY = "language"  # in the record: the language the learner last asked for


def course_language(asked: str | None) -> str | None:
    """'zh', 'zh_CN', 'zh-CN' -> 'zh_CN'; 'en' -> 'en'; None or '' -> None. Anything else is an error."""
    if not asked:
        return None
    if asked.lower().replace("-", "_") in ("zh", "zh_cn", "cn", "chinese"):
        return "zh_CN"
    if asked.lower().split("_")[0] in ("en", "english"):
        return "en"
    raise SystemExit(f"LANG={asked}: the course is in English (LANG=en) and Chinese (LANG=zh)")


def ensure_work(root: Path, work: Path | None = None, log=print, language: str | None = None) -> list[Path]:
    """Copy into work/ every release file it lacks, from the release of `language` (default: the language asked
    for last, else English); never overwrite one. Returns the files copied."""
    work = Path(work) if work is not None else Path(root) / WORK
    record_path = work / RECORD
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    recorded = record.get(LANGUAGE_KEY, "en")
    language = language or recorded
    folder = RELEASES[language]
    exercises = Path(root) / folder
    other_language = _copies_not_in(work, language)       # before copying: the learner's own notebooks
    copied = []
    for source in sorted(exercises.rglob("*")):
        if not source.is_file() or ".ipynb_checkpoints" in source.parts:
            continue
        rel = str(source.relative_to(exercises))
        target = work / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            record[rel] = _fingerprint(source)
            copied.append(target)
        elif rel in record and record[rel] != _fingerprint(_release_of(target, source, root)):
            log(f"note: {_release_of(target, source, root).relative_to(root)} has changed since your copy in {WORK}/ was made. "
                f"Your {WORK}/{rel} is kept as it is; `make refresh` brings its given cells and tests up to "
                "date and keeps your answers (it saves the copy as it was first).")
    if other_language:
        names = {"zh_CN": "Chinese", "en": "English"}
        log(f"note: new notebooks are copied in {names.get(language, language)}; the {len(other_language)} already in "
            f"{WORK}/ ({', '.join(other_language)}) are yours and stay as they are, in the language they were copied "
            f"in. `make refresh LANG={'zh' if language == 'zh_CN' else 'en'}` switches them, keeping your answers.")
    if copied or language != recorded:
        record[LANGUAGE_KEY] = language
        record_path.parent.mkdir(parents=True, exist_ok=True)
        record_path.write_text(json.dumps(record, indent=1, sort_keys=True))
    if copied:
        log(f"Copied {len(copied)} release file(s) from {folder}/ into {work}/ (your own copy: "
            "only `make refresh` changes it, and it keeps your answers).")
    return copied


def _release_of(copy: Path, source: Path, root: Path) -> Path:
    """The release file a copy in work/ follows: the one of the copy's own language (a learner may hold notebooks
    of both), else `source`."""
    if copy.suffix != ".ipynb":
        return source
    try:
        language = json.loads(copy.read_text(encoding="utf-8")).get("metadata", {}).get("course", {}).get("language", "en")
    except (OSError, ValueError):
        return source
    release = Path(root) / RELEASES.get(language, RELEASES["en"]) / source.relative_to(source.parents[1])
    return release if release.is_file() else source


def _copies_not_in(work: Path, language: str) -> list[str]:
    """The chapters whose notebook in work/ is in another language than `language` (the notebook's own record)."""
    found = []
    for copy in sorted(work.glob("ch[0-9][0-9]_*/ch[0-9][0-9]_*.ipynb")):
        if copy.parent.name != copy.stem:
            continue
        try:
            held = json.loads(copy.read_text(encoding="utf-8")).get("metadata", {}).get("course", {}).get("language", "en")
        except (ValueError, OSError):            # a notebook the learner broke: not ours to judge here
            continue
        if held != language:
            found.append(copy.parent.name[:4])
    return found


def remember_language(work: Path, language: str) -> None:
    """Record the language a learner switched their copies to (`make refresh LANG=...`) for the next `make lab`."""
    record_path = Path(work) / RECORD
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    record[LANGUAGE_KEY] = language
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True))


def rescue(path: Path, root: Path, log=print) -> Path:
    """Keep a copy of exercises/<rel> (or exercises-zh/<rel>) in work/ before `make sync` replaces or removes it."""
    folder, *rest = Path(path).relative_to(Path(root)).parts
    rel = Path(*rest)
    target = Path(root) / WORK / rel
    if target.exists():
        stamp = 1
        while (candidate := target.with_name(f"{target.stem}.from-{folder}-{stamp}{target.suffix}")).exists():
            stamp += 1
        target = candidate
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, target)
    log(f"kept your edits: {folder}/{rel} held changes that `make sync` did not write; "
        f"they are saved in {target.relative_to(root)} before the release is regenerated")
    return target


def record_release(work: Path, copy: Path, release: Path) -> None:
    """Record that the copy in work/ now follows `release` (after `make refresh`)."""
    record_path = Path(work) / RECORD
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    record[str(Path(copy).resolve().relative_to(Path(work).resolve()))] = _fingerprint(Path(release))
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True))
