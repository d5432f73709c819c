"""The packages form layers: each imports only from the layers below it, so there is no
cycle between them (an import inside a function counts as much as one at the top).

    core (the clawbed/ folder's modules) < traces < emulator < claw < orchestrator.network
      < replay < dashboards < orchestrator (suites, store, regression) < the CLI (clawbed.cli)

``orchestrator/network/`` (the wired topology and the traffic beside a replay) is a layer of
its own: a replay builds its network from it, while the rest of the orchestrator runs replays.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from clawbed.paths import REPO_ROOT

LAYERS = ("core", "traces", "emulator", "claw", "orchestrator.network", "replay", "dashboards", "orchestrator",
          "cli")
PACKAGE_DIRS = ("traces", "emulator", "claw", "replay", "dashboards", "orchestrator")


def layer_of_module(dotted: str) -> str:
    """The layer of module ``clawbed.<...>``."""
    parts = dotted.split(".")[1:]
    if not parts:
        return "core"
    if parts[0] == "cli":
        return "cli"
    if parts[:2] == ["orchestrator", "network"]:
        return "orchestrator.network"
    return parts[0] if parts[0] in PACKAGE_DIRS else "core"


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


def test_every_import_goes_down_the_layers() -> None:
    upward = {f"{a} -> {b}": sorted(set(files)) for (a, b), files in imports_by_layer().items()
              if LAYERS.index(b) > LAYERS.index(a)}
    assert not upward, f"imports that go up a layer (a cycle in the making): {upward}"


def test_the_oracle_sees_real_edges() -> None:
    """The scan is not empty: edges known to exist are found."""
    edges = imports_by_layer()
    for edge in (("replay", "orchestrator.network"), ("orchestrator", "replay"), ("claw", "core"),
                 ("orchestrator.network", "emulator")):
        assert edge in edges, edge
