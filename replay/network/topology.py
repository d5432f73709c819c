"""The wired side of a run's network, built with Mininet: server hosts, cross-traffic hosts,
a gateway router, and the wired bottleneck between the gateway and the cell's core router.

Which module is which: ``emulator/topology.py`` makes the cell's own namespaces (the core
router and the UE hosts, joined by ``clawbed-emu``'s TUNs) and is the entry point of a run's
network, :class:`~clawbed.emulator.topology.CellTopology`; this module is everything behind
the core router, and :class:`Topology` is the cell plus that: ``add_server`` /
``add_cross_host`` build the wired side through :class:`WiredNet` on first use::

    net = Topology(res, n_ues=2)               # core router + emulated cell + UE hosts
    web = net.add_server(Shaping("10mbit"))    # server host behind the wired bottleneck (TBF)
    x0 = net.add_cross_host()                  # a cross-traffic host sharing that bottleneck
    net.wired.describe()                       # hosts, links, the bottleneck's qdisc counters

Layout (``<rid>`` the run id; every host, interface and namespace name starts ``cb<rid>``)::

                core router cb<rid>core        gateway cb<rid>gw              wired hosts
    cell TUN ┌──────────────────────┐       ┌────────────────────┐ -eth1  ┌─────────────────────┐
    ◀───────▶│ cb<rid>core-eth0     │═══════│ cb<rid>gw-eth0     │────────│ server cb<rid>srv   │
             │ 10.66.0.1            │ wired │ 10.66.0.2          │        │ -eth0 10.66.1.2     │
             │ sinks of cross       │ bottle│ TBF or HTB on the  │ -eth2  ├─────────────────────┤
             │ traffic listen here  │ neck  │ egress to the core │────────│ cross cb<rid>x0     │
             └──────────────────────┘       └────────────────────┘        │ -eth0 10.67.0.2     │
                                                                          └─────────────────────┘

Server ``k`` (in order of ``add_server``) is on ``10.66.<k+1>.0/24`` and cross host ``i`` on
``10.67.<i>.0/24``, the gateway's end host 1 and the host's end host 2; each host's default
route is the gateway, the gateway's is the core router, and the core router routes each
host's network to the gateway.

Choices, and why:

- **A gateway router, the bottleneck on its egress to the core.** A shaping qdisc on a
  sender's own interface pushes its queue back into the sending socket (TCP small queues),
  so TCP would never fill the queue nor lose a packet there, unlike behind a real wired
  bottleneck; a forwarding hop's egress queue behaves like a router's. Every wired host's
  traffic towards the cell leaves through that one queue, so cross traffic shares the
  bottleneck simply by being routed through it. The link is shaped on both ends (a
  symmetric wired link); the access links are plain veths.
- **Mininet's hosts and links, not its ``Mininet`` object.** ``Mininet()`` "fixes limits"
  on construction: it rewrites the root namespace's ``net.ipv4.tcp_rmem``/``tcp_wmem``,
  ``net.core.*mem_max`` and others, which every namespace created afterwards copies — it
  would change the TCP buffers of every later run on the machine. :class:`WiredNet` keeps
  the nodes and links itself (no controller, no switch: hosts and links only).
- **Each host runs in a named namespace of the run.** A Mininet host is a shell
  (``mnexec`` + bash) through which Mininet makes and configures its links; here that shell
  runs in a namespace made by :meth:`Resources.namespace <clawbed.netns.Resources.namespace>`
  (``cb<rid><role>``) instead of a new anonymous one. The core router's namespace exists
  before the wired side (the cell made it), so Mininet's node for it must enter an existing
  namespace anyway, and doing the same for every host keeps one owner per namespace (ledgered,
  removed when the stack closes, found by ``clawbed cleanup``); ``ip netns exec``,
  :func:`~clawbed.netns.socket_in_namespace` and the emulator's config name them as before.
- **Shaping through Mininet's** ``TCLink`` (``TCIntf``: ``bw`` → HTB, ``use_tbf`` → TBF;
  it prints tc's errors rather than raising them, so the installed qdisc is checked).
- **Delay, jitter, loss and reordering through netem, where the kernel has it**
  (:class:`Impairment`, on the bottleneck link, both directions). Not every kernel has
  ``sch_netem`` (``docs/platform-notes.md``), and ``TCLink(delay=…)`` silently applies
  nothing there, so a run probes once (:func:`probe_netem`: a throwaway netem qdisc in a
  namespace of the run's own) and the caller decides: without netem a wired delay can move
  into the emulator's core delay, while jitter, loss and reordering are refused. netem goes
  under the shaping qdisc (``parent 5:1``; its ``limit`` then bounds the queue) or, on an
  unshaped link, at the root.

Ownership: every object is registered on the run's :class:`~clawbed.netns.Resources` stack
right after it is made — a namespace (removed), a Mininet host (its shell stopped by PID:
``terminate`` sends SIGHUP to its own process group, never anything by name), a link
(deleted in its namespace) — so closing the stack (success, error mid-build, Ctrl-C, SIGTERM) removes exactly
them, newest first. The ledger records each namespace, link and shell (stop signal SIGHUP: an
interactive bash ignores SIGTERM), so ``clawbed cleanup`` removes what a SIGKILLed run left
(the shells themselves end when their owner dies: their terminal hangs up).
"""

