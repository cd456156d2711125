"""The project's import graph, read from the source with ast: every import, also those inside
functions (the ones that hide cycles from a plain `import`). Used by tests/test_boundaries.py."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGES = ("harness", "workloads", "staging", "results", "portal")
# (importer package, imported package) pairs the layering forbids. Layers, lowest first:
# workloads < staging < harness, and results < portal; harness may use results, never portal.
FORBIDDEN = {("workloads", p) for p in ("harness", "staging", "results", "portal")} | \
            {("staging", p) for p in ("harness", "results", "portal")} | \
            {("results", p) for p in ("harness", "workloads", "staging", "portal")} | \
            {("portal", p) for p in ("harness", "workloads", "staging")} | {("harness", "portal")}


# Floors inside a package (ARCHITECTURE.md, "Folders by concern"): a module may import its own
# folder and lower floors, never a higher floor nor another folder of its own floor. Every module
# of harness/ and results/ sits in one of these folders, except the package's entry points.
FLOORS = {
    "harness.config": 1, "harness.measure": 2, "harness.parallel": 3, "harness.run": 4,
    "harness.comm": 5, "harness.launch": 5, "harness.planning": 5, "harness.experiments": 6,
    "harness.bench": 7, "harness.cli": 7, "harness.__main__": 8, "harness": 8,
    "results.record": 1, "results.stats": 1, "results.store": 2, "results.analysis": 3,
    "results.planner": 4, "results.__main__": 5, "results": 5,
}


def folder(mod: str) -> str | None:
    """The FLOORS entry a module belongs to (its folder, or itself for an entry point)."""
    for key in sorted(FLOORS, key=len, reverse=True):
        if mod == key or ("." in key and mod.startswith(key + ".")):  # a package's own __init__ only
            return key
    return None


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _targets(node: ast.AST, mod: str, is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the package the module sits in
            pkg = mod if is_pkg else mod.rpartition(".")[0]
            for _ in range(node.level - 1):
                pkg = pkg.rpartition(".")[0]
            base = f"{pkg}.{base}".rstrip(".") if base else pkg
        return [base] + [f"{base}.{a.name}" for a in node.names]
    return []


def edges(root: Path) -> dict[str, set[str]]:
    """module -> project modules it imports (a package's own __init__ is not an edge of its
    submodules: importing harness.x runs harness/__init__.py, which is not a dependency choice)."""
    mods = modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for t in _targets(node, m, path.name == "__init__.py"):
                r = resolve(t)
                if r and r != m and not m.startswith(r + "."):
                    out[m].add(r)
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def package_cycles(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    pk: dict[str, set[str]] = {}
    for m, ts in g.items():
        for t in ts:
            a, b = m.split(".")[0], t.split(".")[0]
            if a != b:
                pk.setdefault(a, set()).add(b)
    return sorted((a, b) for a in pk for b in pk[a] if a < b and a in pk.get(b, set()))


def upward(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, t) for m, ts in g.items() for t in ts
                  if (m.split(".")[0], t.split(".")[0]) in FORBIDDEN)


def floor_violations(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports inside one package that reach a higher floor or a sibling folder of the same floor."""
    out = []
    for m, ts in g.items():
        fm = folder(m)
        for t in ts:
            ft = folder(t)
            if fm is None or ft is None or fm == ft or m.split(".")[0] != t.split(".")[0]:
                continue
            if FLOORS[ft] >= FLOORS[fm]:
                out.append((m, t))
    return sorted(out)


def unplaced(g: dict[str, set[str]]) -> list[str]:
    """Modules of a foldered package outside every folder (a new flat module must pick its concern)."""
    pkgs = {k.split(".")[0] for k in FLOORS}
    return sorted(m for m in g if m.split(".")[0] in pkgs and folder(m) is None)


def problems(root: Path) -> list[str]:
    g = edges(root)
    return ([f"cycle: {' <-> '.join(c)}" for c in cycles(g)] +
            [f"package cycle: {a} <-> {b}" for a, b in package_cycles(g)] +
            [f"upward import: {m} -> {t}" for m, t in upward(g)] +
            [f"floor: {m} -> {t} ({folder(m)} is floor {FLOORS[folder(m)]}, {folder(t)} floor {FLOORS[folder(t)]})"
             for m, t in floor_violations(g)] +
            [f"outside every folder: {m}" for m in unplaced(g)])
