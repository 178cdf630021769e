"""The modules of src/ import downwards only: every module belongs to a room of a layer (LAYERS, lowest
first), imports only rooms of lower layers or its own room, and no chain of imports (function-level ones
included: a lazy import still ties two modules together) comes back to where it started. Read from the
source with `ast`, as tests/test_rooms.py does, so a new import in the wrong direction fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import headsweep

SRC = Path(headsweep.__file__).parent

# Layers, lowest first; each a tuple of rooms (a module or package below headsweep). A module is in the room
# with the longest matching name: analysis.settings (a config schema the training schema reads) sits below
# the rest of analysis, which runs on a trained model.
LAYERS = (
    ("config", "machine", "schema", "reporting"),  # constants, settings types, formatting: no headsweep
    ("model", "data", "analysis.settings"),  # plain PyTorch and the corpus
    # a config's sizes; the heads' similarity measures (model only), which a training callback logs and make
    # analyze reports
    ("sizes", "analysis.redundancy"),
    ("identity",),  # a run's names, cell and heads as used: training, sweeps, the store and reports share it
    ("store",),  # the run record and the store
    ("training",),  # one run
    ("analysis",),  # a trained model's heads
    ("sweeps",),  # many runs
    ("reports", "bench"),  # reading results; timing
    ("train", "__init__"),  # python -m headsweep.train, the entry point
)
RANK = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def room_of(module: str) -> str:
    """The room of a module, e.g. store.record -> store; KeyError (named in the test) if none."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANK:
            return ".".join(parts[:n])
    raise KeyError(f"headsweep.{module} is in no room of LAYERS: add it to a layer")


def imports(path: Path, src: Path, modules: set[str]) -> set[str]:
    """The headsweep modules a file imports (below headsweep): `from a import b` is a.b where that is a module."""
    own = module_name(path, src).split(".")
    package = own if path.name == "__init__.py" else own[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name.removeprefix("headsweep.") for a in node.names if a.name.startswith("headsweep.")]
            found |= {n for n in names if n in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from its package, up level - 1
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            elif node.module and (node.module == "headsweep" or node.module.startswith("headsweep.")):
                base = node.module.removeprefix("headsweep").removeprefix(".")
            else:
                continue
            for a in node.names:
                full = f"{base}.{a.name}" if base else a.name
                found |= {full} if full in modules else {base} if base in modules else set()
    return found - {module_name(path, src)}


def import_graph(src: Path) -> dict[str, set[str]]:
    files = {module_name(p, src): p for p in sorted(src.rglob("*.py"))}
    return {m: imports(p, src, set(files)) for m, p in files.items()}


def upward(graph: dict[str, set[str]]) -> list[str]:
    """`a imports b` for every import of another room that is not in a lower layer."""
    return [
        f"headsweep.{m} imports headsweep.{n} ({room_of(m)} -> {room_of(n)})"
        for m, deps in sorted(graph.items())
        for n in sorted(deps)
        if room_of(n) != room_of(m) and RANK[room_of(n)] >= RANK[room_of(m)]
    ]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (strongly connected components of more than one module, or a module importing itself)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_is_in_a_room():
    missing = []
    for m in import_graph(SRC):
        try:
            room_of(m)
        except KeyError as e:
            missing.append(str(e))
    assert missing == []


def test_no_import_circle():
    assert circles(import_graph(SRC)) == []


def test_no_module_imports_one_above_it():
    assert upward(import_graph(SRC)) == []


@pytest.fixture
def bad_tree(tmp_path):
    """A small tree with one circle (store <-> store_cli, lazily) and one upward import (bench -> reports)."""
    for name, text in {
        "store/__init__.py": "",
        "store/record.py": "from headsweep.store.cli import main\n",
        "store/cli.py": "def main():\n    from headsweep.store import record\n",
        "reports/__init__.py": "",
        "reports/table.py": "OUT = 'x.json'\n",
        "bench/__init__.py": "",
        "bench/speed.py": "from headsweep.reports.table import OUT\nfrom . import other\n",
        "bench/other.py": "from ..store import record\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_checks_see_a_circle_and_an_upward_import(bad_tree):
    graph = import_graph(bad_tree)
    assert graph["bench.speed"] == {"reports.table", "bench.other"}
    assert graph["bench.other"] == {"store.record"}  # relative imports resolved
    assert circles(graph) == [["store.cli", "store.record"]]
    assert upward(graph) == ["headsweep.bench.speed imports headsweep.reports.table (bench -> reports)"]