from __future__ import annotations

import ipaddress
import json
import re
import signal
from dataclasses import dataclass, field
from typing import Any

from mininet.link import Link, TCIntf, TCLink
from mininet.node import Host

from clawbed.emulator.config import parse_rate_bps
from clawbed.emulator.topology import CellTopology, InNamespace
from clawbed.netns import IFNAME_MAX, Namespace, ResourceError, Resources

#: The wired bottleneck's link: the core router's end is host 1, the gateway's host 2.
BOTTLENECK_NETWORK = ipaddress.IPv4Network("10.66.0.0/24")
#: Server ``k`` gets ``10.66.<k+1>.0/24`` of this network.
SERVER_NETWORKS = ipaddress.IPv4Network("10.66.0.0/16")
#: Cross-traffic host ``i`` gets ``10.67.<i>.0/24`` of this network.
CROSS_NETWORKS = ipaddress.IPv4Network("10.67.0.0/16")
#: Most servers and most cross-traffic hosts (one /24 each in the networks above).
MAX_SERVERS = 255
MAX_CROSS_HOSTS = 256
#: A server's role: its namespace is ``cb<rid><role>`` and its interface ``cb<rid><role>-eth0``,
#: which must fit the 15-character limit.
_SERVER_ROLE = re.compile(r"^[a-z][a-z0-9]{0,3}$")
#: Roles other parts of the topology take (the core router, the gateway, UE and cross hosts).
_RESERVED_ROLE = re.compile(r"^(core|gw|u\d+|x\d+)$")
QDISCS = ("tbf", "htb")
#: Highest rate Mininet's TCIntf shapes, Mbit/s (it ignores a higher one with a printed error).
MAX_RATE_MBIT = TCIntf.bwParamMax
#: Handle of the bounded FIFO (or netem) put under the shaping's class (TCIntf's class is 5:1).
_HTB_LEAF_HANDLE = "10:"
#: netem's queue limit on an unshaped link, packets (netem's own default).
NETEM_DEFAULT_LIMIT_PACKETS = 1000


@dataclass(frozen=True)
class Impairment:
    """What netem adds to each direction of the wired bottleneck link. Mistakes raise
    :class:`ValueError` naming the field."""

    #: One-way delay, ms.
    delay_ms: float = 0.0
    #: Jitter around ``delay_ms`` (netem's uniform-ish default distribution), ms.
    jitter_ms: float = 0.0
    #: Packets dropped at random, %.
    loss_pct: float = 0.0
    #: Packets sent at once instead of delayed (so they overtake the ones ahead), %; needs a delay.
    reorder_pct: float = 0.0

    def __post_init__(self) -> None:
        for name, upper in (("delay_ms", 10_000.0), ("jitter_ms", 10_000.0), ("loss_pct", 100.0),
                            ("reorder_pct", 100.0)):
            value = getattr(self, name)
            if not 0 <= value <= upper:
                raise ValueError(f"Impairment.{name}: {value} is outside 0..{upper:g}")
        if self.jitter_ms > 0 and self.delay_ms == 0:
            raise ValueError("Impairment.jitter_ms: jitter varies a delay; give delay_ms too")
        if self.reorder_pct > 0 and self.delay_ms == 0:
            raise ValueError("Impairment.reorder_pct: netem reorders by delaying the other packets; give delay_ms too")

    @property
    def active(self) -> bool:
        return any((self.delay_ms, self.jitter_ms, self.loss_pct, self.reorder_pct))

    @property
    def needs_netem_only(self) -> list[str]:
        """The fields nothing but netem can give (the emulator's core delay is constant and lossless)."""
        return [name for name in ("jitter_ms", "loss_pct", "reorder_pct") if getattr(self, name)]

    def netem_args(self) -> list[str]:
        """netem's parameters for ``tc qdisc add … netem``."""
        args = ["delay", f"{self.delay_ms:g}ms"]
        if self.jitter_ms:
            args.append(f"{self.jitter_ms:g}ms")
        if self.loss_pct:
            args += ["loss", f"{self.loss_pct:g}%"]
        if self.reorder_pct:
            args += ["reorder", f"{self.reorder_pct:g}%"]
        return args

    def describe(self) -> dict[str, Any]:
        return {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms, "loss_pct": self.loss_pct,
                "reorder_pct": self.reorder_pct}


