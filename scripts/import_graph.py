"""Print the package's import graph figures: modules, lines, cycles, private names
imported across modules.

    python scripts/import_graph.py [src/tokenflex]

A cycle counts module-level imports and imports inside functions alike (a lazy import
still ties the two modules together). A private import is ``from .x import _name`` where
``_name`` is defined in another module (``__future__`` and dunder names excepted).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    base = mod.split(".")
    if not is_pkg:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "src/tokenflex")
    files = sorted(root.rglob("*.py"))
    mods = {module_name(root, f): f for f in files}
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private: list[str] = []
    lines = 0
    for mod, path in mods.items():
        text = path.read_text()
        lines += text.count("\n")
        tree = ast.parse(text)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = resolve(mod, is_pkg, node.level, node.module)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    dest = sub if sub in mods else target
                    if dest in mods and dest != mod:
                        edges[mod].add(dest)
                    name = alias.name
                    if name.startswith("_") and not name.startswith("__") and sub not in mods:
                        private.append(f"{mod} <- {target}.{name}")
            elif isinstance(node, ast.ImportFrom) and node.module in mods and node.module != mod:
                edges[mod].add(node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods and alias.name != mod:
                        edges[mod].add(alias.name)
    sccs = components(edges)
    pairs = sorted({(a, b) for a in mods for b in edges[a] if a in edges[b] and a < b})
    # package level: a module stands for its top-level unit (tokenflex.formats.chat ->
    # tokenflex.formats); a package's own __init__ importing its submodules is not an edge
    unit = {m: ".".join(m.split(".")[:2]) for m in mods}
    pkg_edges: dict[str, set[str]] = {u: set() for u in unit.values()}
    for a, outs in edges.items():
        for b in outs:
            if unit[a] != unit[b]:
                pkg_edges[unit[a]].add(unit[b])
    pkg_sccs = components(pkg_edges)
    top = [m for m in mods if m.count(".") == 1]
    print(
        f"modules: {len(mods)} ({len(top)} top-level, "
        f"{sum(1 for m in top if m.split('.')[-1].startswith('_'))} of them _private)"
    )
    print(f"lines: {lines}")
    print(f"module-level cycles (strongly connected groups): {len(sccs)}")
    for comp in sccs:
        print("  " + " -> ".join(comp))
    print(f"two-module import cycles: {len(pairs)}")
    for a, b in pairs:
        print(f"  {a} <-> {b}")
    print(f"package-level cycles (strongly connected groups): {len(pkg_sccs)}")
    for comp in pkg_sccs:
        print("  " + " -> ".join(comp))
    print(f"private names imported across modules: {len(private)}")
    for p in private:
        print(f"  {p}")


def components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    sccs: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in edges:
        if v not in index:
            strong(v)
    return sccs


if __name__ == "__main__":
    main()
