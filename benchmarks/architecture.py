"""Architecture figures: the largest modules, imports hidden inside functions, import circles, the apps'
import graph against their declared layers, and functions longer than a screenful.

    python -m benchmarks.architecture [--json]

Imports inside functions are usually there to dodge a circle, so their count is a measure of how tangled the
first-party packages are; a circle is a strongly connected group of first-party modules, counting every import
(module level and inside functions) except those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("portal", "quotas", "scheduling", "observability", "notifications", "lab", "workloads",
            "simulator", "billing", "engine", "csvsafe", "gpuportal")
# Where a package's sources are when not at the root: the Python client and gpup, a distribution of their own.
SOURCES = {"gpuportal": Path("clients/python/src/gpuportal")}
# The packages from the top floor down (docs/architecture.md, "Dependencies"): the Django apps, then the pure
# libraries below every app (the trace simulator, the money arithmetic, the engine with its tier table, the CSV
# guard). Packages on one floor know nothing of each other. An import from a lower floor to a higher one is an
# arrow that runs back up.
FLOORS = (("gpuportal",), ("lab", "observability"), ("scheduling",), ("workloads",), ("quotas",), ("notifications",),
          ("portal",), ("simulator",), ("billing",), ("engine", "csvsafe"))
# The client (gpuportal, gpup) is the top floor: it talks to the portal over HTTP and imports none of it
# (its own import contracts: clients/python/pyproject.toml), and no app imports it.
LONG_FUNCTION = 80
LARGE_MODULE = 600


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        home = ROOT / SOURCES.get(package, Path(package))
        for path in sorted(home.rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = [package, *path.relative_to(home).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path, modules: dict[str, Path]):
    """Yield (target module, inside a function?, line) for every first-party import of one module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    target = _resolve(alias.name, modules)
                    if target:
                        yield target, in_function, child.lineno
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    stem = ".".join(base + ([child.module] if child.module else []))
                else:
                    stem = child.module or ""
                for alias in child.names:
                    target = _resolve(f"{stem}.{alias.name}", modules) or _resolve(stem, modules)
                    if target and target != module:
                        yield target, in_function, child.lineno
            yield from visit(child, inner)

    yield from visit(tree, False)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]

    def strongconnect(root):
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
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
                    result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return sorted(result, key=lambda c: (-len(c), c))


def _floor(app: str) -> int:
    return next(i for i, apps in enumerate(FLOORS) if app in apps)


def _app_graph(edges: list[tuple[str, str]]) -> dict:
    """App-level arrows (one per pair of apps, with how many imports make it), those that run back up, and
    the pairs of apps that import each other."""
    arrows: dict[tuple[str, str], int] = {}
    for source, target in edges:
        a, b = source.split(".")[0], target.split(".")[0]
        if a != b:
            arrows[(a, b)] = arrows.get((a, b), 0) + 1
    up = sorted(f"{a} -> {b} ({n})" for (a, b), n in arrows.items() if _floor(a) >= _floor(b) and a != b)
    both = sorted({" <-> ".join(sorted((a, b))) for (a, b) in arrows if (b, a) in arrows})
    return {"app_arrows": {f"{a} -> {b}": n for (a, b), n in sorted(arrows.items())},
            "arrows_back_up": up, "two_way_app_pairs": both}


def _reason(path: Path, line: int) -> str:
    """The comment an import inside a function gives for being there (on its line or the line above)."""
    lines = path.read_text().splitlines()
    for text in (lines[line - 1], lines[line - 2] if line > 1 else ""):
        if "#" in text:
            return text.split("#", 1)[1].strip()
    return ""


def _private_imports(modules: dict[str, Path]) -> list[str]:
    """``module:line name`` for each private name (``_x``) one first-party module imports from another: a name
    used across modules is public, or lives in the module that uses it."""
    rows = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            if _resolve(source, modules) is None:
                continue
            rows += [f"{name}:{node.lineno} {a.name}" for a in node.names
                     if a.name.startswith("_") and not a.name.startswith("__")]
    return sorted(rows)