@dataclass(frozen=True)
class NetemProbe:
    """Whether this kernel has netem, as one throwaway qdisc showed."""

    available: bool
    #: tc's words when it refused (e.g. "Error: Specified qdisc kind is unknown.").
    detail: str

    def describe(self) -> dict[str, Any]:
        return {"available": self.available, "detail": self.detail}


def probe_netem(ns: Namespace) -> NetemProbe:
    """Add a netem qdisc to the loopback of ``ns`` (a namespace of the caller's run, so nothing
    outside it is touched) and remove it again: does this kernel have netem?"""
    added = ns.run(["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "netem", "delay", "1ms"],
                   check=False)
    if added.returncode != 0:
        return NetemProbe(False, (added.stderr or added.stdout).strip() or f"tc exited {added.returncode}")
    ns.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=False)
    return NetemProbe(True, "a netem qdisc was added and removed")


@dataclass(frozen=True)
class Shaping:
    """How the wired bottleneck is shaped: a token bucket (tc ``tbf``) or an HTB class with a
    bounded FIFO, on each end's egress. Mistakes raise :class:`ValueError` naming the field."""

    #: Rate in tc's notation (``10mbit``; ``mbps`` would be megabytes per second: refused).
    rate: str
    #: Longest a packet may wait in the queue, ms: the queue holds rate × latency bytes.
    latency_ms: float = 50.0
    #: ``tbf`` (Mininet's ``use_tbf``) or ``htb`` (Mininet's default for ``bw``).
    qdisc: str = "tbf"

    def __post_init__(self) -> None:
        try:
            rate_bps = parse_rate_bps(self.rate)
        except ValueError as e:
            raise ValueError(f"Shaping.rate: {e}") from None
        if rate_bps > MAX_RATE_MBIT * 1_000_000:
            raise ValueError(f"Shaping.rate: {self.rate!r} is above {MAX_RATE_MBIT}mbit, the most Mininet's TCIntf shapes")
        if not self.latency_ms > 0:
            raise ValueError(f"Shaping.latency_ms: must be positive, got {self.latency_ms}")
        if self.qdisc not in QDISCS:
            raise ValueError(f"Shaping.qdisc: {self.qdisc!r} must be one of {', '.join(QDISCS)}")

    @property
    def rate_bps(self) -> int:
        return parse_rate_bps(self.rate)

    @property
    def queue_bytes(self) -> int:
        """What the queue holds: rate × latency."""
        return round(self.rate_bps * self.latency_ms / 8000)

    def link_params(self) -> dict[str, Any]:
        """The parameters of Mininet's ``TCIntf`` (``bw`` in Mbit/s) for this shaping."""
        return {"bw": self.rate_bps / 1e6, "use_tbf": self.qdisc == "tbf", "latency_ms": self.latency_ms}

    def describe(self) -> dict[str, Any]:
        return {"rate": self.rate, "rate_bps": self.rate_bps, "qdisc": self.qdisc, "latency_ms": self.latency_ms,
                "queue_bytes": self.queue_bytes}


class NamespaceHost(Host):
    """A Mininet host whose shell runs in the run's namespace ``ns`` (``ip netns exec``)
    rather than in a new anonymous one; Mininet makes and configures its links through it."""

    def __init__(self, ns: Namespace) -> None:
        self.ns = ns
        # Not Mininet's own namespace (mnexec -n): _popen puts the shell into ns instead.
        super().__init__(ns.name, inNamespace=False)

    def _popen(self, cmd: list[str], **params: Any) -> Any:
        """Mininet starts the host's shell through this: start it inside ``ns``."""
        return super()._popen(self.ns.command(cmd), **params)


