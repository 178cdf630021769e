"""The packages import one way: model, data and training know nothing of sweeps or reports; the package
that runs sweeps (headsweep.sweeps) never imports the one that reads results (headsweep.reports); the shared
formatting (headsweep.reporting) imports nothing else of headsweep. The reports read what runs wrote: they import
the store, a run's identity, the plotting and formatting helpers and themselves, and of the rest only the named
exceptions below, each with its reason. And every module of src/ is small (MAX_LINES). Read from the source, so
a new import in the wrong direction fails here before it makes a cycle."""

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


# -- what the reports may import ---------------------------------------------------------------------------------

# headsweep.reports imports these, and what lies below them, freely
REPORTS_MAY_IMPORT = (
    "reports",  # itself
    "store",  # what runs wrote: the records, the views, the packed files, a run's references
    "identity",  # a run's names, its cell, its heads as used, what a cell varies
    "reporting",  # markdown, html pages, plots, statistics: formatting with no headsweep import
    "config",  # where conf/ and sweeps/ are, compose(): a path or a default, no state
    "machine",  # the machine label a run recorded, and its class
    "sizes",  # arithmetic on a run's config: d_k, FLOPs, the config W&B compares
    "data.files",  # atomic_write: a page killed mid-write leaves the previous one whole
)

# Named exceptions: headsweep module -> (the names the reports import from it, why)
REPORTS_EXCEPTIONS = {
    "sweeps.table3": (
        {"ROWS", "SEEDS", "BUDGET", "CPU_TAIL", "chosen_gain", "grid_words"},
        "Table 3's protocol constants (its rows' sweeps, seeds, budget, start, rate grid, a CPU class's tail): the "
        "page states the protocol `make table3` ran, from the one place it is declared",
    ),
    "sweeps.paper": ({"table3", "INT_COLUMNS", "FLOAT_COLUMNS"}, "the paper's published Table 3 (a CSV reader)"),
    "sweeps.specs": (
        {"SweepError", "sweep_names", "available", "load_spec", "spec_seeds", "spec_source", "split_parameters"},
        "reading sweeps/*.yaml: the questions name sweeps, the page says what a spec asked and what is missing",
    ),
    "sweeps.lr_select": (
        {"GRID_PHASE", "LR_KEY", "SELECT_ON", "SELECT_WHAT", "TIE", "choose", "lr_text"},
        "the rule that chose each cell's rate (LR_GRID), re-applied on the stored grid runs to show it",
    ),
    "sweeps.reuse": ({"finished_runs"}, "the grid runs a sweep's view holds, found as the rate choice found them"),
    "sweeps.init_check": (
        {"TOLERANCE", "UPDATE_MARGIN", "init_check_table", "run_check", "update_check_table"},
        "the init and update checks' tables and flags: the one rule `make sweep` prints and the page shows",
    ),
    "sweeps.budget_plan": ({"BRANCH", "TRUNK", "DEFAULT_SHAPE"}, "the tags of `make budgets` runs, to find them"),
    "sweeps.budgets": ({"NOTE"}, "the file `make budgets` writes its plan into, to read it"),
    "sweeps.cooldown": (
        {"branch_runs", "compare_shapes"},
        "the cooldown shapes' paired comparison `make budgets` prints, shown on the budgets page as printed",
    ),
    "data": (
        {"DataError", "TranslationDataModule", "read_lines"},
        "reading the test set and hypotheses as the trainer did: lengths bins sentences by their subwords",
    ),
    "model": ({"TransformerConfig"}, "the protocol section names the model's defaults"),
    "analysis.fixed": ({"fixed_vs_learned_lines", "pattern_of"}, "compare: the head analyses' own summaries"),
    "analysis.importance": ({"KIND_NAMES"}, "compare: the names of the attention kinds"),
}


def imported_names(source: str) -> list[tuple[str, str]]:
    """(headsweep module below headsweep, name) for each name a source imports from headsweep; ("x.y", "")
    for `import headsweep.x.y`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name.removeprefix("headsweep."), "") for a in node.names if a.name.startswith("headsweep.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "headsweep":  # from headsweep import store
                found += [(a.name, "") for a in node.names]
            elif node.module.startswith("headsweep."):
                found += [(node.module.removeprefix("headsweep."), a.name) for a in node.names]
    return found


def within(module: str, rooms) -> bool:
    return any(module == r or module.startswith(r + ".") for r in rooms)


def forbidden_in_reports(source: str) -> list[str]:
    """The imports of a reports module outside REPORTS_MAY_IMPORT and REPORTS_EXCEPTIONS."""
    bad = []
    for module, name in imported_names(source):
        if within(module, REPORTS_MAY_IMPORT):
            continue
        allowed = REPORTS_EXCEPTIONS.get(module, (set(), ""))[0]
        if name not in allowed:
            bad.append(f"headsweep.{module}" + (f".{name}" if name else ""))
    return bad


def test_reports_import_only_the_store_identity_helpers_and_named_exceptions():
    bad = {
        str(p.relative_to(SRC)): found
        for p in sorted((SRC / "reports").rglob("*.py"))
        if (found := forbidden_in_reports(p.read_text()))
    }
    assert bad == {}, "import it through the store or headsweep.identity, or name it in REPORTS_EXCEPTIONS with why"


def test_every_named_exception_is_still_used():
    """An exception nobody needs any more is removed, so that the list stays the reports' real debts."""
    used = {(m, n) for p in (SRC / "reports").rglob("*.py") for m, n in imported_names(p.read_text())}
    stale = [f"{m}.{n}" for m, (names, _) in REPORTS_EXCEPTIONS.items() for n in names if (m, n) not in used]
    assert stale == []


def test_the_reports_check_sees_a_new_forbidden_import():
    assert forbidden_in_reports("from headsweep.store import RUNS\nfrom headsweep.identity import run_name\n") == []
    assert forbidden_in_reports("from headsweep.sweeps.table3 import ROWS\n") == []  # a named exception
    assert forbidden_in_reports(
        "from headsweep.sweeps.table3 import ROWS, main\n"  # another name of an excepted module
        "from headsweep.training.runs import RESULTS\n"
        "import headsweep.sweeps.planning\n"
        "from headsweep import training\n"
        "from headsweep.data.joining import join_lines\n"  # data.files is allowed, not the rest of data
    ) == [
        "headsweep.sweeps.table3.main",
        "headsweep.training.runs.RESULTS",
        "headsweep.sweeps.planning",
        "headsweep.training",
        "headsweep.data.joining.join_lines",
    ]


# -- small modules -------------------------------------------------------------------------------------------

MAX_LINES = 400  # the house rule: small plain modules


def long_modules(src: Path, limit: int = MAX_LINES) -> list[str]:
    return [
        f"{p.relative_to(src)}: {n} lines"
        for p in sorted(src.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > limit
    ]


def test_every_module_of_src_is_at_most_400_lines():
    assert long_modules(SRC) == [], f"split it along a natural seam (<= {MAX_LINES} lines a module)"


def test_the_length_check_sees_a_long_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path) == [f"pkg/long.py: {MAX_LINES + 1} lines"]


def test_a_pages_footer_names_its_module_once():
    from headsweep.reporting.markdown import with_footer

    md = with_footer("# A page\n\ntext\n", "headsweep.reports.pages.explain")
    assert md == "# A page\n\ntext\n\n---\n\n*written by `headsweep.reports.pages.explain`*\n"
    assert with_footer(md, "headsweep.reports.pages.lengths") == md.replace("explain", "lengths")  # replaced, once
