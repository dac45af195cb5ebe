"""The package structure holds: each package imports only those below it (the contracts in
pyproject.toml's [tool.importlinter], checked by import-linter), and no module imports
itself back through others, function-level imports included.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "registry", "engine_adapter", "gateway", "control_plane", "builtin_engine")


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "broken" in done.stdout and "0 broken" in done.stdout


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """A cycle of the module graph as [its modules, sorted], or [] when there is none
    (graphlib's topological sort names the first cycle it meets)."""
    order = TopologicalSorter({m: graph.find_modules_directly_imported_by(m) for m in graph.modules})
    try:
        order.prepare()
    except CycleError as exc:
        return [sorted(set(exc.args[1]))]
    return []


def test_no_module_imports_itself_back():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    cycles = import_cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.y", imported="a.z")
    assert import_cycles(graph) == [["a.x", "a.y"]]
