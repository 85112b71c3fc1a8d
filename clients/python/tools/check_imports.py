#!/usr/bin/env python3
"""Fails when the modules of a package import each other in a cycle.

    tools/check_imports.py [--type-checking] [PACKAGE_DIR]     default: src/stepd

Only imports that run when a module is imported count: those at module level
(also inside ``if``/``try``/``with`` blocks and class bodies), not those in
functions, and not those under ``if TYPE_CHECKING:`` (for annotations only).
``import a.b`` and ``from a.b import c`` are edges to ``a.b`` — or to
``a.b.c`` when that is a module of the package; relative imports are resolved
against the importing module's package. Each cycle is printed as a chain of
modules, and the exit status is 1 when there is one. ``--type-checking``
counts the imports under ``if TYPE_CHECKING:`` too, to see the references
kept for annotations alone.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent / "src" / "stepd"


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package at `root`, by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(body: list[ast.stmt], type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module body runs (with
    `type_checking`, also those that only a type checker follows)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If):
            if type_checking or not _is_type_checking(node.test):
                out += _runtime_imports(node.body, type_checking)
            out += _runtime_imports(node.orelse, type_checking)
        elif isinstance(node, (ast.Try, ast.With, ast.For, ast.While)):
            for block in ("body", "orelse", "finalbody"):
                out += _runtime_imports(getattr(node, block, []), type_checking)
            for handler in getattr(node, "handlers", []):
                out += _runtime_imports(handler.body, type_checking)
        elif isinstance(node, ast.ClassDef):
            out += _runtime_imports(node.body, type_checking)
    return out


def edges(name: str, path: Path, known: dict[str, Path], type_checking: bool = False) -> set[str]:
    """The modules of the package that module `name` imports as it runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text(), str(path)).body, type_checking):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        found.update(t for t in targets if t in known and t != name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[tuple[list[str], set[str]]]:
    """Each strongly connected group of modules (Tarjan's algorithm), with one
    cycle in it: a chain from its first module back to that module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [(_chain(graph, group), group) for group in sorted(groups, key=min)]


def _chain(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest path from the group's first module back to itself (breadth first)."""
    start = min(group)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    chain = [v]
                    while chain[-1] != start:
                        chain.append(came[chain[-1]])
                    return [*reversed(chain), start]
                if w not in came:
                    came[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError("a strongly connected group has a cycle")


def main(argv: list[str]) -> int:
    args = argv[1:]
    type_checking = "--type-checking" in args
    args = [a for a in args if a != "--type-checking"]
    root = Path(args[0]) if args else DEFAULT
    known = modules(root)
    graph = {name: edges(name, path, known, type_checking) for name, path in known.items()}
    found = cycles(graph)
    for chain, group in found:
        others = sorted(group - set(chain))
        also = f" (with {', '.join(others)} in the same cycle)" if others else ""
        print("import cycle: " + " -> ".join(chain) + also, file=sys.stderr)
    if found:
        print(f"{len(found)} import cycle(s) among the modules of {root.name}", file=sys.stderr)
        return 1
    print(f"no import cycle among the {len(known)} modules of {root.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
