"""Fail when a module of the package imports from a layer above its own, or packages form a cycle.

The layers, from the top, are those of ``../shared/DESIGN.md`` ("Layers"): each module may import
only from its own layer or the layers below it. Every import counts: top-level, function-local
and ``TYPE_CHECKING`` ones alike, because a deferred import is still a dependency (it only hides
the cycle from the interpreter). Inside one layer, the packages of that layer (kernels, memory,
gpu, ...) must not import each other in a cycle. Every folder of modules is a regular package
(has an ``__init__.py``), so none is left out of a built wheel.

Usage: ``python tools/check_layers.py [PACKAGE_DIR]`` (default: ``tritonlite/`` beside this
file). Prints one line per violation, ``path:line: ...``; exits 1 if there is any.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Top first. A module belongs to the layer of the longest prefix that names it; each prefix is
# also one "unit" for the cycle check. The package's own ``__init__`` (version strings), the
# generated protobuf classes and the log setup sit with the shared contracts. The leaf
# libraries (Numba kernels, staging memory, CUDA runtime) import nothing else of tritonlite;
# they sit under the contracts because ``contracts.datatypes`` (de)serializes BYTES with the
# kernels.
LAYERS: list[tuple[str, list[str]]] = [
    ("entry", ["cli", "server", "__main__", "tune"]),
    # The front ends layer too: the wiring (native.py, metrics) on top; the HTTP handlers, the
    # gRPC servicer and the wire layer apart from each other (PEERS_APART); under them all,
    # frontends.base, the interfaces, error tables and reject rules they share, in which each
    # module is its own unit ("*"), so a loop between two of its modules fails too.
    ("frontends", ["frontends"]),
    ("frontends: http, grpc, wire", ["frontends.http", "frontends.grpc", "frontends.wire"]),
    # The OpenAI API's translation (requests, contracts, answers): no HTTP in it; its routes
    # are frontends.http's.
    ("frontends: openai", ["frontends.openai"]),
    ("frontends: base", ["frontends.base.*"]),
    # Option dataclasses: built by the entry layer, read by the front ends; the core and below
    # are handed plain values instead.
    ("options", ["options"]),
    ("in-process", ["inprocess"]),
    # The core's facade (InferenceCore, CoreAPI) over its sub-packages, which layer too.
    ("core", ["core"]),
    ("core: models, request", ["core.models", "core.request"]),
    ("core: runtime", ["core.runtime"]),
    ("core: tensors", ["core.tensors"]),
    ("core: observability", ["core.observability"]),
    ("scheduling", ["scheduling"]),
    # Each backend module is a unit of its own (the Python backend's too): no loop between them.
    ("backends", ["backends.*"]),
    ("contracts", ["contracts", "logs", "_proto", ""]),
    ("kernels/memory/gpu", ["kernels", "memory", "gpu", "_twins"]),
]

# Layers whose units may not import each other at all (HTTP code never imports gRPC code).
PEERS_APART = {"frontends: http, grpc, wire"}

# A package reached through one module only: (package, its facade, the importers it binds).
# The front ends and in-process callers see the core through CoreAPI and its read-models.
FACADES = [("core", "core.api", ("frontends", "inprocess"))]


@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported module, dotted (resolved to a module of the package when possible)
    path: Path
    line: int


def module_name(package_dir: Path, path: Path) -> str:
    rel = path.relative_to(package_dir.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def iter_imports(package_dir: Path) -> Iterator[Import]:
    package = package_dir.name
    for path in sorted(package_dir.rglob("*.py")):
        source = module_name(package_dir, path)
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == package or alias.name.startswith(package + "."):
                        yield Import(source, alias.name, path, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = resolve_from(source, is_package, node)
                if base != package and not base.startswith(package + "."):
                    continue
                # ``from pkg import mod`` names a module when mod is one; otherwise an attribute.
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    target = candidate if module_exists(package_dir, candidate) else base
                    yield Import(source, target, path, node.lineno)


def resolve_from(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = source.split(".")
    if not is_package:
        parts = parts[:-1]
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    if node.module:
        parts.append(node.module)
    return ".".join(parts)


def module_exists(package_dir: Path, dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    base = package_dir / rel
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def unit_of(package: str, module: str) -> tuple[int, str] | None:
    """(layer index, unit) of ``module``; None when no layer names it.

    The unit is the prefix that names the module, or the module itself under a ``pkg.*`` prefix.
    """
    rel = module[len(package) + 1 :] if module != package else ""
    best: tuple[int, str] | None = None
    best_len = -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            per_module = prefix.endswith(".*")
            base = prefix[:-2] if per_module else prefix
            if base == "":
                matches = rel == ""
            else:
                matches = rel == base or rel.startswith(base + ".")
            if matches and len(base) > best_len:
                best, best_len = (index, rel if per_module else base), len(base)
    return best


def _under(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + ".")


def _facade_problem(package: str, imp: Import) -> str | None:
    src = imp.source.removeprefix(package + ".")
    dst = imp.target.removeprefix(package + ".")
    for pkg, facade, importers in FACADES:
        if _under(dst, pkg) and not _under(dst, facade) and any(_under(src, i) for i in importers):
            return (
                f"{imp.source} imports {imp.target}: {package}.{pkg} is reached only through"
                f" {package}.{facade}"
            )
    return None


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return cycles


def check(package_dir: Path) -> list[str]:
    """Every violation in the package at ``package_dir``, one line each."""
    package = package_dir.name
    problems: list[str] = []
    for folder in sorted({p.parent for p in package_dir.rglob("*.py")}):
        if not (folder / "__init__.py").exists():  # setuptools would leave it out of a wheel
            problems.append(f"{folder}: a package without __init__.py")
    unit_edges: dict[str, set[str]] = {}
    unit_sites: dict[tuple[str, str], Import] = {}
    unplaced: set[str] = set()
    seen: set[tuple[Path, int, str]] = set()
    for imp in iter_imports(package_dir):
        if (imp.path, imp.line, imp.target) in seen:
            continue
        seen.add((imp.path, imp.line, imp.target))
        src = unit_of(package, imp.source)
        dst = unit_of(package, imp.target)
        where = f"{imp.path}:{imp.line}"
        if src is None or dst is None:
            missing = imp.source if src is None else imp.target
            if missing not in unplaced:
                unplaced.add(missing)
                problems.append(f"{where}: {missing} is in no layer (add it to LAYERS)")
            continue
        facade = _facade_problem(package, imp)
        if facade:
            problems.append(f"{where}: {facade}")
        if dst[0] < src[0]:
            problems.append(
                f"{where}: {imp.source} ({LAYERS[src[0]][0]}) imports {imp.target}"
                f" from a higher layer ({LAYERS[dst[0]][0]})"
            )
        elif src[1] != dst[1]:
            if src[0] == dst[0] and LAYERS[src[0]][0] in PEERS_APART:
                problems.append(
                    f"{where}: {imp.source} imports {imp.target}, which its layer"
                    f" ({LAYERS[src[0]][0]}) keeps apart"
                )
            unit_edges.setdefault(src[1], set()).add(dst[1])
            unit_sites.setdefault((src[1], dst[1]), imp)
    for cycle in find_cycles(unit_edges):
        members = set(cycle)
        sites = [
            f"{imp.source} -> {imp.target} ({imp.path}:{imp.line})"
            for (a, b), imp in sorted(unit_sites.items())
            if a in members and b in members
        ]
        names = ", ".join(f"{package}.{u}" if u else package for u in cycle)
        problems.append(f"cycle between packages {names}: " + "; ".join(sites))
    return problems


def main(argv: list[str]) -> int:
    package_dir = Path(argv[1]) if len(argv) > 1 else ROOT / "tritonlite"
    problems = check(package_dir.resolve())
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} layering violation(s)", file=sys.stderr)
        return 1
    print(f"layers ok: {package_dir.name} ({', '.join(name for name, _ in LAYERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
