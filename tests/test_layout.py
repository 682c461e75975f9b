"""The package layout's rules, read from the source: who may import whom, and sizes.

``etl.core`` is what both jobs share, so it imports neither job package; the job
packages never import each other; ``reader`` is what training code installs and
imports, so it depends on nothing of the ETL side. Small modules and functions keep
one concept each readable in one sitting.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
MAX_FUNCTION_BODY_LINES = 60

# package → the top-level-or-sub packages it must not import.
FORBIDDEN = {
    "etl/core": ("etl.images", "etl.timeseries", "pipelines"),
    "etl/images": ("etl.timeseries", "pipelines"),
    "etl/timeseries": ("etl.images", "pipelines"),
    "reader": ("etl", "pipelines"),
}


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
        "etl.images.codec", "etl.core", "etl.core.hashing", "pipelines", "pipelines.common"}


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


def test_etl_modules_stay_small():
    long_modules = {str(path.relative_to(REPO)): length for path in _modules("etl")
                    if (length := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long_modules, long_modules


def test_etl_function_bodies_stay_short():
    long_functions = {
        f"{path.relative_to(REPO)}:{node.lineno} {node.name}": body_lines(node)
        for path in _modules("etl") for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and body_lines(node) > MAX_FUNCTION_BODY_LINES}
    assert not long_functions, long_functions
