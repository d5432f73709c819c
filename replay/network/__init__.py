"""A run's network beyond the cell: the wired side built with Mininet (servers, cross-traffic
hosts, the gateway and the wired bottleneck with its shaping and netem impairment) and the
traffic beside the loads (wired cross traffic, other UEs of the cell).

This subpackage is the lowest part of :mod:`clawbed.replay`: the rest of the replay builds
its network from it, and the orchestrator (suites, fidelity rows) reaches it from above; it
imports nothing from the rest of the replay, only from :mod:`clawbed.emulator` (it extends the
cell's own namespaces), :mod:`clawbed.claw` and the core. ``tests/test_import_graph.py`` keeps
it so.
"""

from clawbed.replay.network.topology import (
    Impairment,
    NetemProbe,
    Shaping,
    Topology,
    WiredHost,
    WiredNet,
    probe_netem,
)

__all__ = ["Impairment", "NetemProbe", "Shaping", "Topology", "WiredHost", "WiredNet", "probe_netem"]
