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
  ``bestk.advantages(...)`` after ``import bestk`` both import ``bestk.estimators``.
* The package's own ``__init__`` gets an edge to each module of its lazy table too: it imports
  nothing until a name is used, but then it is the package that imports it, so a lazy name is
  held to the layer order like any import (``bestk.kappo`` may not expose a name of
  ``bestk.estimators``). The one exemption is the root package ``bestk``: its lazy table is
  the public facade over every layer (``bestk.advantages``, ``bestk.Trainer``, ...), meant to
  reach upwards, and nothing inside ``bestk`` imports a name through it; its
  ``if TYPE_CHECKING:`` imports of those same names (what type checkers see of the facade)
  are exempt with it.
* ``importlib.import_module("bestk....")`` with a literal name is an import like the others.
* Imports under ``if TYPE_CHECKING:`` are never run, so they stay out of the cycle check, but
  they are held to the layer order: an annotation naming a class of a higher layer is a
  dependency on that layer all the same (a lower layer takes a ``Protocol`` of its own).

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
                 "bestk._options", "bestk._records", "bestk._schema", "bestk._seeds",
                 "bestk.figures")),
    ("batch primitives", ("bestk.groups", "bestk._inputs")),
    ("metrics, theory, statistics", ("bestk.metrics", "bestk.samples", "bestk.theory",
                                     "bestk.stats", "bestk.lr_sweep")),
    ("KAPPO core", ("bestk.kappo",)),
    ("estimators", ("bestk.estimators",)),
    ("losses", ("bestk.losses",)),
    ("tasks", ("bestk.tasks",)),
    ("trainer runtime", ("bestk.train.runtime",)),
    ("trainer config", ("bestk.train.config",)),
    ("trainer model", ("bestk.train.model",)),
    ("trainer rollout", ("bestk.train.rollout",)),
    ("trainer reference", ("bestk.train.reference",)),
    ("trainer algorithms", ("bestk.train.algorithms",)),
    ("trainer run", ("bestk.train.run",)),
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
                    f"({layers[b][0]})" + (" inside a function" if imp.lazy else "")
                    + (f" ({imp.via})" if imp.via else ""))
    return sorted(bad)


#: How an import is written, besides a plain import statement (for messages and the checks).
LAZY_TABLE = "lazy table"  # a name of the importing package's own ``_LAZY`` table
TYPE_ONLY = "TYPE_CHECKING"  # under ``if TYPE_CHECKING:``: never run


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    lazy: bool  # inside a function
    what: str  # the imported name as written (for messages)
    via: str = ""  # "", LAZY_TABLE or TYPE_ONLY


def module_name(path: Path, src: Path = SRC) -> str:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules(src: Path = SRC) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted((src / "bestk").rglob("*.py"))}


def lazy_table(path: Path) -> dict[str, str]:
    """A package's ``_LAZY = {name: module}`` literal (empty if it has none)."""
    return {name: module for name, (module, _) in lazy_table_lines(path).items()}


