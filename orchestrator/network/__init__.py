"""A run's network beyond the cell: the wired side built with Mininet (servers, cross-traffic
hosts, the gateway and the wired bottleneck with its shaping and netem impairment) and the
traffic beside the loads (wired cross traffic, other UEs of the cell).

This package sits below :mod:`clawbed.replay` (a replay builds its network from it) and
above :mod:`clawbed.emulator` (it extends the cell's own namespaces), while the rest of
:mod:`clawbed.orchestrator` (suites, store, regression) sits above the replay; it imports
nothing from either. ``tests/test_import_graph.py`` keeps it so.
"""

from clawbed.orchestrator.network.topology import (
                                                   Impairment,
                                                   NetemProbe,
                                                   Shaping,
                                                   Topology,
                                                   WiredHost,
                                                   WiredNet,
                                                   probe_netem,
)

__all__ = ["Impairment", "NetemProbe", "Shaping", "Topology", "WiredHost", "WiredNet", "probe_netem"]
