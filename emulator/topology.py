"""The namespaces of one emulated cell, with a small Mininet-like API.

Layout (``<rid>`` is the run id of the :class:`~clawbed.netns.Resources` stack; the server
namespace exists only after :meth:`CellTopology.add_server`)::

    UE namespace cb<rid>u<i>                                core namespace cb<rid>core
    ┌──────────────────────────┐                            ┌───────────────────────────┐
    │ TUN cb<rid>t<i>          │◀──── clawbed-emu ─────────▶│ TUN cb<rid>tc             │
    │ 10.65.0.<i+1> (/32)      │  (root namespace, reads    │ 10.64.0.1 (/32)           │
    │ default route → TUN      │   and writes both TUNs)    │ 10.65.0.0/16 → TUN        │
    │ clients, CLAW client     │                            │ servers, CLAW server agent│
    └──────────────────────────┘                            │ veth cb<rid>cs 10.66.0.1  │
                                                            └─────────────┬─────────────┘
                                        wired link, TBF-shaped (optional) │
                                                            ┌─────────────┴─────────────┐
                                  server namespace cb<rid>srv │ veth cb<rid>sv 10.66.0.2  │
                                                            │ default route → core      │
                                                            └───────────────────────────┘

Choice: the servers run in the core namespace itself, on the core TUN's address, rather than
in a server namespace behind a veth. Every packet between a UE and a server then crosses the
emulator and nothing else (no extra forwarding hop whose latency or queue would add to the
model's), and a server's tc/BPF programs attach to the core TUN. A run that needs a
wireline bottleneck behind the core adds a server namespace with :meth:`CellTopology.add_server`:
a veth from the core namespace (which then forwards between it and the core TUN), what the
server sends optionally shaped by a TBF as it enters the core — the wired bottleneck, below
the cell's capacity. Cross-traffic hosts (:meth:`CellTopology.add_cross_host`, namespaces
``cb<rid>x<i>``) sit on veths of their own to the core, their traffic redirected into the
same IFB and TBF, so they compete with the server for the wireline rate.

The namespaces are made here; the TUN devices are made by ``clawbed-emu`` when it starts (it
needs their descriptors) and vanish when it exits. Everything is created through the
``Resources`` stack, so closing the stack removes it on success, error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field
from typing import Sequence

from clawbed.netns import Endpoint, Namespace, OwnedProcess, Resources

#: Address of the core TUN, where the servers listen.
DEFAULT_CORE_ADDRESS = ipaddress.IPv4Address("10.64.0.1")
#: UE ``i`` gets host ``i + 1`` of this network.
DEFAULT_UE_NETWORK = ipaddress.IPv4Network("10.65.0.0/16")
#: MTU of every TUN, bytes (Ethernet-sized, as on an LTE bearer after PDCP).
DEFAULT_MTU_BYTES = 1500
#: The wired link between the core and a server namespace: the core's end is host 1, the
#: server's host 2.
DEFAULT_SERVER_NETWORK = ipaddress.IPv4Network("10.66.0.0/24")
#: Cross-traffic host ``i`` gets ``10.67.<i>.0/24`` of this network (core end host 1, its end host 2).
DEFAULT_CROSS_NETWORK = ipaddress.IPv4Network("10.67.0.0/16")


class _InNamespace:
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
class Node(_InNamespace):
    """One namespace of the topology: where processes run, and its TUN as the emulator makes it."""

    #: The namespace (``Namespace.name`` is what the emulator's config names).
    ns: Namespace
    #: The TUN device's interface name inside ``ns``.
    tun: str
    #: The TUN's IPv4 address.
    address: ipaddress.IPv4Address
    #: Destinations routed through the TUN (``"default"`` or ``A.B.C.D/N``).
    routes: list[str]
    _res: Resources = field(repr=False)


@dataclass(frozen=True)
class Shaping:
    """A token bucket (tc ``tbf``) on a link's egress: the wired bottleneck."""

    #: Rate in tc's notation (``10mbit``; ``mbps`` would be megabytes per second).
    rate: str
    #: Bucket size, bytes: the longest burst at line rate (at least one MTU-sized packet).
    burst_bytes: int = 32 * 1024
    #: Longest time a packet may wait in the queue, ms (the queue holds rate × latency).
    latency_ms: float = 50.0

    def tc_args(self) -> list[str]:
        """The ``tbf ...`` arguments of ``tc qdisc add``."""
        return ["tbf", "rate", self.rate, "burst", str(self.burst_bytes), "latency", f"{self.latency_ms:g}ms"]


