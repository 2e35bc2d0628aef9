"""The module graph of ``src/bestk``: acyclic, layered, internal imports at the top of modules.

The graph is built from the source with :mod:`ast` (nothing is imported): one node per module
(a package is its ``__init__``), one edge per import, at module level *and* inside functions.
How imports become edges (``docs/design.md``, "Imports"):

* ``import bestk.a.b`` / ``from bestk.a import b`` is an edge to ``bestk.a.b`` when that is a
  module, else to ``bestk.a``. It also runs the ``__init__`` of every package above the target
  that does not contain the importer, so those packages get an edge too (a module inside
  ``bestk.a`` importing ``bestk.a.x`` is already inside ``bestk.a``'s ``__init__``).
* A name of a package's PEP 562 lazy table (``_LAZY = {name: module}``, :mod:`bestk._lazy`)
  is an edge to the module that defines it: ``from bestk import advantages`` and
  ``bestk.advantages(...)`` after ``import bestk`` both import ``bestk.estimators``. The
  package's own ``__init__`` gets no edge for its lazy names (it imports nothing until used).
* ``importlib.import_module("bestk....")`` with a literal name is an import like the others.
* Imports under ``if TYPE_CHECKING:`` are not run and are left out.

The layers (``docs/design.md``, "Layers", :data:`LAYERS`): every module belongs to one, and no
import -- module-level or inside a function -- points to a higher layer.

The rule for where imports go: internal (``bestk``) and standard-library imports at the top of
the module; an import inside a function only for a heavy optional dependency (a module of
:data:`bestk._optional.OPTIONAL`, or one of :data:`LAZY_ALLOWED`) -- or anything in the command
modules of :data:`CLI_MODULES`, which ``bestk --help`` imports and which therefore import
torch, numpy and bestk's own heavy modules only inside the command bodies.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from bestk._optional import OPTIONAL

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "bestk"

#: Modules ``bestk --help`` imports: their commands import their heavy work lazily.
CLI_MODULES = {"bestk.cli", "bestk.lab.commands", "bestk.kappo.commands", "bestk.train.commands",
               "bestk.compare.commands"}

#: Optional heavy modules reached through a package that is not optional itself.
LAZY_ALLOWED = {
    "torch.utils.tensorboard": "needs the optional tensorboard package",
    "hydra": "ships with verl; composes verl's own config in the preflight check",
}


#: The layers of docs/design.md, lowest first: ``(layer, module prefixes)``. A module belongs to
#: the layer of its longest matching prefix (a prefix matches itself and its submodules; the
#: root package ``bestk`` matches only itself: its ``__init__`` imports nothing until used).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("helpers", ("bestk", "bestk._atomic", "bestk._optional", "bestk._lazy", "bestk._typer",
                 "bestk._options", "bestk._schema", "bestk._seeds", "bestk.figures")),
    ("batch primitives", ("bestk.groups", "bestk._inputs")),
    ("metrics, theory, statistics", ("bestk.metrics", "bestk.theory", "bestk.stats",
                                     "bestk.lr_sweep")),
    ("KAPPO core", ("bestk.kappo",)),
    ("estimators", ("bestk.estimators",)),
    ("losses", ("bestk.losses",)),
    ("tasks", ("bestk.tasks",)),
    ("trainer", ("bestk.train",)),
    ("experiments", ("bestk.compare",)),
    ("lab", ("bestk.lab",)),
    ("adapters", ("bestk.integrations",)),
    ("command line", ("bestk.cli", "bestk.__main__", "bestk.lab.commands", "bestk.kappo.commands",
                      "bestk.train.commands", "bestk.compare.commands")),
]


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> int | None:
    """The index in ``layers`` of ``module``'s layer (``None`` if no prefix matches)."""
    best: tuple[int, int] | None = None
    for i, (_, prefixes) in enumerate(layers):
        for p in prefixes:
            if module == p or (p != "bestk" and module.startswith(p + ".")):
                if best is None or len(p) > best[1]:
                    best = (i, len(p))
    return None if best is None else best[0]


