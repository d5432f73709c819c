"""The cell's own namespaces: the core router and the UE hosts that ``clawbed-emu`` joins.

Which module is which: this one makes the namespaces the emulated cell needs (the core
router with the core TUN, one UE host per UE with its TUN) and is the one entry point of a
run's network, :class:`CellTopology`. Everything on the wired side of the core router —
server hosts, cross-traffic hosts, the gateway and the wired bottleneck — is built with
Mininet by :mod:`clawbed.orchestrator.topology`; :meth:`CellTopology.add_server` and
:meth:`CellTopology.add_cross_host` are a thin layer over it (imported on first use: the
orchestrator is the layer above the emulator and builds on this module).

Layout (``<rid>`` is the run id of the :class:`~clawbed.netns.Resources` stack)::

    UE host cb<rid>u<i>                                     core router cb<rid>core
    ┌──────────────────────────┐                            ┌───────────────────────────┐
    │ TUN cb<rid>t<i>          │◀──── clawbed-emu ─────────▶│ TUN cb<rid>tc             │
    │ 10.65.0.<i+1> (/32)      │  (root namespace, reads    │ 10.64.0.1 (/32)           │
    │ default route → TUN      │   and writes both TUNs)    │ 10.65.0.0/16 → TUN        │
    │ clients, CLAW client     │                            │ servers, CLAW server agent│
    └──────────────────────────┘                            └─────────────┬─────────────┘
                                                  the wired side (Mininet) │ add_server, add_cross_host
                                                  see clawbed.orchestrator.topology

Choice: without a wired side, the servers run in the core namespace itself, on the core
TUN's address. Every packet between a UE and a server then crosses the emulator and nothing
else (no extra forwarding hop whose latency or queue would add to the model's), and a
server's tc/BPF programs attach to the core TUN. A run that needs a wired bottleneck puts its
server on the wired side instead (:meth:`CellTopology.add_server`).

The namespaces are made here; the TUN devices are made by ``clawbed-emu`` when it starts (it
needs their descriptors) and vanish when it exits. Everything is created through the
``Resources`` stack, so closing the stack removes it on success, error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from clawbed.netns import Namespace, OwnedProcess, Resources

if TYPE_CHECKING:
    from clawbed.orchestrator.topology import Impairment, Shaping, WiredHost, WiredNet

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
    """One core router and ``n_ues`` UE hosts, created in ``res`` (removed when it closes),
    and on demand the wired side behind the core router.

    >>> with Resources(new_run_id(), ledger) as res:
    ...     net = CellTopology(res, n_ues=2)             # core router + emulated cell + UE hosts
    ...     web = net.add_server(Shaping("10mbit"))      # a server behind the wired bottleneck
    ...     x0 = net.add_cross_host()                    # cross traffic sharing that bottleneck
    ...     # once the emulator runs:
    ...     net.ues[0].run(["ping", "-c", "1", str(web.address)])
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
        #: The wired side behind the core router, once the first wired host made it.
        self.wired: WiredNet | None = None

    def add_server(self, shaping: Shaping | None = None, *, role: str = "srv",
                   impairment: Impairment | None = None) -> WiredHost:
        """A server host ``cb<rid><role>`` on the wired side, behind the wired bottleneck: the
        gateway's link to this core router, shaped by ``shaping`` (``None``: unshaped) and
        impaired by netem's ``impairment`` (``None``: none; the kernel must have netem). The
        first wired host builds the wired side; a later server may repeat its ``shaping`` or
        leave it out. May be called before or after the emulator starts.
        """
        return self._wired_side(shaping, impairment).add_server(role)

    def add_cross_host(self) -> WiredHost:
        """A cross-traffic host ``cb<rid>x<i>`` (``i`` = 0, 1, … in order of calls) on the
        gateway, beside the server: its traffic to the core router shares the wired
        bottleneck. Needs :meth:`add_server` with a shaping first."""
        if self.wired is None or self.wired.bottleneck is None:
            raise ValueError(f"{self!r}: cross traffic shares the wireline bottleneck; add_server(Shaping(...)) first")
        return self.wired.add_cross_host()

    def _wired_side(self, shaping: Shaping | None, impairment: Impairment | None = None) -> WiredNet:
        if self.wired is None:
            # The layer above this one (it imports this module): imported when first needed.
            from clawbed.orchestrator.topology import WiredNet

            self.wired = WiredNet(self, shaping, impairment)
        elif impairment is not None and impairment != self.wired.impairment:
            raise ValueError(f"{self!r}: the wired bottleneck is already impaired by {self.wired.impairment}; "
                             f"every wired host shares it")
        elif shaping is not None and shaping != self.wired.bottleneck:
            raise ValueError(f"{self!r}: the wired bottleneck is already {self.wired.bottleneck}; "
                             f"every wired host shares it (give no shaping, or the same)")
        return self.wired

    @property
    def server(self) -> WiredHost | None:
        """The first server on the wired side, if any."""
        return self.wired.servers[0] if self.wired is not None and self.wired.servers else None

    @property
    def cross_hosts(self) -> list[WiredHost]:
        """The cross-traffic hosts on the wired side, in order of :meth:`add_cross_host`."""
        return list(self.wired.cross_hosts) if self.wired is not None else []

    @property
    def server_address(self) -> ipaddress.IPv4Address:
        """Where servers in the core namespace listen (the core TUN's address)."""
        return self.core.address

    def __repr__(self) -> str:
        wired = f", {self.wired!r}" if self.wired is not None else ""
        return f"CellTopology(run {self.run_id}: core {self.core.name}, {len(self.ues)} UE(s){wired})"


def __getattr__(name: str) -> object:
    """The wired side's types, for code that imported them from here when the wired side lived
    in this module (``Shaping``): they are :mod:`clawbed.orchestrator.topology`'s, which imports
    this module, so they are looked up on first use."""
    if name in ("Shaping", "WiredHost"):
        from clawbed.orchestrator import topology

        return getattr(topology, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
