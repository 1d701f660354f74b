"""No import circle in the repository's packages: every import counts, those inside a function too (a circle
hidden behind a function-level import is still a circle a reader must untangle). The graph is read from the
source with ast, module by module, as import-linter reads it."""
from __future__ import annotations

import ast

from coursekit.layout import REPO_ROOT

PACKAGES = ("attnlab", "autograde", "coursekit", "bench")


def modules() -> dict[str, object]:
    """{dotted module name: its file} of every module of PACKAGES."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """{module: the modules of PACKAGES it imports}, each `from a import b` counted as a.b where that is a module."""
    found = modules()

    def ours(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:                        # relative: from its package, or a level above
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in found else base for alias in node.names]
        graph[name] = {target for target in map(ours, targets) if target and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_in_the_repository():
    graph = import_graph()
    assert len(graph) > 100 and "autograde.grading" in graph["autograde.cli"], "the graph was not read"
    assert not circles(graph), f"import circles: {circles(graph)}"


def test_the_circle_finder_finds_a_circle_however_long():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