def lazy_table_lines(path: Path) -> dict[str, tuple[str, int]]:
    """A package's ``_LAZY`` literal with the line of each entry: ``{name: (module, line)}``."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "_LAZY":
            assert isinstance(node.value, ast.Dict)
            return {ast.literal_eval(k): (ast.literal_eval(v), k.lineno)
                    for k, v in zip(node.value.keys, node.value.values, strict=True)
                    if k is not None}
    return {}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


class _Collector(ast.NodeVisitor):
    """Every import statement of a module with its line, whether it runs in a function and
    whether it sits under ``if TYPE_CHECKING:``; the names bound by ``import bestk...`` and the
    attribute chains read from them."""

    def __init__(self) -> None:
        self.imports: list[tuple[ast.AST, bool, bool]] = []
        self.depth = 0
        self.type_checking = 0  # > 0 inside ``if TYPE_CHECKING:``
        self.module_aliases: dict[str, str] = {}  # local name -> module it names
        self.chains: list[tuple[list[str], int, bool]] = []

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node):
            self.type_checking += 1
            for child in node.body:
                self.visit(child)
            self.type_checking -= 1
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _record(self, node: ast.AST) -> None:
        self.imports.append((node, self.depth > 0, self.type_checking > 0))

    def visit_Import(self, node: ast.Import) -> None:
        self._record(node)
        if self.type_checking:  # binds names for annotations only: no attribute reads
            return
        for alias in node.names:
            if alias.name.split(".")[0] == "bestk":
                local = alias.asname or alias.name.split(".")[0]
                self.module_aliases[local] = alias.name if alias.asname else "bestk"

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._record(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "import_module" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            self._record(node)
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
    """The module graph of the ``bestk`` package under ``src``.

    ``lazy_tables`` (a package's ``__init__`` imports the modules of its own ``_LAZY`` table,
    the root package excepted) and ``type_checking`` (imports under ``if TYPE_CHECKING:``
    count for the layer order) are on for the real check; both off is the checker as it was
    before it saw them (the tests below show what that missed).
    """

    def __init__(self, src: Path = SRC, *, lazy_tables: bool = True,
                 type_checking: bool = True) -> None:
        self.modules = all_modules(src)
        self.see_lazy_tables, self.see_type_checking = lazy_tables, type_checking
        self.lazy = {m: lazy_table(p) for m, p in self.modules.items() if p.name == "__init__.py"}
        self.imports: list[Import] = []
        for name, path in self.modules.items():
            self._collect(name, path)
        # the cycle check: imports that run (not those under TYPE_CHECKING)
        self.edges: dict[str, set[str]] = {m: set() for m in self.modules}
        for imp in self.imports:
            if imp.target in self.modules and imp.target != imp.importer and imp.via != TYPE_ONLY:
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

    def _add(self, importer: str, target: str | None, line: int, lazy: bool, what: str,
             via: str = "") -> None:
        if target is None:
            return
        self.imports.append(Import(importer, target, line, lazy, what, via))
        parts = target.split(".")
        for i in range(1, len(parts)):  # the packages above the target run their __init__
            pkg = ".".join(parts[:i])
            if pkg in self.modules and not (importer == pkg or importer.startswith(pkg + ".")):
                self.imports.append(Import(importer, pkg, line, lazy, what, via))

    def _collect(self, name: str, path: Path) -> None:
        tree = ast.parse(path.read_text(), filename=str(path))
        col = _Collector()
        col.visit(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        if path.name == "__init__.py" and name != "bestk" and self.see_lazy_tables:
            for attr, (module, line) in lazy_table_lines(path).items():
                self._add(name, module, line, False, f"{name}.{attr}", LAZY_TABLE)
        for node, lazy, type_only in col.imports:
            if type_only and not self.see_type_checking:
                continue
            via = TYPE_ONLY if type_only else ""
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports.append(Import(name, alias.name, node.lineno, lazy, alias.name,
                                               via))
                    if alias.name.split(".")[0] == "bestk":
                        self._add(name, self.resolve(alias.name), node.lineno, lazy, alias.name,
                                  via)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                if type_only and all(self._facade(name, a.name, self.resolve(f"{base}.{a.name}"))
                                     for a in node.names):
                    continue  # the root facade's mirror of its lazy table
                self.imports.append(Import(name, base, node.lineno, lazy, base, via))
                if base.split(".")[0] != "bestk":
                    continue
                for alias in node.names:
                    self._add(name, self.resolve(f"{base}.{alias.name}"), node.lineno, lazy,
                              f"{base}.{alias.name}", via)
            else:  # importlib.import_module("...")
                target = node.args[0].value
                self.imports.append(Import(name, target, node.lineno, lazy, target, via))
                if target.split(".")[0] == "bestk":
                    self._add(name, self.resolve(target), node.lineno, lazy, target, via)
        for chain, line, lazy in col.chains:  # bestk.advantages(...) after `import bestk`
            base = col.module_aliases.get(chain[0])
            if base is not None and len(chain) > 1:
                target = self.resolve(".".join([base, *chain[1:]]))
                if target != base:
                    self._add(name, target, line, lazy, ".".join(chain))

    def _facade(self, importer: str, attr: str, target: str | None) -> bool:
        """Whether ``importer`` is the root package and ``attr`` a name of its lazy table
        defined by ``target`` (the facade's ``if TYPE_CHECKING:`` mirror of that table)."""
        return importer == "bestk" and target is not None and \
            self.lazy.get("bestk", {}).get(attr) == target

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


def all_edges(graph: Graph) -> dict[str, set[str]]:
    """Every import between two modules of ``graph``, those under ``if TYPE_CHECKING:``
    included (what a reader, and a type checker, follows)."""
    edges: dict[str, set[str]] = {m: set() for m in graph.modules}
    for imp in graph.imports:
        if imp.target in graph.modules and imp.target != imp.importer:
            edges[imp.importer].add(imp.target)
    return edges


def folder_of(module: str, graph: Graph) -> str:
    """The folder (package) ``module`` lives in: the package itself for an ``__init__``; a
    module of the root package ``bestk`` is a node of its own (the root holds both the lowest
    helpers and the command line, so as one node it would close every layer into a loop)."""
    package = module if graph.modules[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    return module if package == "bestk" else package


def folder_edges(graph: Graph) -> dict[str, set[str]]:
    """The import graph between folders (:func:`folder_of`), type-only imports included."""
    edges: dict[str, set[str]] = {folder_of(m, graph): set() for m in graph.modules}
    for a, targets in all_edges(graph).items():
        for b in targets:
            if folder_of(a, graph) != folder_of(b, graph):
                edges[folder_of(a, graph)].add(folder_of(b, graph))
    return edges


def loops_of(edges: dict[str, set[str]]) -> list[str]:
    """Each cycle of ``edges`` as one loop ``a -> ... -> a`` (for messages)."""
    g = Graph.__new__(Graph)
    g.edges = edges
    out = []
    for comp in g.cycles():
        a, b = comp[0], comp[1]
        out.append(" -> ".join(g.path(a, b) + g.path(b, a)[1:]))
    return out


def test_module_graph_is_acyclic_with_type_only_imports(graph):
    """No two modules import each other, even where one side does so only for annotations
    (``if TYPE_CHECKING:``): a type-only cycle is still two modules that cannot be read,
    moved or tested one without the other."""
    assert loops_of(all_edges(graph)) == []


def test_folder_graph_is_acyclic(graph):
    """No two folders import each other (type-only imports included): the rooms of src/bestk
    stack in layers, folder by folder."""
    assert loops_of(folder_edges(graph)) == []


def test_the_folder_check_finds_folder_cycles(tmp_path):
    """Two folders whose modules import each other's, with no module cycle (``a.x -> b.y``,
    ``b.z -> a.w``), and a type-only module cycle: both are found."""
    pkg = tmp_path / "bestk"
    for folder, files in {"a": {"x": "import bestk.b.y\n", "w": ""},
                          "b": {"y": "", "z": "import bestk.a.w\n"},
                          "c": {"p": "import bestk.c.q\n",
                                "q": ("from typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    import bestk.c.p\n")}}.items():
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
        for name, text in files.items():
            (pkg / folder / f"{name}.py").write_text(text)
    (pkg / "__init__.py").write_text("")
    g = Graph(tmp_path)
    assert g.cycles() == []  # the imports that run have no cycle
    assert loops_of(all_edges(g)) == ["bestk.c.p -> bestk.c.q -> bestk.c.p"]
    assert loops_of(folder_edges(g)) == ["bestk.a -> bestk.b -> bestk.a"]


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


#: A fake two-layer source tree for the checks below: ``bestk.low`` may not import
#: ``bestk.high``.
FAKE_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("helpers", ("bestk",)), ("low", ("bestk.low",)), ("high", ("bestk.high",))]


def fake_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: source}`` under ``root/src/bestk`` (with the ``high`` package
    every case imports from); return ``root/src``."""
    base = {"__init__.py": '"""root"""\n', "low/__init__.py": '"""low"""\n',
            "high/__init__.py": '"""high"""\n', "high/mod.py": '"""high.mod"""\nThing = 1\n'}
    for rel, text in {**base, **files}.items():
        path = root / "src" / "bestk" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "src"


def test_the_layer_check_sees_an_upward_name_of_a_lazy_table(tmp_path):
    """A lower package exposing a higher layer's name lazily imports that layer when the name
    is used: the new checker flags it (and sees the cycle it may close); the checker that gave
    a package's ``__init__`` no edge for its own lazy names did not."""
    src = fake_tree(tmp_path, {"low/__init__.py": (
        '"""low"""\nfrom bestk._lazy import lazy_attributes\n\n'
        '_LAZY = {\n    "Thing": "bestk.high.mod",\n}\n'
        '__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, ["Thing"])\n')})
    new = upward_imports(Graph(src).imports, FAKE_LAYERS)
    assert new == ["bestk.low:5 (low) imports bestk.high (high) (lazy table)",
                   "bestk.low:5 (low) imports bestk.high.mod (high) (lazy table)"]
    old = Graph(src, lazy_tables=False, type_checking=False)
    assert upward_imports(old.imports, FAKE_LAYERS) == []


