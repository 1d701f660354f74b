"""Collect a notebook's `#| export attnlab/<module>.py` cells into Python modules.

The same code builds the reference package (from solutions/, solution markers stripped) and a
student's own package (from their exercises/, unwritten cells raising NotImplementedError).
"""
from __future__ import annotations

import ast
import builtins
import re
import symtable
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat

EXPORT_MARKER = re.compile(r"^#\|\s*export\s+(?P<targets>\S.*)$")
SOLUTION_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")
STUB_RAISE = re.compile(r"^(?P<indent>\s*)raise NotImplementedError\(\)\s*$")
PACKAGE = "attnlab"


class ExportError(ValueError):
    """A notebook's export cells cannot be turned into a module."""


@dataclass(frozen=True)
class ExportCell:
    notebook: str          # path of the notebook, relative to the repository root
    label: str             # the cell's nbgrader grade_id, or its index
    targets: tuple[str, ...]
    code: str              # the cell's source without the marker line


def read_export_cells(path: Path, root: Path) -> list[ExportCell]:
    """Every export cell of the notebook at `path`, in notebook order."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # nbformat raises several unrelated types for a broken file
        raise ExportError(f"{path}: not a readable notebook ({exc})") from exc
    cells = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        # The marker is the first line, but a learner may type a comment or a blank line above it.
        lines = cell.source.splitlines()
        head = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")
                     or EXPORT_MARKER.match(line.strip())), len(lines))
        match = EXPORT_MARKER.match(lines[head].strip()) if head < len(lines) else None
        if not match:
            continue
        rest = "\n".join(lines[:head] + lines[head + 1:])
        targets = tuple(match["targets"].split())
        for target in targets:
            if not re.fullmatch(rf"{PACKAGE}/[a-z_][a-z0-9_]*(/[a-z_][a-z0-9_]*)*\.py", target):
                raise ExportError(f"{path}, cell {index}: export target {target!r} is not of the form "
                                  f"'{PACKAGE}/<module>.py'")
        label = cell.metadata.get("nbgrader", {}).get("grade_id", f"#{index}")
        cells.append(ExportCell(str(path.relative_to(root)), label, targets, rest))
    return cells


def reference_code(cell: ExportCell) -> str:
    """The solution's code: nbgrader's solution markers removed."""
    return "\n".join(line for line in cell.code.splitlines() if not SOLUTION_MARKER.match(line))


def student_code(cell: ExportCell, chapter: str) -> str:
    """A student's code: an unwritten stub says which exercise to fill in."""
    message = (f"{chapter}, exercise '{cell.label}' is not written yet: fill in its cell in "
               f"{cell.notebook}, then run `make export`")
    return "\n".join(
        STUB_RAISE.sub(lambda m: f"{m['indent']}raise NotImplementedError({message!r})", line)
        for line in cell.code.splitlines()
    )


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def defined_names(code: str) -> set[str]:
    """The functions, classes and variables that `code` defines at top level."""
    try:
        return _top_level_names(ast.parse(code))
    except SyntaxError:
        return set()


def _imported_names(tree: ast.Module) -> set[str]:
    return {(alias.asname or alias.name).split(".")[0] for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}


