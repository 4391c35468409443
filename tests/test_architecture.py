"""The shape the docs promise, checked: modules of one job (<= 300 lines), classes under 200,
functions that fit on a screen (<= 50), in the package; generated code apart."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kae_deviceplugin"
MODULE_LINES, CLASS_LINES, FUNCTION_LINES = 300, 200, 50


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_generated" not in p.parts)


def _oversized(path: Path) -> list[str]:
    text = path.read_text()
    found = []
    if (lines := len(text.splitlines())) > MODULE_LINES:
        found.append(f"module {lines} lines")
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if isinstance(node, ast.ClassDef) and length > CLASS_LINES:
            found.append(f"class {node.name} {length} lines")
        if not isinstance(node, ast.ClassDef) and length > FUNCTION_LINES:
            found.append(f"function {node.name} {length} lines")
    return found


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_class_or_function_over_its_size(path: Path) -> None:
    """Each package module, class and function stays within the limits of docs/architecture.md."""
    assert _oversized(path) == []


def test_the_size_check_can_fail(tmp_path: Path) -> None:
    """A function of 51 lines is reported: the check above is not vacuous."""
    body = "\n".join(f"    x{i} = {i}" for i in range(50))
    sample = tmp_path / "sample.py"
    sample.write_text(f"def long() -> None:\n{body}\n")
    assert _oversized(sample) == ["function long 51 lines"]
