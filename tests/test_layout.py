"""The package layout's rules, read from the source: who may import whom, and sizes.

The layers run reader < etl < pipelines < scripts: a module imports only its own
layer and those below, so training code installs ``reader`` alone, the jobs
(``pipelines``) stand on the library (``etl``), and what measures or deploys
(``scripts``) stands on all. Inside ``etl``, ``etl.core`` is what both jobs share, so
it imports neither job package, and the job packages never import each other. No
module imports itself back through others, and no sub-package does either: a package
can then be read bottom-up. What training code reads without TensorFlow never reaches
it, at any depth, not even inside a function. Small modules, small packages, and
short functions keep one concept each readable in one sitting, and so does a short
README.md: the two commands first, each detail one link away in docs/.

The graph is what ``ast`` finds in every ``.py`` under the four layers, imports inside
functions included (``import_graph``); the tests at the top plant each violation in a
small tree of their own and check that it is reported.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
MAX_PACKAGE_LINES = 4000
MAX_README_LINES = 250
MAX_FUNCTION_BODY_LINES = 60

LAYERS = ("reader", "etl", "pipelines", "scripts")
# Packages and the packages of the same layer they must not import.
FORBIDDEN = {
    "etl.core": ("etl.images", "etl.timeseries", "etl.testing"),
    "etl.images": ("etl.timeseries", "etl.testing"),
    "etl.timeseries": ("etl.images", "etl.testing"),
    "pipelines": ("pipelines.testing",),
}
HEAVY = ("tensorflow", "tensorflow_transform", "keras", "tf_keras")
# Modules that never import TensorFlow, at any depth, not even inside a function, with
# every module under them: the TF-free reader and what it reads (the format,
# statistics, the report).
TF_FREE = ("reader.format", "reader.records", "reader.stats", "reader.report", "reader.quiet")
# Modules whose import does not start TensorFlow: ``import reader``, ``import
# pipelines``, and what ``python -m pipelines.images --help`` loads before it answers.
TF_FREE_ON_IMPORT = ("reader", "pipelines", "pipelines.arguments", "pipelines.command")


def _modules(folder: str) -> list[pathlib.Path]:
    return sorted((REPO / folder).rglob("*.py"))


def imported_modules(path: pathlib.Path) -> set[str]:
    """Every absolute module name ``path`` imports, at any depth of the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _owner(name: str, modules: Iterable[str]) -> str | None:
    """The module of ours that ``name`` (a module, or a name in one) is, or lies in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: pathlib.Path, on_import: bool = False
             ) -> set[tuple[str, tuple[str, ...]]]:
    """``(module, names)`` of each import in ``path``: ``import a.b`` is
    ``("a.b", ())``, ``from a import b, c`` is ``("a", ("b", "c"))``. At any depth of
    the file, or with ``on_import`` only what runs when the module is imported (not
    inside a function); never what ``if TYPE_CHECKING:`` guards, which never runs."""
    found = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found.update((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        elif on_import and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                             ast.Lambda)):
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def import_graph(root: pathlib.Path, layers: Iterable[str] = LAYERS, on_import: bool = False
                 ) -> dict[str, set[str]]:
    """Module → the modules of ours and the third-party top-level packages it imports.
    ``from a.b import c`` is an arrow to ``a.b.c`` when that is a module (a package's
    face that hands on its modules' names is then no stop on the way), else to
    ``a.b``. ``on_import``: only the imports that run when a module is imported."""
    paths = {module_name(root, p): p for layer in layers
             for p in sorted((root / layer).rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        arrows = set()
        for module, names in _imports(path, on_import):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in paths]
            if len(targets) < len(names) or not names:
                owner = _owner(module, paths)
                targets.append(owner if owner else module.split(".")[0])
            arrows.update(targets)
        graph[name] = arrows - {name}
    return graph


def _ours(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    return {m: {d for d in deps if d in graph} for m, deps in graph.items()}


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def package_of(module: str, graph: Mapping[str, Any], root: pathlib.Path = REPO) -> str:
    """The package a module lies in (a package's ``__init__`` is its package)."""
    path = root / module.replace(".", "/")
    return module if path.is_dir() else module.rpartition(".")[0]


def package_graph(graph: Mapping[str, set[str]], root: pathlib.Path = REPO
                  ) -> dict[str, set[str]]:
    """Package → the packages its modules import, an ancestor or descendant not
    counted (a package's face hands on its children's names)."""
    packages: dict[str, set[str]] = {}
    for module, deps in _ours(graph).items():
        here = package_of(module, graph, root)
        for dep in deps:
            there = package_of(dep, graph, root)
            if not (here == there or here.startswith(there + ".")
                    or there.startswith(here + ".")):
                packages.setdefault(here, set()).add(there)
    return packages


def layer_violations(graph: Mapping[str, set[str]]) -> set[str]:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return {f"{m} imports {d}" for m, deps in _ours(graph).items() for d in deps
            if rank[d.split(".")[0]] > rank[m.split(".")[0]]}


def forbidden_imports(graph: Mapping[str, set[str]]) -> set[str]:
    return {f"{m} imports {d}" for m, deps in _ours(graph).items() for d in deps
            for package, banned in FORBIDDEN.items() if _is_under(m, package)
            for b in banned if _is_under(d, b) and not _is_under(m, b)}


def reaches_heavy(graph: Mapping[str, set[str]], start: str) -> list[str]:
    """The shortest import chain from ``start`` to TensorFlow, or [] if none."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for dep in sorted(graph.get(node, ())):
            if dep in HEAVY:
                return [*paths[node], dep]
            if dep in graph and dep not in paths:
                paths[dep] = [*paths[node], dep]
                queue.append(dep)
    return []


def _is_under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the function's end."""
    body = function.body
    has_docstring = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                     and isinstance(body[0].value.value, str))
    first = body[1] if has_docstring and len(body) > 1 else body[0]
    return function.end_lineno - first.lineno + 1


# --- the checks, each shown to catch a planted violation -----------------------------------

def _plant(root: pathlib.Path, files: Mapping[str, str]) -> dict[str, set[str]]:
    for relpath, text in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(root)


CLEAN_TREE = {"reader/__init__.py": "", "reader/format/__init__.py": "",
              "reader/format/contract.py": "import json\n",
              "etl/__init__.py": "", "etl/core/__init__.py": "",
              "etl/core/a.py": "from reader.format import contract\n",
              "etl/core/b.py": "def f():\n    from etl.core import a\n",
              "pipelines/__init__.py": "", "scripts/__init__.py": ""}


def test_imported_modules_sees_every_import_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import etl.images.codec\nfrom etl.core import hashing\n"
                      "def f():\n    from pipelines import common\n")
    assert imported_modules(source) == {
        "etl.images.codec", "etl.core", "etl.core.hashing", "pipelines", "pipelines.common"}


