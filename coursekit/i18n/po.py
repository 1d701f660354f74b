"""Reading, writing and merging the Chinese edition's gettext catalogs (.po files) with babel: the file format
every catalog of locales/zh_CN/ shares, pages' (coursekit/i18n/catalogs.py) and notebooks' (notebooks.py) alike."""
from __future__ import annotations

import io
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po as _read_po
from babel.messages.pofile import write_po as _write_po

from coursekit.layout import REPO_ROOT as ROOT

LOCALE = Path("locales") / "zh_CN"
PAGES = ROOT / LOCALE / "LC_MESSAGES"
NOTEBOOKS = ROOT / LOCALE / "notebooks"


def read_po(path: Path) -> Catalog:
    if not path.is_file():
        return Catalog(locale="zh_CN")
    with path.open("rb") as f:
        return _read_po(f, locale="zh_CN")


def write_po(path: Path, catalog: Catalog) -> None:
    """Unwrapped (one line per message), in extraction order, with no dates: a catalog changes only when a
    message does."""
    catalog.revision_date = catalog.creation_date = None
    catalog.project, catalog.version = "Attention, from QKV to PagedAttention", ""
    catalog.language_team = catalog.last_translator = ""
    catalog.msgid_bugs_address = ""
    catalog.fuzzy = False  # the header's flag: a translated catalog is not a draft as a whole
    for message in catalog:
        # babel guesses these from braces and percent signs in prose; no message here is a format string.
        message.flags.discard("python-format")
        message.flags.discard("python-brace-format")
    buffer = io.BytesIO()
    _write_po(buffer, catalog, width=0, sort_output=False, omit_header=False, include_previous=True,
              ignore_obsolete=False)
    text = buffer.getvalue().decode("utf-8")
    # babel writes the dates it was told not to know as empty fields; drop them so the header never changes.
    text = "\n".join(line for line in text.split("\n")
                     if not line.startswith(('"POT-Creation-Date:', '"PO-Revision-Date:', '"Generated-By:')))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def merge(template: Catalog, catalog: Catalog) -> Catalog:
    """`catalog` brought up to `template`: new messages empty, changed ones fuzzy, removed ones obsolete."""
    # A removed message stays in the file as obsolete (#~), so that a rewritten paragraph's old translation
    # is still at hand; Sphinx and the checks ignore it.
    catalog.update(template, no_fuzzy_matching=False, update_header_comment=False, keep_user_comments=True)
    return catalog