@dataclass
class ServerNode(_InNamespace):
    """A namespace behind the core on a (shaped) veth: the server, or a cross-traffic host."""

    ns: Namespace
    #: The veth end in ``ns``: where the UEs' packets arrive (attach server-side tc programs here).
    device: str
    #: The servers' address (``device``'s).
    address: ipaddress.IPv4Address
    #: The veth end in the core namespace, and its address (the server's gateway).
    core_device: str
    core_address: ipaddress.IPv4Address
    #: The TBF on what the server sends (server → UEs), at the core's end of the link, if any.
    shaping: Shaping | None
    _res: Resources = field(repr=False)
    #: The link's network (``core_address`` and ``address`` are its hosts 1 and 2).
    network: ipaddress.IPv4Network = DEFAULT_SERVER_NETWORK


@dataclass
class UeNode(Node):
    """A UE: its index in the emulator's ``ues`` list."""

    index: int = 0


class CellTopology:
    """One core namespace and ``n_ues`` UE namespaces, created in ``res`` (removed when it closes).

    >>> with Resources(new_run_id(), ledger) as res:
    ...     topo = CellTopology(res, n_ues=2)
    ...     topo.ues[0].run(["ping", "-c", "1", str(topo.core.address)])  # once the emulator runs
    ...     server = topo.add_server(Shaping("10mbit"))          # a wired bottleneck behind the core
    ...     topo.ues[0].run(["ping", "-c", "1", str(server.address)])
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
        #: The server namespace behind the core, once :meth:`add_server` made it.
        self.server: ServerNode | None = None
        #: Cross-traffic hosts behind the same bottleneck, made by :meth:`add_cross_host`.
        self.cross_hosts: list[ServerNode] = []
        #: The IFB device whose TBF is the wireline bottleneck (set by :meth:`add_server`).
        self._ifb: str | None = None

    def add_server(self, shaping: Shaping | None = None, *,
                   network: ipaddress.IPv4Network | str = DEFAULT_SERVER_NETWORK) -> ServerNode:
        """A server namespace ``cb<rid>srv`` joined to the core namespace by a veth on
        ``network`` (core end host 1, server end host 2), with ``shaping`` as a TBF on what
        the server sends (the downlink direction: server → UEs), applied where it enters
        the core namespace.

        The core namespace forwards between the veth and its TUN (``ip_forward``, a
        per-namespace setting that goes with the namespace); the server's default route is
        the core's end. May be called before or after the emulator starts; once per topology.
        """
        if self.server is not None:
            raise ValueError(f"{self!r} already has a server namespace ({self.server.name})")
        self.server = self._behind_core("srv", "sv", "cs", ipaddress.IPv4Network(network), shaping)
        if shaping is not None:
            self._shape_towards_ues(self.server.core_device, shaping)
        return self.server

    def add_cross_host(self) -> ServerNode:
        """A cross-traffic host ``cb<rid>x<i>`` (``i`` = 0, 1, … in order of calls) on a veth
        of its own to the core namespace (network ``10.67.<i>.0/24``: core end host 1, host
        end host 2), whose traffic into the core is redirected into the server's bottleneck
        (the same IFB and TBF): it competes with the server for the wireline rate, as a
        second source behind the same router port would. Its sinks listen in the core
        namespace, on the core end's address. Needs :meth:`add_server` with shaping first.
        """
        if self.server is None or self.server.shaping is None:
            raise ValueError(f"{self!r}: cross traffic shares the wireline bottleneck; add_server(Shaping(...)) first")
        i = len(self.cross_hosts)
        if i >= 256:
            raise ValueError(f"{self!r}: at most 256 cross-traffic hosts")
        network = DEFAULT_CROSS_NETWORK.network_address + (i << 8)
        host = self._behind_core(f"x{i}", f"xh{i}", f"xc{i}", ipaddress.IPv4Network(f"{network}/24"),
                                 self.server.shaping)
        self._redirect_into_bottleneck(host.core_device)
        self.cross_hosts.append(host)
        return host

    def _behind_core(self, role: str, device_role: str, core_device_role: str, network: ipaddress.IPv4Network,
                     shaping: Shaping | None) -> ServerNode:
        """A namespace ``cb<rid><role>`` on a veth to the core namespace (core end host 1 of
        ``network``, its end host 2, its default route via the core)."""
        if network.num_addresses < 4:
            raise ValueError(f"network {network} needs room for two hosts")
        taken = [self.ue_network] + [n.network for n in ([self.server] if self.server else []) + self.cross_hosts]
        if any(network.overlaps(other) for other in taken) or self.core.address in network:
            raise ValueError(f"network {network} overlaps the UEs' {self.ue_network}, another namespace's "
                             f"network or the core's {self.core.address}")
        core_address, address = network.network_address + 1, network.network_address + 2
        ns = self.res.namespace(role)
        device, core_device = self.res.name(device_role), self.res.name(core_device_role)
        self.res.veth(Endpoint(ns, device, str(address), network.prefixlen),
                      Endpoint(self.core.ns, core_device, str(core_address), network.prefixlen),
                      mtu=self.mtu_bytes)
        self.core.ns.sysctl("net.ipv4.ip_forward", 1)
        ns.run(["ip", "route", "add", "default", "via", str(core_address), "dev", device])
        return ServerNode(ns, device, address, core_device, core_address, shaping, self.res, network)

    def _shape_towards_ues(self, core_device: str, shaping: Shaping) -> None:
        """The TBF on what the server sends, at the core's end of the link (its ingress,
        redirected through an IFB device of the core namespace): a hop away from the
        server, as a router would be. On the server's own egress the kernel would push the
        TBF's queue back into the sending socket (TCP small queues), so TCP would never fill
        its window nor lose a packet there, unlike behind any real wired bottleneck."""
        ifb = self.res.name("if")
        core = self.core.ns
        # Recorded for `clawbed cleanup`; it also goes with the core namespace.
        self.res.ledger.record("link", ifb, netns=core.name)
        core.run(["ip", "link", "add", ifb, "mtu", str(self.mtu_bytes), "type", "ifb"])
        core.run(["ip", "link", "set", ifb, "up"])
        core.run(["tc", "qdisc", "add", "dev", ifb, "root", *shaping.tc_args()])
        self._ifb = ifb
        self._redirect_into_bottleneck(core_device)

    def _redirect_into_bottleneck(self, core_device: str) -> None:
        """Send everything arriving on ``core_device`` (core namespace) through the IFB's TBF."""
        core = self.core.ns
        core.run(["tc", "qdisc", "add", "dev", core_device, "handle", "ffff:", "ingress"])
        core.run(["tc", "filter", "add", "dev", core_device, "parent", "ffff:", "protocol", "ip", "u32",
                  "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", self._ifb])

    @property
    def server_address(self) -> ipaddress.IPv4Address:
        """Where servers in the core namespace listen (the core TUN's address)."""
        return self.core.address

    def __repr__(self) -> str:
        server = f", server {self.server.name}" if self.server is not None else ""
        cross = f", {len(self.cross_hosts)} cross host(s)" if self.cross_hosts else ""
        return f"CellTopology(run {self.run_id}: core {self.core.name}, {len(self.ues)} UE(s){server}{cross})"