def test_a_clean_tree_has_no_violation(tmp_path):
    graph = _plant(tmp_path, CLEAN_TREE)
    assert graph["etl.core.b"] == {"etl.core.a"}
    assert graph["etl.core.a"] == {"reader.format.contract"}
    assert not layer_violations(graph) and not forbidden_imports(graph)
    assert circles(graph) == [] and circles(package_graph(graph, tmp_path)) == []
    assert reaches_heavy(graph, "reader.format.contract") == []


def test_a_planted_upward_import_is_found(tmp_path):
    graph = _plant(tmp_path, {**CLEAN_TREE, "reader/format/contract.py":
                              "def f():\n    from etl.core import a\n"})
    assert layer_violations(graph) == {"reader.format.contract imports etl.core.a"}


def test_a_planted_circle_is_found_inside_a_function_too(tmp_path):
    graph = _plant(tmp_path, {**CLEAN_TREE, "etl/core/a.py": "from etl.core import b\n"})
    assert circles(graph) == [["etl.core.a", "etl.core.b"]]


def test_a_planted_circle_between_packages_is_found(tmp_path):
    graph = _plant(tmp_path, {**CLEAN_TREE, "etl/core/x/__init__.py": "",
                              "etl/core/x/m.py": "from etl.core.y import n\n",
                              "etl/core/x/p.py": "", "etl/core/y/__init__.py": "",
                              "etl/core/y/n.py": "",
                              "etl/core/y/o.py": "from etl.core.x import p\n"})
    assert circles(graph) == []  # m -> n and o -> p: no module comes back to itself
    assert circles(package_graph(graph, tmp_path)) == [["etl.core.x", "etl.core.y"]]


def test_a_planted_import_on_import_or_behind_type_checking_is_told_apart(tmp_path):
    graph = _plant(tmp_path, {**CLEAN_TREE, "reader/__init__.py":
                              "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    import tensorflow\ndef f():\n    import keras\n"})
    assert reaches_heavy(graph, "reader") == ["reader", "keras"]
    assert reaches_heavy(import_graph(tmp_path, on_import=True), "reader") == []
    (tmp_path / "reader/__init__.py").write_text("import tensorflow\n")
    assert reaches_heavy(import_graph(tmp_path, on_import=True), "reader") == [
        "reader", "tensorflow"]


def test_a_planted_tensorflow_import_is_found_at_any_depth(tmp_path):
    graph = _plant(tmp_path, {**CLEAN_TREE, "etl/core/a.py": "import json\n",
                              "reader/format/contract.py": "from reader.format import deep\n",
                              "reader/format/deep.py": "def f():\n    import tensorflow as tf\n"})
    assert reaches_heavy(graph, "reader.format.contract") == [
        "reader.format.contract", "reader.format.deep", "tensorflow"]