def test_the_root_package_lazy_table_is_exempt(tmp_path):
    """The root's lazy table (and its ``TYPE_CHECKING`` mirror of it) is the public facade over
    every layer: no upward import, whereas the same in a lower package is one."""
    facade = ('"""root"""\nfrom typing import TYPE_CHECKING\n\n'
              '_LAZY = {"Thing": "bestk.high.mod"}\n\n'
              'if TYPE_CHECKING:\n    from bestk.high.mod import Thing\n')
    src = fake_tree(tmp_path, {"__init__.py": facade})
    assert upward_imports(Graph(src).imports, FAKE_LAYERS) == []
    graph = Graph(src)
    assert graph.resolve("bestk.Thing") == "bestk.high.mod"  # still resolved for importers
    lowered = fake_tree(tmp_path / "b", {"low/__init__.py": facade.replace("root", "low")})
    assert "bestk.low:4 (low) imports bestk.high.mod (high) (lazy table)" in \
        upward_imports(Graph(lowered).imports, FAKE_LAYERS)


def test_the_layer_check_sees_an_upward_type_checking_import(tmp_path):
    """An annotation-only import of a higher layer is a dependency on it: the new checker
    flags it, leaves it out of the cycle check (it never runs), and the checker that skipped
    ``if TYPE_CHECKING:`` blocks did not see it."""
    src = fake_tree(tmp_path, {
        "low/a.py": ('"""a"""\nfrom __future__ import annotations\n\nimport typing\n'
                     'from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n'
                     '    from bestk.high.mod import Thing\n'
                     'if typing.TYPE_CHECKING:\n    import bestk.high\n\n\n'
                     'def f(x: Thing) -> Thing:\n    return x\n'),
        "high/mod.py": '"""high.mod"""\nfrom bestk.low import a\n\nThing = 1\n'})
    graph = Graph(src)
    assert upward_imports(graph.imports, FAKE_LAYERS) == [
        "bestk.low.a:10 (low) imports bestk.high (high) (TYPE_CHECKING)",
        "bestk.low.a:8 (low) imports bestk.high (high) (TYPE_CHECKING)",
        "bestk.low.a:8 (low) imports bestk.high.mod (high) (TYPE_CHECKING)"]
    assert graph.cycles() == []  # bestk.high.mod -> bestk.low.a runs; the way back does not
    old = Graph(src, lazy_tables=False, type_checking=False)
    assert upward_imports(old.imports, FAKE_LAYERS) == []
