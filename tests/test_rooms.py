"""The packages import one way: model, data and training know nothing of sweeps or reports; the package
that runs sweeps (headsweep.sweeps) never imports the one that reads results (headsweep.reports); the shared
formatting (headsweep.reporting) imports nothing else of headsweep. Read from the source, so a new import in
the wrong direction fails here before it makes a cycle."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import headsweep

SRC = Path(headsweep.__file__).parent

# package -> the headsweep packages it must never import
FORBIDDEN = {
    "model": ("sweeps", "reports", "analysis", "training"),
    "data": ("sweeps", "reports", "analysis"),
    "training": ("sweeps", "reports"),
    "sweeps": ("reports",),
    "reporting": ("model", "data", "training", "sweeps", "reports", "analysis", "store"),
}


def imported(path: Path) -> set[str]:
    """The headsweep modules a file imports, as dotted names below headsweep."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n.removeprefix("headsweep.") for n in names if n.startswith("headsweep.")}


def wrong_imports(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{p.relative_to(SRC)} imports headsweep.{n}"
        for p in sorted((SRC / package).rglob("*.py"))
        for n in sorted(imported(p))
        if n.split(".")[0] in forbidden
    ]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package):
    assert (SRC / package).is_dir(), f"no package headsweep.{package}"
    assert wrong_imports(package, FORBIDDEN[package]) == []


def test_the_check_sees_an_import_in_the_wrong_direction(tmp_path, monkeypatch):
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "bad.py").write_text(
        "from headsweep.reports.sweep.cells import Cell\nimport headsweep.store\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert wrong_imports("sweeps", ("reports",)) == [
        "sweeps/bad.py imports headsweep.reports.sweep.cells",
        "sweeps/bad.py imports headsweep.reports.sweep.cells.Cell",
    ]