def test_a_planted_forbidden_import_is_found(tmp_path):
    graph = _plant(tmp_path, {**CLEAN_TREE, "etl/images/__init__.py": "",
                              "etl/images/m.py": "", "etl/core/b.py": "import etl.images.m\n"})
    assert forbidden_imports(graph) == {"etl.core.b imports etl.images.m"}


def test_body_lines_skips_the_docstring():
    function = ast.parse('def f():\n    """Doc."""\n    a = 1\n    return a\n').body[0]
    assert body_lines(function) == 2


# --- the code as it is ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(REPO)


def test_no_module_imports_a_higher_layer(graph):
    assert not layer_violations(graph), sorted(layer_violations(graph))


def test_packages_import_only_what_the_layout_allows(graph):
    assert not forbidden_imports(graph), sorted(forbidden_imports(graph))


def test_no_import_circle_between_modules(graph):
    assert circles(_ours(graph)) == []


def test_no_import_circle_between_packages(graph):
    assert circles(package_graph(graph)) == []


@pytest.mark.parametrize("package", TF_FREE)
def test_tf_free_modules_never_reach_tensorflow(graph, package):
    modules = [m for m in graph if _is_under(m, package)]
    assert modules, package
    chains = [chain for m in modules if (chain := reaches_heavy(graph, m))]
    assert not chains, chains


@pytest.fixture(scope="module")
def graph_on_import() -> dict[str, set[str]]:
    return import_graph(REPO, on_import=True)


@pytest.mark.parametrize("module", TF_FREE_ON_IMPORT)
def test_importing_these_modules_does_not_start_tensorflow(graph_on_import, module):
    assert module in graph_on_import, module
    assert reaches_heavy(graph_on_import, module) == []


def _package_folders() -> list[pathlib.Path]:
    return sorted(init.parent for layer in ("etl", "reader", "pipelines")
                  for init in (REPO / layer).rglob("__init__.py"))


@pytest.mark.parametrize("folder", _package_folders(), ids=lambda p: str(p.relative_to(REPO)))
def test_each_package_states_its_contract_naming_every_module(folder):
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    children = sorted({p.stem for p in folder.glob("*.py")} - {"__init__", "__main__"}
                      | {p.name for p in folder.iterdir() if (p / "__init__.py").exists()})
    unnamed = [c for c in children if not re.search(rf"``{c}``|``{c}/``|\b{c}\b", docstring)]
    assert docstring and not unnamed, (str(folder.relative_to(REPO)), unnamed)


@pytest.mark.parametrize("folder", _package_folders(), ids=lambda p: str(p.relative_to(REPO)))
def test_packages_stay_small(folder):
    lines = sum(len(p.read_text().splitlines()) for p in folder.glob("*.py"))
    assert lines <= MAX_PACKAGE_LINES, f"{folder.relative_to(REPO)}: {lines} lines"


def test_python_sees_the_same_packages_as_setup_py():
    from setuptools import find_packages
    found = set(find_packages(str(REPO), include=["etl", "etl.*", "reader", "reader.*",
                                                  "pipelines", "pipelines.*"]))
    assert found == {module_name(REPO, f / "__init__.py") for f in _package_folders()}