def _used_names(tree: ast.Module) -> set[str]:
    """The global names the module's code reads: a function's own local of the same name does not count (chapter
    6's training loop has a local `schedule`, which is not chapter 9's scheduler)."""
    found: set[str] = set()

    def visit(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            if symbol.is_referenced() and (table.get_type() == "module" or symbol.is_global()):
                found.add(symbol.get_name())
        for child in table.get_children():
            visit(child)
    visit(symtable.symtable(ast.unparse(tree), "<module>", "exec"))
    return found


def _prune_imports(body: str, used: set[str]) -> str:
    """Drop the import lines of a shared imports cell that this module never uses."""
    kept = []
    for line in body.splitlines():
        stmt = line.strip()
        if stmt.startswith(("import ", "from ")):
            node = ast.parse(stmt).body[0]
            bound = [(a.asname or a.name).split(".")[0] for a in node.names]  # type: ignore[attr-defined]
            if not any(name in used for name in bound):
                continue
        kept.append(line)
    return "\n".join(kept)


def assemble_modules(cells: list[ExportCell], code_of, header_source: str,
                     command: str = "make sync") -> dict[str, str]:
    """Group cells by target module and return {relative path: module text}.

    code_of(cell) gives the code to write for a cell. Names that a module uses but another module of the
    same set defines are imported from it, so a chapter's cells can call each other as they do in the notebook.
    """
    chunks: dict[str, list[tuple[ExportCell, str]]] = {}
    for cell in cells:
        for target in cell.targets:
            chunks.setdefault(target, []).append((cell, code_of(cell)))

    defined: dict[str, set[str]] = {}
    for target, parts in chunks.items():
        text = "\n\n".join(code for _, code in parts)
        try:
            defined[target] = _top_level_names(ast.parse(text))
        except SyntaxError as exc:
            raise ExportError(f"{target}: the exported cells are not valid Python ({exc})") from exc

    modules = {}
    for target, parts in chunks.items():
        body_tree = ast.parse("\n\n".join(code for _, code in parts))
        used = _used_names(body_tree)
        sources = sorted({cell.notebook for cell, _ in parts})
        lines = [f"# DO NOT EDIT: generated by `{command}` from {', '.join(sources)}.",
                 f"# {header_source}", ""]
        cross_imports = []
        imported: set[str] = set()      # a module written by several chapters gets an imports cell from each
        for other, names in sorted(defined.items()):
            wanted = sorted((used & names) - defined[target] - _imported_names(body_tree) - set(dir(builtins)))
            if other != target and wanted:
                dotted = other[: -len(".py")].replace("/", ".")
                cross_imports.append(f"from {dotted} import {', '.join(wanted)}")
        for cell, code in parts:
            if len(cell.targets) > 1:
                # A cell shared by several modules holds imports: keep only those this module uses,
                # and put the imports of sibling modules right after them.
                kept = _prune_imports(code, used).strip("\n").splitlines()
                own = [line for line in kept if line.startswith(f"from {PACKAGE}.")]
                others = [line for line in kept if line not in own]
                while others and not others[-1].strip():
                    others.pop()
                package_imports = sorted(own + cross_imports)
                new = [line for line in others + package_imports if not line.strip() or line not in imported]
                imported |= {line for line in new if line.strip()}
                others = [line for line in others if line in new]
                package_imports = [line for line in package_imports if line in new]
                while others and not others[-1].strip():
                    others.pop()
                lines += others + ([""] + package_imports if package_imports else [])
                cross_imports = []
                continue
            lines += [*cross_imports, "", "", f"# cell '{cell.label}'", code.strip("\n")]
            cross_imports = []
        modules[target] = "\n".join(lines).lstrip("\n") + "\n"
    return modules


# What each subpackage of attnlab is for, by role rather than by chapter (its __init__.py says so).
SUBPACKAGES = {
    "layers": "the building blocks: softmax and attention, masks, multi-head attention, norms, feed-forward, "
              "embeddings and positions, pooling, the KV cache, and the encoder and decoder layers",
    "models": "whole models assembled from the layers: the encoder, the decoder-only language model, the "
              "encoder-decoder Transformer",
    "decoding": "turning a model's logits into text: sampling filters, generate() with a KV cache, beam search",
    "weights": "real pretrained weights loaded into the course's models (MiniLM, GPT-2, and SmolLM2 from a GGUF "
               "file with its tokenizer)",
    "translator": "chapter 6's Chinese-English translator: its corpus, its word vocabulary, its training",
    "serving": "serving many requests at once: the paged KV cache (block allocator, block tables, copy-on-write, "
               "prefix cache), paged attention, the scheduler and the engine",
    "kernels": "Triton kernels: paged decode attention for grouped-query heads and for MLA, their ahead-of-time "
               "compile for Hopper, and the switch to Triton's interpreter on a machine without a CUDA GPU",
}


def _chapter_of(cell: ExportCell) -> int | None:
    match = re.search(r"(?:^|/)ch(\d\d)_", cell.notebook)
    return int(match[1]) if match else None


def package_inits(cells: list[ExportCell], modules: list[str], origin: str, command: str) -> dict[str, str]:
    """{path: text} of attnlab/__init__.py, whose docstring maps every module (what it holds, and the chapter
    that writes each part), and of each subpackage's __init__.py."""
    holds: dict[str, list[tuple[int | None, list[str]]]] = {}
    for cell in cells:
        if len(cell.targets) != 1:
            continue                          # a cell shared by several modules holds only their imports
        names = sorted(defined_names(reference_code(cell)), key=lambda n: (n.startswith("_"), n))
        names = [n for n in names if not n.startswith("_")]
        target = cell.targets[0]
        if target in modules and names:
            parts = holds.setdefault(target, [])
            chapter = _chapter_of(cell)
            if parts and parts[-1][0] == chapter:
                parts[-1][1].extend(n for n in names if n not in parts[-1][1])
            else:
                parts.append((chapter, names))
    header = f"# DO NOT EDIT: generated by `{command}` ({origin}).\n"
    folders = sorted({str(Path(m).parent) for m in modules if Path(m).parent != Path(PACKAGE)})
    lines = [f'"""{PACKAGE}: the Transformer package built chapter by chapter in the course.', "",
             "Modules, by role; after each, what it holds and (in brackets) the chapter that writes it:", ""]
    for module in sorted(m for m in modules if not m.endswith("__init__.py")):
        dotted = module[: -len(".py")].replace("/", ".")
        lines.append(f"    {dotted}")
        for chapter, names in holds.get(module, []):
            lines += textwrap.wrap(", ".join(names) + (f" [{chapter}]" if chapter else ""), 100,
                                   initial_indent=" " * 8, subsequent_indent=" " * 8)
    lines.append('"""')
    inits = {f"{PACKAGE}/__init__.py": header + "\n".join(lines) + "\n"}
    for folder in folders:
        role = SUBPACKAGES.get(Path(folder).name, "")
        dotted = folder.replace("/", ".")
        text = "\n".join(textwrap.wrap(f"{dotted}: {role}." if role else f"{dotted}.", 100))
        inits[f"{folder}/__init__.py"] = header + f'"""{text}\n"""\n'
    return inits