def _long_functions(modules: dict[str, Path]) -> list[dict]:
    rows = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > LONG_FUNCTION:
                    rows.append({"function": f"{name}.{node.name}", "lines": length})
    return sorted(rows, key=lambda r: (-r["lines"], r["function"]))


def measure() -> dict:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    edges: list[tuple[str, str]] = []
    hidden_imports: list[dict] = []
    for name, path in modules.items():
        for target, hidden, line in _imports(name, path, modules):
            graph[name].add(target)
            edges.append((name, target))
            if hidden:
                hidden_imports.append({"where": f"{path.relative_to(ROOT)}:{line}", "imports": target,
                                       "reason": _reason(path, line)})
    # A package's __init__ importing its own submodules is not a circle between modules.
    for name in graph:
        graph[name] = {t for t in graph[name] if not (t.startswith(name + ".") and modules[name].name == "__init__.py")}
    sizes = sorted(((len(p.read_text().splitlines()), n) for n, p in modules.items()), reverse=True)
    per_package: dict[str, int] = {}
    for lines, n in sizes:
        per_package[n.split(".")[0]] = per_package.get(n.split(".")[0], 0) + lines
    total = sum(per_package.values())
    circles = _circles(graph)
    return {
        "largest_modules": [{"module": n, "lines": lines} for lines, n in sizes[:5]],
        "package_lines": {p: n for p, n in sorted(per_package.items(), key=lambda kv: (-kv[1], kv[0]))},
        "largest_package_share": round(max(per_package.values()) / total, 3),
        "modules_over_limit": [{"module": n, "lines": lines} for lines, n in sizes if lines > LARGE_MODULE],
        "imports_inside_functions": len(hidden_imports),
        "imports_inside_functions_without_reason": [h for h in hidden_imports if not h["reason"]],
        "circles": circles,
        "modules_in_circles": sum(len(c) for c in circles),
        **_app_graph(edges),
        "functions_over_limit": _long_functions(modules),
        "private_names_imported": _private_imports(modules),
    }


def main(argv=None) -> int:
    figures = measure()
    if "--json" in (argv or sys.argv[1:]):
        print(json.dumps(figures, indent=2))
        return 0
    print("largest modules:")
    for row in figures["largest_modules"]:
        print(f"  {row['lines']:5d}  {row['module']}")
    lines = figures["package_lines"]
    print("lines per package: " + ", ".join(f"{p} {n}" for p, n in lines.items())
          + f" (the largest: {figures['largest_package_share']:.0%} of {sum(lines.values())})")
    # Sizes to look at, not limits to cut at: a module that is one thing may be longer (docs/architecture.md).
    print(f"modules over {LARGE_MODULE} lines (to look at): {len(figures['modules_over_limit'])}")
    for row in figures["modules_over_limit"]:
        print(f"  {row['lines']:5d}  {row['module']}")
    print(f"imports inside functions: {figures['imports_inside_functions']}, of which without a reason: "
          f"{len(figures['imports_inside_functions_without_reason'])}")
    for row in figures["imports_inside_functions_without_reason"]:
        print(f"  {row['where']}  {row['imports']}")
    print(f"import circles: {len(figures['circles'])} ({figures['modules_in_circles']} modules)")
    for circle in figures["circles"]:
        print("  " + " <-> ".join(circle))
    print("app arrows: " + ", ".join(f"{k} ({n})" for k, n in figures["app_arrows"].items()))
    print(f"app arrows that run back up: {len(figures['arrows_back_up'])}")
    for row in figures["arrows_back_up"]:
        print(f"  {row}")
    print(f"apps that import each other: {len(figures['two_way_app_pairs'])}")
    for row in figures["two_way_app_pairs"]:
        print(f"  {row}")
    print(f"private names imported from another module: {len(figures['private_names_imported'])}")
    for row in figures["private_names_imported"]:
        print(f"  {row}")
    print(f"functions over {LONG_FUNCTION} lines (to look at): {len(figures['functions_over_limit'])}")
    for row in figures["functions_over_limit"]:
        print(f"  {row['lines']:5d}  {row['function']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