def test_etl_modules_stay_small():
    long_modules = {str(path.relative_to(REPO)): length for path in _modules("etl")
                    if (length := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long_modules, long_modules


def test_readme_stays_short():
    length = len((REPO / "README.md").read_text().splitlines())
    assert length <= MAX_README_LINES, f"README.md has {length} lines"


# scripts/ holds what a user runs; what measures lives in scripts/benchmarks/.
MAX_SCRIPTS = 12
MEASURING_PREFIXES = ("measure_", "profile_", "benchmark_", "bench_", "check_")


def test_scripts_top_level_is_what_a_user_runs():
    files = sorted(p.name for p in (REPO / "scripts").iterdir() if p.is_file())
    assert len(files) <= MAX_SCRIPTS, files
    assert not [f for f in files if f.startswith(MEASURING_PREFIXES)], files


def test_etl_function_bodies_stay_short():
    long_functions = {
        f"{path.relative_to(REPO)}:{node.lineno} {node.name}": body_lines(node)
        for path in _modules("etl") for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and body_lines(node) > MAX_FUNCTION_BODY_LINES}
    assert not long_functions, long_functions


# --- one seam to storage ------------------------------------------------------------------

# The storage seam: the only modules of etl/ and pipelines/ that touch files.
STORAGE_MODULES = ("etl/core/io/storage.py", "etl/core/io/gcs.py", "etl/core/io/local_tree.py",
                   "etl/core/io/conditional_writes.py")
# Calls and imports that read, write, list or delete files.
FILE_CALLS = frozenset({
    "open", "os.walk", "os.listdir", "os.scandir", "os.remove", "os.unlink", "os.rename",
    "os.replace", "os.makedirs", "os.mkdir", "os.rmdir", "os.stat", "os.lstat",
    "os.path.exists", "os.path.isdir", "os.path.isfile", "os.path.islink",
    "os.path.getsize", "os.path.getmtime", "os.path.realpath"})
FILE_MODULES = ("shutil", "glob", "pathlib", "apache_beam.io.filesystems",
                "apache_beam.io.filesystem", "apache_beam.io.gcp", "apache_beam.io.fileio",
                "google.cloud.storage")
# Reads that are not job data, with why.
NOT_JOB_DATA = {
    ("etl/core/run/fingerprint.py", "open"): "hashes this package's own source files",
    ("etl/core/run/fingerprint.py", "os.walk"): "lists this package's own source files",
    ("pipelines/quiet_start.py", "open"): "opens /dev/null to silence a library",
}


def _dotted(node: ast.AST) -> str | None:
    """``os.path.exists`` for the expression ``os.path.exists``; None for others."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def file_access(path: pathlib.Path) -> set[str]:
    """The file calls (``FILE_CALLS``, any ``tf.io.gfile`` call) and file modules
    (``FILE_MODULES``) that ``path`` uses."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in FILE_CALLS or (name or "").startswith("tf.io.gfile."):
                found.add(name)
    found.update(name for name in imported_modules(path)
                 if any(_is_under(name, module) for module in FILE_MODULES))
    return found


def test_file_access_sees_calls_and_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import shutil\nimport os\nimport tensorflow as tf\n"
                      "def f(p):\n    tf.io.gfile.exists(p)\n    os.path.join(p, 'x')\n"
                      "    with open(p) as f:\n        return os.path.isdir(p)\n")
    assert file_access(source) == {"shutil", "tf.io.gfile.exists", "open", "os.path.isdir"}


def test_only_the_storage_seam_touches_files():
    offending = {
        f"{relative} uses {name}"
        for folder in ("etl", "pipelines") for path in _modules(folder)
        if (relative := str(path.relative_to(REPO))) not in STORAGE_MODULES
        for name in file_access(path) if (relative, name) not in NOT_JOB_DATA}
    assert not offending, sorted(offending)


# --- declared dependencies ---------------------------------------------------------------

def _setup_constant(name: str) -> Any:
    """A constant of setup.py (INSTALL_REQUIRES, EXTRAS_REQUIRE), evaluated from its
    source with the constants before it: importing it would run setup()."""
    tree = ast.parse((REPO / "setup.py").read_text())
    constants: dict[str, Any] = {}  # earlier constants a later one may name
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = eval(compile(ast.Expression(node.value), "setup.py", "eval"),
                         {"__builtins__": {}}, constants)
            constants[node.targets[0].id] = value
            if node.targets[0].id == name:
                return value
    raise AssertionError(f"setup.py has no {name}")


def _closure(requirements: list[str]) -> set[str]:
    """The installed distributions ``requirements`` bring, transitively (normalized
    names), extras and environment markers evaluated."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[tuple[str, tuple[str, ...]]] = set()
    pending = [Requirement(r) for r in requirements]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        key = (name, tuple(sorted(requirement.extras)))
        if key in found:
            continue
        found.add(key)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # Not installed here (another platform's marker).
        for line in requires:
            child = Requirement(line)
            environments = [{"extra": extra} for extra in requirement.extras] or [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(env) for env in environments):
                pending.append(child)
    return {name for name, _ in found}


# Imports a module makes only for an optional feature, behind an ImportError that
# says what to install, and the setup.py extra that installs it.
OPTIONAL_IMPORTS = {("reader/preview.py", "matplotlib"): "preview",
                    ("reader/export_tfds.py", "tensorflow_datasets"): "tfds",
                    ("etl/testing.py", "sklearn"): "testing"}


def test_every_third_party_module_our_packages_import_is_a_declared_dependency():
    from importlib import metadata

    from packaging.utils import canonicalize_name

    extras = _setup_constant("EXTRAS_REQUIRE")
    declared = _closure(_setup_constant("INSTALL_REQUIRES"))
    providers = metadata.packages_distributions()
    undeclared = set()
    for folder in ("etl", "pipelines", "reader"):
        for path in _modules(folder):
            for name in imported_modules(path):
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("etl", "pipelines", "reader"):
                    continue
                dists = {canonicalize_name(d) for d in providers.get(top, [])}
                extra = OPTIONAL_IMPORTS.get((str(path.relative_to(REPO)), top))
                if dists & (_closure(extras[extra]) if extra else declared):
                    continue
                undeclared.add(f"{path.relative_to(REPO)} imports {top} "
                               f"(from {sorted(dists) or 'no installed distribution'})")
    assert not undeclared, sorted(undeclared)