@dataclass
class WiredHost(InNamespace):
    """A host on the gateway: a server, or a cross-traffic source."""

    #: Mininet's node for it.
    node: NamespaceHost = field(repr=False)
    ns: Namespace
    #: Its interface (``cb<rid><role>-eth0``): where the UEs' packets arrive (server-side tc
    #: programs attach here).
    device: str
    #: Its address (``device``'s).
    address: ipaddress.IPv4Address
    #: The gateway's end of its access link: its default route.
    gateway_address: ipaddress.IPv4Address
    #: The access link's network (``gateway_address`` and ``address`` are its hosts 1 and 2).
    network: ipaddress.IPv4Network
    _res: Resources = field(repr=False)


class WiredNet:
    """The wired side of ``cell``, Mininet-style: the gateway ``cb<rid>gw`` joined to the core
    router by the wired bottleneck (shaped by ``bottleneck``; ``None``: a plain link), then
    server and cross-traffic hosts on the gateway. Everything is made in ``cell.res`` and
    removed when it closes (module docstring: "Ownership")."""

    def __init__(self, cell: CellTopology, bottleneck: Shaping | None, impairment: Impairment | None = None) -> None:
        for network in (SERVER_NETWORKS, CROSS_NETWORKS):
            if network.overlaps(cell.ue_network) or cell.core.address in network:
                raise ValueError(f"the wired side's {network} overlaps the cell's UE network {cell.ue_network} "
                                 f"or its core address {cell.core.address}")
        self.cell = cell
        self.res = cell.res
        self.bottleneck = bottleneck
        #: netem's delay, jitter, loss and reordering on the bottleneck link (both directions).
        self.impairment = impairment if impairment is not None and impairment.active else None
        #: Mininet's nodes by name, and the links, in order of creation.
        self.nodes: dict[str, NamespaceHost] = {}
        self.links: list[Link] = []
        self.servers: list[WiredHost] = []
        self.cross_hosts: list[WiredHost] = []

        self.core = self._node(cell.core.ns)
        self.gateway = self._node(self.res.namespace("gw"))
        link = self._link(self.gateway, self.core, bottleneck, self.impairment)
        #: The core router's end of the bottleneck: where sinks of cross traffic listen.
        self.core_address = BOTTLENECK_NETWORK.network_address + 1
        #: The gateway's end of the bottleneck (the core router's route to every wired host).
        self.gateway_address = BOTTLENECK_NETWORK.network_address + 2
        #: The interface whose egress queue is the bottleneck towards the cell (the gateway's end).
        self.bottleneck_device: str = link.intf1.name
        self._address(self.core.ns, link.intf2.name, self.core_address, BOTTLENECK_NETWORK)
        self._address(self.gateway.ns, link.intf1.name, self.gateway_address, BOTTLENECK_NETWORK)
        # Both routers forward (a per-namespace setting that goes with the namespace).
        self.core.ns.sysctl("net.ipv4.ip_forward", 1)
        self.gateway.ns.sysctl("net.ipv4.ip_forward", 1)
        self.gateway.ns.run(["ip", "route", "add", "default", "via", str(self.core_address)])

    def add_server(self, role: str = "srv") -> WiredHost:
        """A server host ``cb<rid><role>`` on the gateway (``role``: 1–4 of [a-z0-9], a
        letter first, unused), on ``10.66.<k+1>.0/24`` for the ``k``-th server."""
        if not _SERVER_ROLE.match(role) or _RESERVED_ROLE.match(role):
            raise ValueError(f"server role {role!r}: give 1-4 characters of [a-z0-9], a letter first, "
                             f"not core, gw, u<N> or x<N> (those name other hosts)")
        if self.res.name(role) in self.nodes:
            raise ValueError(f"{self!r} already has a host {self.res.name(role)}")
        k = len(self.servers)
        if k >= MAX_SERVERS:
            raise ValueError(f"{self!r}: at most {MAX_SERVERS} servers")
        host = self._host(role, _subnet_24(SERVER_NETWORKS, k + 1))
        self.servers.append(host)
        return host

    def add_cross_host(self) -> WiredHost:
        """A cross-traffic host ``cb<rid>x<i>`` on the gateway, on ``10.67.<i>.0/24``: what it
        sends to the core router shares the bottleneck with the servers' traffic."""
        if self.bottleneck is None:
            raise ValueError(f"{self!r}: cross traffic shares the wired bottleneck, which is not shaped")
        i = len(self.cross_hosts)
        if i >= MAX_CROSS_HOSTS:
            raise ValueError(f"{self!r}: at most {MAX_CROSS_HOSTS} cross-traffic hosts")
        host = self._host(f"x{i}", _subnet_24(CROSS_NETWORKS, i))
        self.cross_hosts.append(host)
        return host

    def bottleneck_counters(self) -> dict[str, int]:
        """The bottleneck qdisc's counters towards the cell (the gateway's egress): bytes and
        packets it sent, packets it dropped, times it throttled (``overlimits``)."""
        out = self.gateway.ns.run(["tc", "-s", "-j", "qdisc", "show", "dev", self.bottleneck_device, "root"]).stdout
        [root] = json.loads(out)
        return {"sent_bytes": int(root["bytes"]), "sent_packets": int(root["packets"]),
                "dropped_packets": int(root["drops"]), "overlimits": int(root["overlimits"])}

    def describe(self) -> dict[str, Any]:
        """What the wired side is, for a run's manifest (with the bottleneck's counters so far)."""
        return {
            "gateway": self.gateway.name,
            "bottleneck": {"device": self.bottleneck_device, "core_address": str(self.core_address),
                           "shaping": self.bottleneck.describe() if self.bottleneck else None,
                           "netem": self.impairment.describe() if self.impairment else None,
                           **(self.bottleneck_counters() if self.bottleneck else {})},
            "servers": [{"name": h.name, "address": str(h.address), "device": h.device} for h in self.servers],
            "cross_hosts": [{"name": h.name, "address": str(h.address), "device": h.device}
                            for h in self.cross_hosts],
            "links": [f"{link.intf1.name}<->{link.intf2.name}" for link in self.links],
        }

    # -- building -------------------------------------------------------------------------------

    def _host(self, role: str, network: ipaddress.IPv4Network) -> WiredHost:
        """A host ``cb<rid><role>`` on an access link to the gateway (gateway end host 1 of
        ``network``, its end host 2, its default route via the gateway)."""
        node = self._node(self.res.namespace(role))
        link = self._link(self.gateway, node, None)
        gateway_address, address = network.network_address + 1, network.network_address + 2
        self._address(self.gateway.ns, link.intf1.name, gateway_address, network)
        self._address(node.ns, link.intf2.name, address, network)
        node.ns.run(["ip", "route", "add", "default", "via", str(gateway_address)])
        self.core.ns.run(["ip", "route", "add", str(network), "via", str(self.gateway_address)])
        return WiredHost(node, node.ns, link.intf2.name, address, gateway_address, network, self.res)

    def _node(self, ns: Namespace) -> NamespaceHost:
        """Mininet's host for ``ns``, owned by the run: its shell stopped when the stack closes,
        and in the ledger for ``clawbed cleanup``."""
        node = NamespaceHost(ns)
        self.res.callback(node.terminate)
        self.res.record_process(node.pid, name=f"mininet {ns.name}", argv=node.shell.args,
                                stop_signal=signal.SIGHUP)
        self.nodes[node.name] = node
        return node

    def _link(self, a: NamespaceHost, b: NamespaceHost, shaping: Shaping | None,
              impairment: Impairment | None = None) -> Link:
        """A veth between ``a`` and ``b`` named Mininet's way (``<host>-eth<N>``), up, with the
        cell's MTU; shaped on both ends' egress when ``shaping`` is given, and impaired by netem
        there when ``impairment`` is."""
        names = [f"{node.name}-eth{node.newPort()}" for node in (a, b)]
        for name in names:
            if len(name) > IFNAME_MAX:
                raise ValueError(f"interface name {name!r} is longer than {IFNAME_MAX} characters")
        # Recorded for `clawbed cleanup` (both ends also go with their namespaces).
        self.res.ledger.record("link", names[0], netns=a.ns.name)
        if shaping is None:
            link = Link(a, b, intfName1=names[0], intfName2=names[1])
        else:
            link = TCLink(a, b, intfName1=names[0], intfName2=names[1], **shaping.link_params())
        # Deleted through its namespace rather than Mininet's Link.delete, which talks to the
        # host's shell: a Ctrl-C or SIGTERM may have left that shell mid-command.
        self.res.callback(a.ns.run, ["ip", "link", "del", names[0]], check=False)
        self.links.append(link)
        for node, name in zip((a, b), names):
            node.ns.run(["ip", "link", "set", "dev", name, "mtu", str(self.cell.mtu_bytes), "up"])
            if shaping is not None:
                self._check_shaping(node.ns, name, shaping, with_netem=impairment is not None)
            if impairment is not None:
                self._add_netem(node.ns, name, shaping, impairment)
        return link

    def _add_netem(self, ns: Namespace, device: str, shaping: Shaping | None, impairment: Impairment) -> None:
        """netem on ``device``'s egress: under the shaping qdisc (its class 5:1), where its
        ``limit`` (packets) bounds the queue as the shaping's would, or at the root."""
        if shaping is not None:
            limit = max(1, shaping.queue_bytes // self.cell.mtu_bytes)
            where = ["parent", "5:1", "handle", _HTB_LEAF_HANDLE]
        else:
            limit, where = NETEM_DEFAULT_LIMIT_PACKETS, ["root", "handle", _HTB_LEAF_HANDLE]
        added = ns.run(["tc", "qdisc", "add", "dev", device, *where, "netem", *impairment.netem_args(),
                        "limit", str(limit)], check=False)
        if added.returncode != 0:
            raise ResourceError(f"netem on {device} in {ns.name} ({' '.join(impairment.netem_args())}): "
                                f"{(added.stderr or added.stdout).strip()} (does this kernel have netem? "
                                f"probe_netem tells)")

    @staticmethod
    def _check_shaping(ns: Namespace, device: str, shaping: Shaping, with_netem: bool = False) -> None:
        """Check that Mininet installed ``shaping`` on ``device`` (TCIntf prints tc's errors
        instead of raising them); under HTB, bound the queue to ``shaping.queue_bytes``
        (unless netem goes there, whose limit then bounds it)."""
        out = ns.run(["tc", "-j", "qdisc", "show", "dev", device, "root"]).stdout
        kinds = [q.get("kind") for q in json.loads(out)]
        if kinds != [shaping.qdisc]:
            raise ResourceError(f"shaping {device} in {ns.name}: expected a root {shaping.qdisc} qdisc from "
                                f"Mininet's TCIntf, found {kinds or 'none'}")
        if shaping.qdisc == "htb" and not with_netem:
            # TCIntf leaves the class's default queue (txqueuelen packets, whatever their size).
            ns.run(["tc", "qdisc", "add", "dev", device, "parent", "5:1", "handle", _HTB_LEAF_HANDLE, "bfifo",
                    "limit", str(shaping.queue_bytes)])

    @staticmethod
    def _address(ns: Namespace, device: str, address: ipaddress.IPv4Address, network: ipaddress.IPv4Network) -> None:
        ns.run(["ip", "addr", "add", f"{address}/{network.prefixlen}", "dev", device])

    def __repr__(self) -> str:
        shaping = f"{self.bottleneck.qdisc} {self.bottleneck.rate}" if self.bottleneck else "unshaped"
        return (f"WiredNet({self.gateway.name}, bottleneck {shaping}, {len(self.servers)} server(s), "
                f"{len(self.cross_hosts)} cross host(s))")


def _subnet_24(network: ipaddress.IPv4Network, index: int) -> ipaddress.IPv4Network:
    """The ``index``-th /24 of ``network`` (``10.67.0.0/16``, 3 → ``10.67.3.0/24``)."""
    return ipaddress.IPv4Network((network.network_address + (index << 8), 24))


class Topology(CellTopology):
    """A run's whole network: the cell (:class:`CellTopology`: core router, UE hosts) and, on
    first use, the wired side behind the core router (:class:`WiredNet`).

    >>> with Resources(new_run_id(), ledger) as res:
    ...     net = Topology(res, n_ues=2)                 # core router + emulated cell + UE hosts
    ...     web = net.add_server(Shaping("10mbit"))      # a server behind the wired bottleneck
    ...     x0 = net.add_cross_host()                    # cross traffic sharing that bottleneck
    """

    def __init__(self, res: Resources, n_ues: int = 1, **cell: Any) -> None:
        super().__init__(res, n_ues, **cell)
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

    def __repr__(self) -> str:
        wired = f", {self.wired!r}" if self.wired is not None else ""
        return f"Topology(run {self.run_id}: core {self.core.name}, {len(self.ues)} UE(s){wired})"