def upward_imports(imports: list[Import], layers: list[tuple[str, tuple[str, ...]]] = LAYERS
                   ) -> list[str]:
    """Each import (module-level or lazy) of a module from a higher layer, as a message."""
    bad = set()
    for imp in imports:
        a, b = layer_of(imp.importer, layers), layer_of(imp.target, layers)
        if a is not None and b is not None and b > a:
            bad.add(f"{imp.importer}:{imp.line} ({layers[a][0]}) imports {imp.target} "
                    f"({layers[b][0]})" + (" inside a function" if imp.lazy else ""))
    return sorted(bad)


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    lazy: bool  # inside a function
    what: str  # the imported name as written (for messages)


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def lazy_table(path: Path) -> dict[str, str]:
    """A package's ``_LAZY = {name: module}`` literal (empty if it has none)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "_LAZY":
            return ast.literal_eval(node.value)
    return {}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


class _Collector(ast.NodeVisitor):
    """Every import statement of a module with its line and whether it runs in a function;
    the names bound by ``import bestk...`` and the attribute chains read from them."""

    def __init__(self) -> None:
        self.imports: list[tuple[ast.AST, bool]] = []
        self.depth = 0
        self.module_aliases: dict[str, str] = {}  # local name -> module it names
        self.chains: list[tuple[list[str], int, bool]] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        self.imports.append((node, self.depth > 0))
        for alias in node.names:
            if alias.name.split(".")[0] == "bestk":
                local = alias.asname or alias.name.split(".")[0]
                self.module_aliases[local] = alias.name if alias.asname else "bestk"

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.imports.append((node, self.depth > 0))

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "import_module" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            self.imports.append((node, self.depth > 0))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: list[str] = []
        cur: ast.AST = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name):
            chain.append(cur.id)
            self.chains.append((chain[::-1], node.lineno, self.depth > 0))
            return  # the inner attributes are prefixes of this chain
        self.generic_visit(node)


class Graph:
    def __init__(self) -> None:
        self.modules = all_modules()
        self.lazy = {m: lazy_table(p) for m, p in self.modules.items() if p.name == "__init__.py"}
        self.imports: list[Import] = []
        for name, path in self.modules.items():
            self._collect(name, path)
        self.edges: dict[str, set[str]] = {m: set() for m in self.modules}
        for imp in self.imports:
            if imp.target in self.modules and imp.target != imp.importer:
                self.edges[imp.importer].add(imp.target)

    def resolve(self, dotted: str) -> str | None:
        """The bestk module a dotted name (module, or attribute of a package) stands for."""
        parts = dotted.split(".")
        if parts[0] != "bestk":
            return None
        mod = "bestk"
        for part in parts[1:]:
            sub = f"{mod}.{part}"
            if sub in self.modules:
                mod = sub
            elif part in self.lazy.get(mod, {}):
                mod = self.lazy[mod][part]
            else:
                break
        return mod

    def _add(self, importer: str, target: str, line: int, lazy: bool, what: str) -> None:
        if target is None:
            return
        self.imports.append(Import(importer, target, line, lazy, what))
        parts = target.split(".")
        for i in range(1, len(parts)):  # the packages above the target run their __init__
            pkg = ".".join(parts[:i])
            if pkg in self.modules and not (importer == pkg or importer.startswith(pkg + ".")):
                self.imports.append(Import(importer, pkg, line, lazy, what))

    def _collect(self, name: str, path: Path) -> None:
        tree = ast.parse(path.read_text(), filename=str(path))
        col = _Collector()
        col.visit(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, lazy in col.imports:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports.append(Import(name, alias.name, node.lineno, lazy, alias.name))
                    if alias.name.split(".")[0] == "bestk":
                        self._add(name, self.resolve(alias.name), node.lineno, lazy, alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                self.imports.append(Import(name, base, node.lineno, lazy, base))
                if base.split(".")[0] != "bestk":
                    continue
                for alias in node.names:
                    self._add(name, self.resolve(f"{base}.{alias.name}"), node.lineno, lazy,
                              f"{base}.{alias.name}")
            else:  # importlib.import_module("...")
                target = node.args[0].value
                self.imports.append(Import(name, target, node.lineno, lazy, target))
                if target.split(".")[0] == "bestk":
                    self._add(name, self.resolve(target), node.lineno, lazy, target)
        for chain, line, lazy in col.chains:  # bestk.advantages(...) after `import bestk`
            base = col.module_aliases.get(chain[0])
            if base is not None and len(chain) > 1:
                target = self.resolve(".".join([base, *chain[1:]]))
                if target != base:
                    self._add(name, target, line, lazy, ".".join(chain))

    def cycles(self) -> list[list[str]]:
        """Strongly connected components with more than one module (Tarjan)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on: set[str] = set()
        out: list[list[str]] = []
        counter = [0]
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

        def visit(v: str) -> None:
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(self.edges[v]):
                if w not in index:
                    visit(w)
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
                    out.append(sorted(comp))

        for v in sorted(self.edges):
            if v not in index:
                visit(v)
        return out

    def path(self, a: str, b: str) -> list[str]:
        """A shortest import path from ``a`` to ``b`` (for messages)."""
        prev = {a: a}
        todo = [a]
        while todo:
            v = todo.pop(0)
            for w in sorted(self.edges[v]):
                if w not in prev:
                    prev[w] = v
                    todo.append(w)
        if b not in prev:
            return []
        out = [b]
        while out[-1] != a:
            out.append(prev[out[-1]])
        return out[::-1]


