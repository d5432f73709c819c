"""The cell's own namespaces: the core router and the UE hosts that ``clawbed-emu`` joins.

Which module is which: this one makes the namespaces the emulated cell needs (the core
router with the core TUN, one UE host per UE with its TUN) and is the one entry point of a
run's network, :class:`CellTopology`. Everything on the wired side of the core router —
server hosts, cross-traffic hosts, the gateway and the wired bottleneck — is built with
Mininet by :mod:`clawbed.replay.network.topology`, whose ``Topology`` extends this
class with ``add_server`` and ``add_cross_host`` (that package is the layer above this one).

Layout (``<rid>`` is the run id of the :class:`~clawbed.netns.Resources` stack)::

    UE host cb<rid>u<i>                                     core router cb<rid>core
    ┌──────────────────────────┐                            ┌───────────────────────────┐
    │ TUN cb<rid>t<i>          │◀──── clawbed-emu ─────────▶│ TUN cb<rid>tc             │
    │ 10.65.0.<i+1> (/32)      │  (root namespace, reads    │ 10.64.0.1 (/32)           │
    │ default route → TUN      │   and writes both TUNs)    │ 10.65.0.0/16 → TUN        │
    │ clients, CLAW client     │                            │ servers, CLAW server agent│
    └──────────────────────────┘                            └─────────────┬─────────────┘
                                                  the wired side (Mininet) │ Topology.add_server,
                                                  clawbed.replay.network │ add_cross_host

Choice: without a wired side, the servers run in the core namespace itself, on the core
TUN's address. Every packet between a UE and a server then crosses the emulator and nothing
else (no extra forwarding hop whose latency or queue would add to the model's), and a
server's tc/BPF programs attach to the core TUN. A run that needs a wired bottleneck puts its
server on the wired side instead (``Topology.add_server`` of the network package).

The namespaces are made here; the TUN devices are made by ``clawbed-emu`` when it starts (it
needs their descriptors) and vanish when it exits. Everything is created through the
``Resources`` stack, so closing the stack removes it on success, error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from clawbed.netns import Namespace, OwnedProcess, Resources

#: Address of the core TUN, where the servers listen.
DEFAULT_CORE_ADDRESS = ipaddress.IPv4Address("10.64.0.1")
#: UE ``i`` gets host ``i + 1`` of this network.
DEFAULT_UE_NETWORK = ipaddress.IPv4Network("10.65.0.0/16")
#: MTU of every TUN, bytes (Ethernet-sized, as on an LTE bearer after PDCP).
DEFAULT_MTU_BYTES = 1500


class InNamespace:
    """Running things in a node's namespace (``self.ns``), owned by its run (``self._res``)."""

    ns: Namespace
    _res: Resources

    @property
    def name(self) -> str:
        return self.ns.name

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside this node's namespace."""
        return self.ns.command(argv)

    def run(self, argv: Sequence[str], *, check: bool = True,
            timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion in the namespace; its output is captured as text."""
        return self.ns.run(argv, check=check, timeout_s=timeout_s)

    def popen(self, argv: Sequence[str], *, name: str, **kwargs: object) -> OwnedProcess:
        """Start ``argv`` in the namespace as a process owned by the run (stopped when it closes)."""
        return self._res.process(self.ns.command(argv), name=name, **kwargs)


@dataclass
class Node(InNamespace):
    """One namespace of the cell: where processes run, and its TUN as the emulator makes it."""

    #: The namespace (``Namespace.name`` is what the emulator's config names).
    ns: Namespace
    #: The TUN device's interface name inside ``ns``.
    tun: str
    #: The TUN's IPv4 address.
    address: ipaddress.IPv4Address
    #: Destinations routed through the TUN (``"default"`` or ``A.B.C.D/N``).
    routes: list[str]
    _res: Resources = field(repr=False)


@dataclass
class UeNode(Node):
    """A UE: its index in the emulator's ``ues`` list."""

    index: int = 0


class CellTopology:
    """One core router and ``n_ues`` UE hosts, created in ``res`` (removed when it closes).

    >>> with Resources(new_run_id(), ledger) as res:
    ...     cell = CellTopology(res, n_ues=2)            # core router + emulated cell + UE hosts
    ...     # once the emulator runs:
    ...     cell.ues[0].run(["ping", "-c", "1", str(cell.server_address)])

    The network package's ``Topology`` is this plus the wired side.
    """

    def __init__(
        self,
        res: Resources,
        n_ues: int = 1,
        *,
        core_address: ipaddress.IPv4Address | str = DEFAULT_CORE_ADDRESS,
        ue_network: ipaddress.IPv4Network | str = DEFAULT_UE_NETWORK,
        mtu_bytes: int = DEFAULT_MTU_BYTES,
    ) -> None:
        if n_ues < 1:
            raise ValueError(f"n_ues must be at least 1, got {n_ues}")
        ue_network = ipaddress.IPv4Network(ue_network)
        core_address = ipaddress.IPv4Address(core_address)
        if n_ues > ue_network.num_addresses - 2:
            raise ValueError(f"ue_network {ue_network} has room for {ue_network.num_addresses - 2} UEs, not {n_ues}")
        if core_address in ue_network:
            raise ValueError(f"core_address {core_address} lies inside ue_network {ue_network}")
        self.res = res
        self.run_id = res.run_id
        self.mtu_bytes = mtu_bytes
        self.ue_network = ue_network
        self.core = Node(res.namespace("core"), res.name("tc"), core_address, [str(ue_network)], res)
        self.ues: list[UeNode] = [
            UeNode(res.namespace(f"u{i}"), res.name(f"t{i}"), ue_network.network_address + i + 1,
                   ["default"], res, index=i)
            for i in range(n_ues)
        ]

    @property
    def server_address(self) -> ipaddress.IPv4Address:
        """Where servers in the core namespace listen (the core TUN's address)."""
        return self.core.address

    def __repr__(self) -> str:
        return f"CellTopology(run {self.run_id}: core {self.core.name}, {len(self.ues)} UE(s))"

