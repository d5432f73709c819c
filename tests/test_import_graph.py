"""The packages form layers: each imports only from the layers below it, so there is no
cycle between them (an import inside a function counts as much as one at the top).

    core (the clawbed/ folder's modules) < traces < emulator < claw < replay.network
      < replay < dashboards < orchestrator (suites, store, regression) < the CLI (clawbed.cli)

``replay/network/`` (the wired topology and the traffic beside a replay) is the lowest part of
the replay: the rest of the replay builds its network from it and the orchestrator reaches it
from above, while it imports nothing from the rest of the replay.

Besides the declared order, the packages themselves (the project's parts: each top-level
folder, a nested package counting as part of its folder, and ``clawbed.cli`` apart from the
core it sits in) are checked over the imports found: no package imports a package that
imports it, directly or around a longer loop.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from clawbed.paths import REPO_ROOT

LAYERS = ("core", "traces", "emulator", "claw", "replay.network", "replay", "dashboards", "orchestrator", "cli")
PACKAGE_DIRS = ("traces", "emulator", "claw", "replay", "dashboards", "orchestrator")


def layer_of_module(dotted: str) -> str:
    """The layer of module ``clawbed.<...>``."""
    parts = dotted.split(".")[1:]
    if not parts:
        return "core"
    if parts[0] == "cli":
        return "cli"
    if parts[:2] == ["replay", "network"]:
        return "replay.network"
    return parts[0] if parts[0] in PACKAGE_DIRS else "core"


def package_of_layer(layer: str) -> str:
    """The package (the project's part) a layer belongs to: a sublayer counts as its folder."""
    return layer.split(".")[0]


def layer_of_file(path: Path) -> str:
    rel = path.relative_to(REPO_ROOT).with_suffix("")
    dotted = "clawbed." + ".".join(p for p in rel.parts if p != "__init__")
    if rel.parts[0] == "clawbed":
        dotted = "clawbed." + ".".join(rel.parts[1:])
    return layer_of_module(dotted)


def imports_by_layer() -> dict[tuple[str, str], list[str]]:
    """(from layer, to layer) → the files that import across that edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for folder in ("clawbed", *PACKAGE_DIRS):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            source = layer_of_file(path)
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                for name in names:
                    if name.startswith("clawbed.") or name == "clawbed":
                        target = layer_of_module(name)
                        if target != source:
                            edges[(source, target)].append(str(path.relative_to(REPO_ROOT)))
                            break
    return edges


def imports_by_package() -> dict[tuple[str, str], list[str]]:
    """(from package, to package) → the files that import across that edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (a, b), files in imports_by_layer().items():
        if package_of_layer(a) != package_of_layer(b):
            edges[(package_of_layer(a), package_of_layer(b))].extend(files)
    return edges


def import_cycles(edges: Mapping[tuple[str, str], list[str]]) -> list[list[str]]:
    """Every package that reaches itself through the imports, as one loop each: the packages in
    order, starting from the smallest name (a cycle's members each give the same loop, kept once)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    loops: set[tuple[str, ...]] = set()
    for start in sorted(graph):
        # Breadth first from the start: the shortest way back to it, if there is one.
        came_from: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in came_from:
            following = []
            for node in frontier:
                for nxt in sorted(graph[node]):
                    if nxt not in came_from:
                        came_from[nxt] = node
                        following.append(nxt)
            frontier = following
        if start in came_from:
            loop = [start]
            node = came_from[start]
            while node != start:
                loop.append(node)
                node = came_from[node]
            loop.reverse()  # now start, ..., the last hop back to start in import order
            loop = [start] + loop[:-1]
            first = loop.index(min(loop))
            loops.add(tuple(loop[first:] + loop[:first]))
    return [list(loop) for loop in sorted(loops)]


def test_every_import_goes_down_the_layers() -> None:
    upward = {f"{a} -> {b}": sorted(set(files)) for (a, b), files in imports_by_layer().items()
              if LAYERS.index(b) > LAYERS.index(a)}
    assert not upward, f"imports that go up a layer (a cycle in the making): {upward}"


def test_no_package_imports_a_package_that_imports_it() -> None:
    edges = imports_by_package()
    loops = import_cycles(edges)
    described = [" -> ".join([*loop, loop[0]]) + ": " + "; ".join(
        f"{a} -> {b} in {', '.join(sorted(set(edges[(a, b)]))[:3])}"
        for a, b in zip(loop, [*loop[1:], loop[0]], strict=True)) for loop in loops]
    assert not loops, "packages that import each other:\n" + "\n".join(described)


def test_the_cycle_check_finds_direct_and_longer_loops() -> None:
    """The check itself: a pair importing each other and a loop of three are found, each once;
    a chain that only goes down is not a loop."""
    assert import_cycles({("replay", "orchestrator"): ["a.py"], ("orchestrator", "replay"): ["b.py"],
                          ("orchestrator", "core"): ["c.py"]}) == [["orchestrator", "replay"]]
    assert import_cycles({("a", "b"): [], ("b", "c"): [], ("c", "a"): [], ("c", "d"): []}) == [["a", "b", "c"]]
    assert import_cycles({("a", "b"): [], ("b", "c"): [], ("a", "c"): []}) == []


def test_the_oracle_sees_real_edges() -> None:
    """The scan is not empty: edges known to exist are found."""
    edges = imports_by_layer()
    for edge in (("replay", "replay.network"), ("orchestrator", "replay"), ("orchestrator", "replay.network"),
                 ("claw", "core"), ("replay.network", "emulator")):
        assert edge in edges, edge
    packages = imports_by_package()
    for edge in (("orchestrator", "replay"), ("replay", "emulator"), ("cli", "orchestrator")):
        assert edge in packages, edge
    assert ("replay", "replay") not in packages