@pytest.fixture(scope="module")
def graph() -> Graph:
    return Graph()


def test_the_graph_sees_imports_of_every_kind(graph):
    """The builder is not vacuous: it finds module-level, function-level, lazy-table and
    package-``__init__`` edges that are known to exist."""
    assert "bestk.estimators._registry" in graph.edges["bestk.estimators.argmaxrl"]
    assert "bestk.groups" in graph.edges["bestk.estimators._registry"] or \
        "bestk.groups" in graph.edges["bestk._inputs"]
    assert "bestk.train.config" in graph.edges["bestk.train.commands"]  # inside a command
    assert graph.resolve("bestk.advantages") == "bestk.estimators"
    assert graph.resolve("bestk.kappo.calibrate") == "bestk.kappo.calibration"
    # a module outside a package runs the package's __init__ when it imports a submodule
    assert "bestk.kappo" in graph.edges["bestk.estimators.kappo_grpo"]
    assert "bestk.estimators" not in graph.edges["bestk.estimators.argmaxrl"]


def test_the_cycle_finder_finds_cycles(graph):
    g = Graph.__new__(Graph)
    g.edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert g.cycles() == [["a", "b", "c"]] and g.path("a", "c") == ["a", "b", "c"]


def test_module_graph_is_acyclic(graph):
    problems = []
    for comp in graph.cycles():
        a, b = comp[0], comp[1]
        loop = graph.path(a, b) + graph.path(b, a)[1:]
        problems.append(" -> ".join(loop))
    assert not problems, "import cycles:\n" + "\n".join(problems)


def test_imports_inside_functions_are_only_heavy_optional_ones(graph):
    bad = []
    for imp in graph.imports:
        if not imp.lazy or imp.importer in CLI_MODULES or not imp.what:
            continue
        top = imp.what.split(".")[0]
        if top in OPTIONAL or any(imp.what == m or imp.what.startswith(m + ".")
                                  for m in LAZY_ALLOWED):
            continue
        bad.append(f"{imp.importer}:{imp.line} imports {imp.what} inside a function")
    assert not sorted(set(bad)), "\n".join(sorted(set(bad)))


def test_every_module_has_a_layer(graph):
    missing = [m for m in graph.modules if layer_of(m) is None]
    assert not missing, "modules outside the layer table of docs/design.md: " + ", ".join(missing)


def test_the_layer_table_matches_the_design_doc():
    """Each layer's modules are the ones docs/design.md's table lists (a prefix listed there as
    ``bestk.x.*`` or ``bestk.x`` or inside ``bestk.{a,b}.commands``)."""
    doc = (SRC.parent / "docs" / "design.md").read_text()
    table = doc[doc.index("## Layers"):doc.index("## Data flow")]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("layer", "---"):
            names = set()
            for code in re.findall(r"`([^`]+)`", cells[1]):
                m = re.fullmatch(r"(bestk(?:\.\w+)*)\.\{([\w,]+)\}\.(\w+)", code)
                if m:
                    names |= {f"{m.group(1)}.{x}.{m.group(3)}" for x in m.group(2).split(",")}
                elif code.startswith("bestk"):
                    names.add(code.split(" ")[0].removesuffix(".*"))
            rows[cells[0]] = names
    assert list(rows) == [name for name, _ in LAYERS]
    for name, prefixes in LAYERS:
        assert rows[name] == set(prefixes) - {"bestk", "bestk.__main__"}, name


def test_the_layer_check_finds_upward_imports():
    layers = [("low", ("bestk.a",)), ("high", ("bestk.b",))]
    imports = [Import("bestk.a.x", "bestk.b", 3, True, "bestk.b"),
               Import("bestk.b", "bestk.a.x", 1, False, "bestk.a.x")]
    assert upward_imports(imports, layers) == [
        "bestk.a.x:3 (low) imports bestk.b (high) inside a function"]
    assert layer_of("bestk", [("h", ("bestk",))]) == 0
    assert layer_of("bestk.c", [("h", ("bestk",))]) is None


def test_no_module_imports_from_a_higher_layer(graph):
    bad = upward_imports(graph.imports)
    assert not bad, "imports against the layer order of docs/design.md:\n" + "\n".join(bad)
