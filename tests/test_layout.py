"""The package layout's rules, read from the source: who may import whom, and sizes.

``etl.core`` is what both jobs share, so it imports neither job package; the job
packages never import each other; ``reader`` is what training code installs and
imports, so it depends on nothing of the ETL side; of ``etl``, only ``etl.testing``
(which runs the jobs for users' tests) imports ``pipelines``. Small modules and
functions keep one concept each readable in one sitting, and so does a short README.md:
the two commands first, each detail one link away in docs/.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Any

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
MAX_README_LINES = 250
MAX_FUNCTION_BODY_LINES = 60

# package → the top-level-or-sub packages it must not import.
FORBIDDEN = {
    "etl/core": ("etl.images", "etl.timeseries", "pipelines"),
    "etl/images": ("etl.timeseries", "pipelines"),
    "etl/timeseries": ("etl.images", "pipelines"),
    "pipelines": ("etl.testing",),
    "reader": ("etl", "pipelines"),
}
# The one module of etl/ that imports pipelines/: etl.testing runs the jobs for users'
# tests (the jobs themselves never import it).
PIPELINES_USERS_IN_ETL = ("etl/testing.py",)


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


def _is_under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the function's end."""
    body = function.body
    has_docstring = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                     and isinstance(body[0].value.value, str))
    first = body[1] if has_docstring and len(body) > 1 else body[0]
    return function.end_lineno - first.lineno + 1


def test_imported_modules_sees_every_import_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import etl.images.codec\nfrom etl.core import hashing\n"
                      "def f():\n    from pipelines import common\n")
    assert imported_modules(source) == {
        "etl.images.codec", "etl.core", "etl.core.shards.hashing", "pipelines", "pipelines.common"}


def test_body_lines_skips_the_docstring():
    function = ast.parse('def f():\n    """Doc."""\n    a = 1\n    return a\n').body[0]
    assert body_lines(function) == 2


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_packages_import_only_what_the_layout_allows(folder):
    offending = {
        f"{path.relative_to(REPO)} imports {name}"
        for path in _modules(folder) for name in imported_modules(path)
        if any(_is_under(name, package) for package in FORBIDDEN[folder])}
    assert not offending, sorted(offending)


def test_only_etl_testing_imports_pipelines_from_etl():
    offending = {
        f"{path.relative_to(REPO)} imports {name}" for path in _modules("etl")
        if str(path.relative_to(REPO)) not in PIPELINES_USERS_IN_ETL
        for name in imported_modules(path) if _is_under(name, "pipelines")}
    assert not offending, sorted(offending)


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
    import sys
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
