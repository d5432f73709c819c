"""Background traffic beside a replay: wired cross traffic through the wireline bottleneck,
and other UEs of the cell with downloads of their own.

Each activity is a small class behind one interface (:class:`Background`): ``start(res,
topo)`` makes its namespaces and processes through the run's :class:`~clawbed.netns.Resources`
(so Ctrl-C or an error removes them), ``stop()`` stops its processes by PID, and
``bytes_delivered()`` counts what it has got across so far. Activities compose by listing
them (Mahimahi-style: each adds one source of load, none knows of the others):

- :class:`BulkCross` — ``flows`` iperf3 TCP flows from a cross-traffic host
  (``cb<rid>x<i>``, a Mininet host on the wired side's gateway:
  :meth:`~clawbed.replay.network.topology.Topology.add_cross_host`) to a sink on the core
  router's end of the wired bottleneck, so they cross the bottleneck the server's traffic
  crosses (``replay/network/topology.py``);
- :class:`OnOffCross` — web-like transfers from a cross-traffic host: off periods
  exponentially distributed, each on period one new TCP connection carrying a lognormal
  number of bytes (the sender below, seeded);
- :class:`OtherUeBulk` — a bulk iperf3 download from the core namespace to UE ``i`` ≥ 1;
- :class:`OtherUePage` — periodic page-sized downloads from the core namespace to UE ``i``.
- :class:`UeFlow` — a flow on the replay's own UE (bulk, on/off or Poisson transfers from the
  core namespace), beside its page in its base-station queue, with a receive buffer of its own
  (``rmem``); ``replay/flows.py`` adds DRWA and each flow's figures per load.

Every activity runs a transport scheme (``clawbed.claw.schemes``) through the same verbs a
replay's load does, without asking which scheme it is: ``setup`` (namespace default left
alone), ``start_clients`` (returns once they are ready), the kernel's name of its CC for the
senders, ``teardown`` when the activity stops. Senders choose that CC per socket (iperf3
``-C``, ``TCP_CONGESTION``): the namespace default of the core belongs to the replay's scheme
when the server runs there. Each activity's scheme is an instance of its own (instance
``u<i>`` for other UE ``i``, ``x<i>`` for cross host ``i``: a BPF CC such as claw's is then
``claw_<run id>_u<i>``, with its bpffs, and CLAW's agent listens on UDP
:data:`OTHER_UE_AGENT_BASE_PORT` + ``i`` in the core namespace). A scheme with a part on the
UE (:attr:`~clawbed.claw.schemes.base.Scheme.needs_ue`) cannot drive wired cross traffic.

The on/off sender and its sink are this module run as a program::

    python -m clawbed.replay.network.crosstraffic sink --address A --port P
    python -m clawbed.replay.network.crosstraffic send --address A --port P --seed S \\
        --flows N --mean-bytes B --sigma 1.0 --mean-off-ms M --cc cubic --log transfers.jsonl

``send --arrivals poisson --rate-per-s R`` starts transfers at Poisson arrivals instead (open
loop), ``--arrivals bulk`` keeps one connection sending; ``--sizes B1,B2`` draws each transfer's
size from a list; ``--progress-log`` adds running totals from TCP_INFO (bytes acknowledged,
retransmissions, the window offered); ``sink --rcvbuf BYTES`` fixes every connection's receive buffer.

Layering: this package builds on the emulator and the schemes and knows nothing of pages or
replays; the replay that uses it says how large a page is (:func:`build_activities`).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import socket
import struct
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawbed.claw.schemes import SchemeContext, UeEndpoint, get_scheme
from clawbed.claw.schemes.base import Scheme, scheme_names
from clawbed.emulator.config import MAX_UES
from clawbed.emulator.topology import CellTopology, UeNode
from clawbed.errors import InputError
from clawbed.netns import Namespace, OwnedProcess, ResourceError, Resources, wait_until
from clawbed.units import parse_size_bytes

if TYPE_CHECKING:
    from clawbed.replay.network.topology import Topology, WiredHost

CROSS_KINDS = ("bulk", "onoff")
OTHER_UE_KINDS = ("bulk", "page")
#: Most other UEs a replay may have: the emulator's cell holds MAX_UES, one is the replay's.
MAX_OTHER_UES = MAX_UES - 1
#: The CLAW agent of other UE ``i`` listens on UDP this port + ``i`` (the replay's own on 7070).
OTHER_UE_AGENT_BASE_PORT = 7070
#: The sink of cross host ``i`` listens on this port + ``i``; UE ``i``'s receiver on
#: :data:`OTHER_UE_BASE_PORT` + ``i``.
CROSS_BASE_PORT = 5200
OTHER_UE_BASE_PORT = 5300
#: A bulk flow lasts until stopped; iperf3 needs a duration, s (a day).
BULK_DURATION_S = 86_400
#: Longest wait for a receiver to listen, s.
LISTEN_TIMEOUT_S = 10.0
#: Spread of the on/off transfer sizes: σ of the underlying normal (sizes of web objects
#: span orders of magnitude; 1.0 gives a 95 % range of about ×50).
ONOFF_SIGMA = 1.0
#: Mean think time between an other UE's page downloads, ms.
PAGE_OFF_MS = 1000.0
#: Kinds of flow on the replay's own UE, and the keys each takes (beyond ``kind``).
UE_FLOW_KINDS = ("bulk", "onoff", "poisson")
UE_FLOW_KEYS: dict[str, tuple[str, ...]] = {
    "bulk": ("scheme", "rmem", "drwa"),
    "onoff": ("scheme", "bytes", "sigma", "off_ms", "rmem", "drwa"),
    "poisson": ("scheme", "bytes", "sigma", "rate_per_s", "rmem", "drwa"),
}
#: Most flows on the replay's UE.
MAX_UE_FLOWS = 16
#: Flow ``i``'s receiver on UE 0 listens on this port + ``i``.
UE_FLOW_BASE_PORT = 5400
#: Largest transfer and receive buffer, bytes (1 GiB); the smallest receive buffer (Linux's
#: ``tcp_rmem`` minimum), bytes.
MAX_TRANSFER_BYTES = 1 << 30
MIN_RMEM_BYTES = 4096
#: Period of a UE flow's sender's progress lines, ms.
PROGRESS_MS = 50
#: Highest Poisson arrival rate, per second.
MAX_RATE_PER_S = 1000.0
#: nft table (in the core namespace) whose input chain counts each cross host's bytes once
#: they have crossed the wired bottleneck (the gateway's egress); it goes with the namespace.
NFT_TABLE = "clawbed_cross"


@dataclass(frozen=True)
class CrossTrafficSpec:
    """One cross-traffic host's load (the suite spec's ``cross_traffic`` entry)."""

    kind: str
    flows: int = 1
    #: The senders' scheme: one without a part on a UE (a wired host has none).
    scheme: str = "cubic"
    #: On/off: mean transfer size, bytes.
    object_bytes: int = 200_000
    #: On/off: mean off (think) time, ms.
    off_ms: float = 500.0

    def check(self, flag: str = "--cross-traffic") -> None:
        if self.kind not in CROSS_KINDS:
            raise InputError(f"{flag} {self.kind!r}: kind must be one of {', '.join(CROSS_KINDS)}")
        if not 1 <= self.flows <= 64:
            raise InputError(f"{flag} {self.kind}:{self.flows}: flows must be 1..64")
        try:
            needs_ue = get_scheme(self.scheme).needs_ue
        except InputError as e:
            raise InputError(f"{flag}: {e}") from None
        if needs_ue:
            raise InputError(f"{flag}: scheme {self.scheme!r} has a part on the UE and a cross-traffic host has "
                             f"none; one of {', '.join(scheme_names(without_ue=True))}")
        if self.object_bytes <= 0 or self.off_ms <= 0:
            raise InputError(f"{flag}: object_bytes and off_ms must be positive")


@dataclass(frozen=True)
class OtherUeSpec:
    """One other UE's traffic (the suite spec's ``other_ues`` entry)."""

    kind: str = "bulk"
    #: The download's scheme, any of them (an instance of its own: CC, agent, client on the UE).
    scheme: str = "cubic"
    #: ``page``: the page whose size each download has (the replay knows the pages).
    page: str = "set-01"
    #: ``page``: mean think time between its downloads, ms (exponential; None: :data:`PAGE_OFF_MS`).
    off_ms: float | None = None

    def check(self, flag: str = "--other-ues") -> None:
        if self.kind not in OTHER_UE_KINDS:
            raise InputError(f"{flag}: kind {self.kind!r} must be one of {', '.join(OTHER_UE_KINDS)}")
        try:
            get_scheme(self.scheme)
        except InputError as e:
            raise InputError(f"{flag}: {e}") from None
        if self.off_ms is not None and not (self.off_ms > 0 and math.isfinite(self.off_ms)):
            raise InputError(f"{flag}: off_ms {self.off_ms!r} must be a positive number of ms")

    @property
    def mean_off_ms(self) -> float:
        """The page loop's mean think time, ms."""
        return self.off_ms if self.off_ms is not None else PAGE_OFF_MS


@dataclass(frozen=True)
class UeFlowSpec:
    """One background flow on the replay's own UE (the suite spec's ``flows`` entry, the
    ``--flow`` flag): downloads from the core namespace that share UE 0's base-station queue
    with the page. Each flow has its own scheme and its own receive-window settings."""

    kind: str
    #: The sender's scheme: one without a part on the UE (the UE's part belongs to the page's scheme).
    scheme: str = "cubic"
    #: ``onoff``/``poisson``: each transfer's size, bytes; with several, each transfer draws one
    #: with equal chances.
    bytes: tuple[int, ...] = (100_000,)
    #: ``onoff``/``poisson``: log-σ of a lognormal spread around the drawn size (0: exact).
    sigma: float = 0.0
    #: ``poisson``: mean transfer arrivals per second (exponential inter-arrival times, open loop).
    rate_per_s: float = 1.0
    #: ``onoff``: mean think time between one transfer's end and the next one's start, ms (exponential).
    off_ms: float = 1000.0
    #: The receiving socket's buffer, bytes (SO_RCVBUF: fixed, no auto-tuning), which caps the
    #: window this flow advertises; None: the UE's ``tcp_rmem`` as every other socket there.
    rmem: int | None = None
    #: DRWA (``replay/drwa.py``) on this flow's connections.
    drwa: bool = False

    def check(self, flag: str = "--flow") -> None:
        where = _where(flag, self.kind)
        if self.kind not in UE_FLOW_KINDS:
            raise InputError(f"{_where(flag, 'kind')} {self.kind!r} must be one of {', '.join(UE_FLOW_KINDS)}")
        try:
            needs_ue = get_scheme(self.scheme).needs_ue
        except InputError as e:
            raise InputError(f"{where}: {e}") from None
        if needs_ue:
            raise InputError(f"{where}: scheme {self.scheme!r} has a part on the UE, which the page's scheme has "
                             f"there; one of {', '.join(scheme_names(without_ue=True))}")
        if not self.bytes or not all(isinstance(b, int) and 1 <= b <= MAX_TRANSFER_BYTES for b in self.bytes):
            raise InputError(f"{where}: bytes {list(self.bytes)}: each size must be 1 byte .. 1 GiB")
        if not 0 <= self.sigma <= 3:
            raise InputError(f"{where}: sigma {self.sigma}: must be 0..3")
        if not (0 < self.rate_per_s <= MAX_RATE_PER_S and math.isfinite(self.rate_per_s)):
            raise InputError(f"{where}: rate_per_s {self.rate_per_s}: must be above 0, at most {MAX_RATE_PER_S:g}")
        if not (self.off_ms > 0 and math.isfinite(self.off_ms)):
            raise InputError(f"{where}: off_ms {self.off_ms}: must be a positive number of ms")
        if self.rmem is not None and not MIN_RMEM_BYTES <= self.rmem <= MAX_TRANSFER_BYTES:
            raise InputError(f"{where}: rmem {self.rmem}: must be {MIN_RMEM_BYTES} bytes .. 1 GiB")

    def describe(self) -> dict[str, Any]:
        """Its settings as given (the keys a spec entry or ``--flow`` takes)."""
        keys = UE_FLOW_KEYS[self.kind]
        return {"kind": self.kind, **{k: (list(v) if isinstance(v, tuple) else v)
                                      for k, v in asdict(self).items() if k in keys}}


_CROSS_FLAG = re.compile(r"^(bulk|onoff):(\d+)$")
_OTHER_UES_FLAG = re.compile(r"^(\d+)(?::([a-z0-9_-]+))?$")


def parse_cross_traffic(text: str) -> CrossTrafficSpec:
    """``bulk:N`` or ``onoff:N`` (N flows from one cross host) → its spec; errors name the flag."""
    match = _CROSS_FLAG.match(text.strip())
    if not match:
        raise InputError(f"--cross-traffic {text!r}: give bulk:N or onoff:N (N flows, 1..64)")
    spec = CrossTrafficSpec(kind=match.group(1), flows=int(match.group(2)))
    spec.check()
    return spec


def parse_other_ues(text: str) -> list[OtherUeSpec]:
    """``N[:scheme]`` → N UEs with a bulk download each (scheme default cubic)."""
    match = _OTHER_UES_FLAG.match(text.strip())
    if not match:
        raise InputError(f"--other-ues {text!r}: give N or N:scheme (e.g. 2:cubic)")
    n = int(match.group(1))
    if not 1 <= n <= MAX_OTHER_UES:
        raise InputError(f"--other-ues {text!r}: N must be 1..{MAX_OTHER_UES} (the cell holds {MAX_UES} UEs)")
    spec = OtherUeSpec(scheme=match.group(2) or "cubic")
    spec.check()
    return [spec] * n


def _where(flag: str, what: str) -> str:
    """``--flow poisson`` (a flag or spec key, then what in it); without a flag, just what."""
    return f"{flag} {what}" if flag else what


def _flow_value(kind: str, key: str, value: Any, flag: str) -> Any:
    """One key of a flow's settings from the flag's text or a spec's value; errors name both."""
    where = f"{_where(flag, kind)}: {key}"
    if key == "scheme":
        return str(value)
    if key == "drwa":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false", "on", "off", "1", "0"):
            raise InputError(f"{where}={value!r}: give true or false")
        return text in ("true", "on", "1")
    if key in ("bytes", "rmem"):
        items = value if isinstance(value, (list, tuple)) else str(value).split("/") if key == "bytes" else [value]
        sizes = []
        for item in items:
            if isinstance(item, bool):
                raise InputError(f"{where}={value!r}: a size like 100000 or 64KiB")
            sizes.append(item if isinstance(item, int) else parse_size_bytes(str(item), where))
        if key == "rmem":
            if len(sizes) != 1:
                raise InputError(f"{where}={value!r}: one size")
            return sizes[0]
        return tuple(sizes)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}={value!r}: not a number") from None
    return number


def ue_flow_from(entry: Mapping[str, Any], flag: str = "flows") -> UeFlowSpec:
    """A spec's ``flows`` entry (``{kind: poisson, rate_per_s: 2, bytes: [10000, 100000]}``) →
    its checked spec; errors name ``flag`` and the key."""
    entry = dict(entry)
    kind = str(entry.pop("kind", ""))
    if kind not in UE_FLOW_KINDS:
        raise InputError(f"{_where(flag, 'kind')} {kind!r} must be one of {', '.join(UE_FLOW_KINDS)}")
    unknown = sorted(set(entry) - set(UE_FLOW_KEYS[kind]))
    if unknown:
        raise InputError(f"{_where(flag, kind)}: {', '.join(unknown)}: not a setting of a {kind} flow; it takes "
                         f"{', '.join(UE_FLOW_KEYS[kind])}")
    # None: the setting's default (a spec entry written out in full has rmem: null).
    spec = UeFlowSpec(kind=kind, **{k: _flow_value(kind, k, v, flag) for k, v in entry.items() if v is not None})
    spec.check(flag)
    return spec


def parse_flow(text: str, flag: str = "--flow") -> UeFlowSpec:
    """``KIND[:KEY=VALUE,...]`` (``bulk:scheme=cubic``, ``poisson:rate_per_s=2,bytes=100000,rmem=262144``;
    several sizes as ``bytes=10000/100000/1MB``) → the flow's spec; errors name ``--flow``."""
    kind, _, rest = text.strip().partition(":")
    entry: dict[str, Any] = {"kind": kind}
    for item in filter(None, (i.strip() for i in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise InputError(f"{_where(flag, repr(text))}: {item!r}: give KEY=VALUE (e.g. bulk:scheme=cubic or "
                             f"poisson:rate_per_s=2,bytes=100000)")
        if key.strip() in entry:
            raise InputError(f"{_where(flag, repr(text))}: {key.strip()} is given twice")
        entry[key.strip()] = value.strip()
    return ue_flow_from(entry, flag)


class Background(ABC):
    """Traffic beside the replay's loads: started once the cell is up, stopped before teardown."""

    #: A short name for records (``cross0-bulk``, ``ue1-bulk``), set by the constructor.
    name: str

    def __init__(self) -> None:
        self._procs: list[OwnedProcess] = []

    @abstractmethod
    def start(self, res: Resources, topo: Topology) -> None:
        """Make what it needs in ``res`` and start its traffic (returns once it flows)."""

    def stop(self) -> None:
        """Stop its processes by PID, senders first (also done when ``res`` closes)."""
        for proc in reversed(self._procs):
            proc.close()

    @abstractmethod
    def bytes_delivered(self) -> int:
        """Bytes it has got across its bottleneck since it started (IP bytes, headers included)."""

    def describe(self) -> dict[str, Any]:
        """What ran, for the manifest."""
        return {"name": self.name, "pids": [p.pid for p in self._procs]}


def _log_dir(res: Resources) -> Path:
    """``<run dir>/background/`` (the ledger lives in the run directory)."""
    path = res.ledger.path.parent / "background"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _wait_listening(ns: Namespace, port: int, proc: OwnedProcess) -> None:
    """Until a TCP socket listens on ``port`` in ``ns``; fails early if ``proc`` exits."""

    def listening() -> bool:
        if not proc.alive():
            raise ResourceError(f"{proc.name} exited with status {proc.popen.returncode} before listening on {port}")
        return bool(ns.run(["ss", "-ltnH", f"sport = :{port}"]).stdout.strip())

    wait_until(listening, LISTEN_TIMEOUT_S, f"{proc.name} to listen on port {port} in {ns.name}", interval_s=0.05)


def _count_from(core: Namespace, source: str, tag: str) -> None:
    """An nft counter in the core namespace's input path for packets from ``source``: after
    the TBF, so it counts what crossed the bottleneck."""
    core.run(["nft", "add", "table", "inet", NFT_TABLE])
    core.run(["nft", "add chain inet " + NFT_TABLE + " input { type filter hook input priority 0 ; policy accept ; }"])
    core.run(["nft", "add", "rule", "inet", NFT_TABLE, "input", "ip", "saddr", source, "counter",
              "comment", f'"{tag}"'])


def _counted(core: Namespace, tag: str) -> int:
    """The bytes of the counter tagged ``tag`` (see :func:`_count_from`)."""
    listing = json.loads(core.run(["nft", "-j", "list", "chain", "inet", NFT_TABLE, "input"]).stdout)
    for item in listing["nftables"]:
        rule = item.get("rule")
        if rule and rule.get("comment") == tag:
            return sum(int(e["counter"]["bytes"]) for e in rule["expr"] if "counter" in e)
    raise InputError(f"no nft counter {tag!r} in {core.name}")


def _rx_bytes(ue: UeNode) -> int:
    """Bytes the UE's TUN has received: what the emulator delivered to it."""
    link = json.loads(ue.run(["ip", "-j", "-s", "link", "show", "dev", ue.tun]).stdout)[0]
    return int(link["stats64"]["rx"]["bytes"])


@dataclass(frozen=True)
class SchemeSettings:
    """What an activity's scheme instance needs from its replay beyond the topology (a CLAW
    client reads the UE's diag feed; every scheme gets the same)."""

    #: UE index → its diag feed's port (``Emulator.diag_port``; the emulator is running).
    diag_port: Callable[[int], int]
    #: Extra client arguments (the trace's ``--n-rb``, ``--n-antennas``).
    client_args: list[str]
    feedback_period_ms: int = 100


def _start_scheme(res: Resources, name: str, run_dir: Path, server_ns: Namespace, server_address: str,
                  server_device: str, ues: list[UeEndpoint], instance: str, settings: SchemeSettings | None,
                  agent_port: int = OTHER_UE_AGENT_BASE_PORT) -> Scheme:
    """Scheme ``name`` set up for one activity, the way a replay's load sets its own up: an
    instance of its own, the namespace's default CC left alone (senders choose it per
    socket), its clients started and ready. Torn down by the caller (or when ``res`` closes)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    scheme = get_scheme(name)()
    ctx = SchemeContext(resources=res, run_dir=run_dir, server_ns=server_ns, server_address=server_address,
                        server_device=server_device, ues=ues, agent_port=agent_port,
                        feedback_period_ms=settings.feedback_period_ms if settings else 100,
                        client_args=list(settings.client_args) if settings else [],
                        namespace_default=False, instance=instance)
    scheme.setup(ctx)
    scheme.start_clients(ctx)
    return scheme


class _CrossHost(Background):
    """A cross-traffic host on the wired side with its receiver in the core namespace, on the
    core router's end of the wired bottleneck (so what it receives has crossed the bottleneck)."""

    def __init__(self, spec: CrossTrafficSpec) -> None:
        super().__init__()
        spec.check()
        self.spec = spec
        self.host: WiredHost | None = None
        self._core: Namespace | None = None
        self.name = f"cross-{spec.kind}"
        self.scheme: Scheme | None = None
        #: The kernel's name of the senders' CC (known once :meth:`start` set the scheme up).
        self.cc: str | None = None

    def start(self, res: Resources, topo: Topology) -> None:
        self.host = topo.add_cross_host()
        self._core = topo.core.ns
        assert topo.wired is not None  # add_cross_host made it
        sink_address = str(topo.wired.core_address)
        index = len(topo.cross_hosts) - 1
        self.name = f"cross{index}-{self.spec.kind}"
        log_dir = _log_dir(res)
        self.scheme = _start_scheme(res, self.spec.scheme, log_dir / f"{self.name}-{self.spec.scheme}", self.host.ns,
                                    str(self.host.address), self.host.device, [], f"x{index}", None)
        self.cc = self.scheme.server_cc
        _count_from(self._core, str(self.host.address), self.host.name)
        port = CROSS_BASE_PORT + index
        receiver = res.process(self._core.command(self._receiver_argv(sink_address, port)),
                               name=f"{self.name}-receiver", log_path=log_dir / f"{self.name}-receiver.log")
        self._procs.append(receiver)
        _wait_listening(self._core, port, receiver)
        self._procs.append(res.process(self.host.command(self._sender_argv(sink_address, port, log_dir)),
                                       name=f"{self.name}-sender", log_path=log_dir / f"{self.name}-sender.log"))

    def stop(self) -> None:
        """Stop its traffic, then its scheme instance."""
        super().stop()
        if self.scheme is not None:
            self.scheme.teardown()

    @abstractmethod
    def _receiver_argv(self, address: str, port: int) -> list[str]: ...

    @abstractmethod
    def _sender_argv(self, address: str, port: int, log_dir: Path) -> list[str]: ...

    def bytes_delivered(self) -> int:
        if self.host is None or self._core is None:
            return 0
        return _counted(self._core, self.host.name)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "kind": self.spec.kind, "flows": self.spec.flows, "scheme": self.spec.scheme,
                "cc": self.cc, "namespace": self.host.name if self.host else None,
                "object_bytes": self.spec.object_bytes if self.spec.kind == "onoff" else None,
                "off_ms": self.spec.off_ms if self.spec.kind == "onoff" else None}


class BulkCross(_CrossHost):
    """``flows`` parallel iperf3 TCP flows, as long as the replay runs, through the bottleneck."""

    def _receiver_argv(self, address: str, port: int) -> list[str]:
        return ["iperf3", "-s", "-B", address, "-p", str(port)]

    def _sender_argv(self, address: str, port: int, log_dir: Path) -> list[str]:
        assert self.cc is not None  # set by start
        return ["iperf3", "-c", address, "-p", str(port), "-t", str(BULK_DURATION_S), "-P", str(self.spec.flows),
                "-C", self.cc, "-i", "1", "--forceflush"]


class OnOffCross(_CrossHost):
    """``flows`` independent web-like senders (see :func:`send`), seeded, through the bottleneck."""

    def __init__(self, spec: CrossTrafficSpec, seed: int) -> None:
        super().__init__(spec)
        self.seed = seed

    def _receiver_argv(self, address: str, port: int) -> list[str]:
        return [sys.executable, "-m", "clawbed.replay.network.crosstraffic", "sink", "--address", address,
                "--port", str(port)]

    def _sender_argv(self, address: str, port: int, log_dir: Path) -> list[str]:
        return [sys.executable, "-m", "clawbed.replay.network.crosstraffic", "send", "--address", address,
                "--port", str(port), "--seed", str(self.seed), "--flows", str(self.spec.flows),
                "--mean-bytes", str(self.spec.object_bytes), "--sigma", str(ONOFF_SIGMA),
                "--mean-off-ms", str(self.spec.off_ms), "--cc", str(self.cc),
                "--log", str(log_dir / f"{self.name}-transfers.jsonl")]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "seed": self.seed, "sigma": ONOFF_SIGMA}


class _OtherUe(Background):
    """Downloads from the core namespace (the far side of the emulator) to UE ``ue_index``,
    with the spec's scheme set up for that UE alone."""

    def __init__(self, spec: OtherUeSpec, ue_index: int, settings: SchemeSettings | None = None) -> None:
        super().__init__()
        spec.check()
        if ue_index < 1:
            raise ValueError("UE 0 is the replay's own UE")
        if get_scheme(spec.scheme).needs_ue and settings is None:
            raise ValueError(f"other UE {ue_index} runs {spec.scheme}: give its SchemeSettings (diag port, "
                             f"client args)")
        self.spec = spec
        self.ue_index = ue_index
        self.settings = settings
        #: The kernel's name of the senders' CC (known once :meth:`start` set the scheme up).
        self.cc: str | None = None
        self.scheme: Scheme | None = None
        self.name = f"ue{ue_index}-{spec.kind}"
        self.ue: UeNode | None = None

    def start(self, res: Resources, topo: Topology) -> None:
        if self.ue_index >= len(topo.ues):
            raise ValueError(f"{topo!r} has no UE {self.ue_index}: make it with n_ues > {self.ue_index}")
        self.ue = topo.ues[self.ue_index]
        port = OTHER_UE_BASE_PORT + self.ue_index
        log_dir = _log_dir(res)
        diag_port = self.settings.diag_port(self.ue_index) if self.settings else None
        endpoint = UeEndpoint(self.ue.ns, str(self.ue.address), self.ue.index, self.ue.tun, diag_port)
        self.scheme = _start_scheme(res, self.spec.scheme, log_dir / f"ue{self.ue_index}-{self.spec.scheme}",
                                    topo.core.ns, str(topo.core.address), topo.core.tun, [endpoint],
                                    f"u{self.ue_index}", self.settings,
                                    agent_port=OTHER_UE_AGENT_BASE_PORT + self.ue_index)
        self.cc = self.scheme.server_cc
        receiver = res.process(self.ue.command(self._receiver_argv(str(self.ue.address), port)),
                               name=f"{self.name}-receiver", log_path=log_dir / f"{self.name}-receiver.log")
        self._procs.append(receiver)
        _wait_listening(self.ue.ns, port, receiver)
        self._procs.append(res.process(topo.core.command(self._sender_argv(str(self.ue.address), port, log_dir)),
                                       name=f"{self.name}-sender", log_path=log_dir / f"{self.name}-sender.log"))

    def stop(self) -> None:
        """Stop its traffic, then its scheme instance (client, agent, CC, bpffs)."""
        super().stop()
        if self.scheme is not None:
            self.scheme.teardown()

    @abstractmethod
    def _receiver_argv(self, address: str, port: int) -> list[str]: ...

    @abstractmethod
    def _sender_argv(self, address: str, port: int, log_dir: Path) -> list[str]: ...

    def bytes_delivered(self) -> int:
        return _rx_bytes(self.ue) if self.ue is not None else 0

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "kind": self.spec.kind, "ue": self.ue_index, "scheme": self.spec.scheme,
                "cc": self.cc, "namespace": self.ue.name if self.ue else None,
                "page": self.spec.page if self.spec.kind == "page" else None,
                "off_ms": self.spec.mean_off_ms if self.spec.kind == "page" else None}


class OtherUeBulk(_OtherUe):
    """One iperf3 TCP download to the UE for as long as the replay runs."""

    def _receiver_argv(self, address: str, port: int) -> list[str]:
        return ["iperf3", "-s", "-B", address, "-p", str(port)]

    def _sender_argv(self, address: str, port: int, log_dir: Path) -> list[str]:
        assert self.cc is not None  # set by start
        return ["iperf3", "-c", address, "-p", str(port), "-t", str(BULK_DURATION_S), "-C", self.cc,
                "-i", "1", "--forceflush"]


class OtherUePage(_OtherUe):
    """Downloads of ``page_bytes`` (the spec's page's total size), separated by exponential
    think times (mean: the spec's ``off_ms``, else :data:`PAGE_OFF_MS`), each on a new connection."""

    def __init__(self, spec: OtherUeSpec, ue_index: int, seed: int, page_bytes: int,
                 settings: SchemeSettings | None = None) -> None:
        super().__init__(spec, ue_index, settings)
        if page_bytes < 1:
            raise ValueError(f"other UE {ue_index}: page_bytes {page_bytes} must be positive")
        self.seed = seed
        self.page_bytes = page_bytes

    def _receiver_argv(self, address: str, port: int) -> list[str]:
        return [sys.executable, "-m", "clawbed.replay.network.crosstraffic", "sink", "--address", address,
                "--port", str(port)]

    def _sender_argv(self, address: str, port: int, log_dir: Path) -> list[str]:
        return [sys.executable, "-m", "clawbed.replay.network.crosstraffic", "send", "--address", address,
                "--port", str(port), "--seed", str(self.seed), "--flows", "1", "--mean-bytes", str(self.page_bytes),
                "--sigma", "0", "--mean-off-ms", str(self.spec.mean_off_ms), "--cc", str(self.cc),
                "--log", str(log_dir / f"{self.name}-transfers.jsonl")]


def build_activities(cross_traffic: Sequence[CrossTrafficSpec], other_ues: Sequence[OtherUeSpec],
                     seed: int, settings: SchemeSettings | None = None,
                     page_bytes: Callable[[str, int], int] | None = None) -> list[Background]:
    """The activities of a replay: one cross host per ``cross_traffic`` entry, and other UE
    ``i + 1`` for ``other_ues[i]`` (UE 0 is the replay's). Each seeded from ``seed``;
    ``settings`` is what the schemes' clients on other UEs need; ``page_bytes(page, seed)`` the
    size of a named page (for other UEs with page downloads)."""
    activities: list[Background] = []
    for i, spec in enumerate(cross_traffic):
        activities.append(BulkCross(spec) if spec.kind == "bulk" else OnOffCross(spec, seed * 1000 + i))
    for i, ue_spec in enumerate(other_ues, start=1):
        if ue_spec.kind == "bulk":
            activities.append(OtherUeBulk(ue_spec, i, settings))
        else:
            if page_bytes is None:
                raise ValueError(f"other UE {i} downloads page {ue_spec.page!r}: give page_bytes")
            page_seed = seed * 1000 + 100 + i
            activities.append(OtherUePage(ue_spec, i, page_seed, page_bytes(ue_spec.page, page_seed), settings))
    return activities


class UeFlow(Background):
    """A background flow on UE ``ue_index`` (a replay's own, 0), sharing its base-station
    queue with what else that UE receives: a sink on the UE (its sockets' receive buffer fixed
    at the spec's ``rmem`` when given) and the sender program in the core namespace (bulk,
    on/off or Poisson arrivals; its scheme an instance of its own, ``f<i>``), which logs every
    transfer and, every :data:`PROGRESS_MS`, its running totals from the kernel's TCP_INFO."""

    def __init__(self, spec: UeFlowSpec, index: int, seed: int, ue_index: int = 0) -> None:
        super().__init__()
        spec.check()
        if not 0 <= index < MAX_UE_FLOWS:
            raise ValueError(f"flow index {index}: must be 0..{MAX_UE_FLOWS - 1}")
        self.spec = spec
        self.index = index
        self.seed = seed
        self.ue_index = ue_index
        self.name = f"flow{index}-{spec.kind}"
        #: The receiver's port on the UE: what tells this flow's connections from the UE's others.
        self.port = UE_FLOW_BASE_PORT + index
        self.cc: str | None = None
        self.scheme: Scheme | None = None
        self.ue: UeNode | None = None
        self.transfers_path: Path | None = None
        self.progress_path: Path | None = None
        self._receiver_log: Path | None = None
        self._progress = _JsonLines()
        self._transfers = _JsonLines()

    def start(self, res: Resources, topo: CellTopology) -> None:
        if self.ue_index >= len(topo.ues):
            raise ValueError(f"{topo!r} has no UE {self.ue_index}")
        self.ue = topo.ues[self.ue_index]
        log_dir = _log_dir(res)
        self.transfers_path = log_dir / f"{self.name}-transfers.jsonl"
        self.progress_path = log_dir / f"{self.name}-progress.jsonl"
        self._receiver_log = log_dir / f"{self.name}-receiver.log"
        self.scheme = _start_scheme(res, self.spec.scheme, log_dir / f"{self.name}-{self.spec.scheme}", topo.core.ns,
                                    str(topo.core.address), topo.core.tun, [], f"f{self.index}", None)
        self.cc = self.scheme.server_cc
        address = str(self.ue.address)
        receiver_argv = [sys.executable, "-m", "clawbed.replay.network.crosstraffic", "sink", "--address",
                         address, "--port", str(self.port)]
        if self.spec.rmem is not None:
            receiver_argv += ["--rcvbuf", str(self.spec.rmem)]
        receiver = res.process(self.ue.command(receiver_argv), name=f"{self.name}-receiver",
                               log_path=self._receiver_log)
        self._procs.append(receiver)
        _wait_listening(self.ue.ns, self.port, receiver)
        arrivals = {"bulk": "bulk", "onoff": "closed", "poisson": "poisson"}[self.spec.kind]
        sender_argv = [sys.executable, "-m", "clawbed.replay.network.crosstraffic", "send", "--address",
                       address, "--port", str(self.port), "--seed", str(self.seed), "--flows", "1",
                       "--arrivals", arrivals, "--sizes", ",".join(str(b) for b in self.spec.bytes),
                       "--sigma", str(self.spec.sigma), "--mean-off-ms", str(self.spec.off_ms),
                       "--rate-per-s", str(self.spec.rate_per_s), "--cc", str(self.cc),
                       "--log", str(self.transfers_path), "--progress-log", str(self.progress_path),
                       "--progress-ms", str(PROGRESS_MS)]
        self._procs.append(res.process(topo.core.command(sender_argv), name=f"{self.name}-sender",
                                       log_path=log_dir / f"{self.name}-sender.log"))

    def stop(self) -> None:
        """Stop its traffic, then its scheme instance."""
        super().stop()
        if self.scheme is not None:
            self.scheme.teardown()

    def progress(self) -> list[dict[str, Any]]:
        """The sender's progress lines so far: ``t_unix_s``, ``bytes_acked``, ``retrans`` (totals
        over its connections), ``open``, ``snd_wnd_max`` (the largest window offered to an open one)."""
        return self._progress.read(self.progress_path)

    def transfers(self) -> list[dict[str, Any]]:
        """Its finished transfers so far (``t_start_unix_s``, ``t_end_unix_s``, ``bytes``,
        ``retrans``; ``error`` or ``skipped`` for those that did not happen)."""
        return self._transfers.read(self.transfers_path)

    def bytes_delivered(self) -> int:
        """Bytes the UE has acknowledged (TCP payload), as of the last progress line."""
        rows = self.progress()
        return int(rows[-1]["bytes_acked"]) if rows else 0

    def receive_buffer_bytes(self) -> int | None:
        """The receive buffer the kernel gave the sink's sockets (None: the UE's tcp_rmem)."""
        if self._receiver_log is None or not self._receiver_log.is_file():
            return None
        for line in self._receiver_log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                return json.loads(line).get("rcvbuf_bytes")
        return None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self.spec.describe(), "ue": self.ue_index, "port": self.port, "cc": self.cc,
                "namespace": self.ue.name if self.ue else None, "rcvbuf_bytes": self.receive_buffer_bytes(),
                "seed": self.seed}


class _JsonLines:
    """A JSON-lines file another process appends to, read incrementally (complete lines only)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._offset = 0

    def read(self, path: Path | None) -> list[dict[str, Any]]:
        if path is None or not path.is_file():
            return self.rows
        with path.open("rb") as f:
            f.seek(self._offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # being written: read it whole next time
                self._offset += len(line)
                self.rows.append(json.loads(line))
        return self.rows


def build_ue_flows(flows: Sequence[UeFlowSpec], seed: int, ue_index: int = 0) -> list[UeFlow]:
    """Flow ``i`` for ``flows[i]`` on UE ``ue_index``, each seeded from ``seed``."""
    if len(flows) > MAX_UE_FLOWS:
        raise InputError(f"--flow: {len(flows)} flows; at most {MAX_UE_FLOWS}")
    return [UeFlow(spec, i, seed * 1000 + 200 + i, ue_index) for i, spec in enumerate(flows)]


# -- the sender and its sink (run as programs inside a namespace) -----------------------------

#: Bytes written per send call.
_CHUNK_BYTES = 64 * 1024
#: ``struct tcp_info`` (linux/tcp.h): its length up to ``tcpi_snd_wnd``, and the offsets of the
#: fields a sender reports (u32 ``tcpi_total_retrans``, u64 ``tcpi_bytes_acked``, u32 ``tcpi_snd_wnd``).
_TCP_INFO_BYTES = 232
_TCPI_TOTAL_RETRANS, _TCPI_BYTES_ACKED, _TCPI_SND_WND = 100, 120, 228
#: ``SO_RCVBUFFORCE`` (asm-generic/socket.h; Python's socket module does not name it): root may
#: set a receive buffer above ``net.core.rmem_max``.
_SO_RCVBUFFORCE = 33
#: Most transfers a Poisson sender keeps open at once; an arrival beyond them is logged as
#: skipped (a cell that cannot carry the offered load would otherwise pile up threads).
MAX_OPEN_TRANSFERS = 64
#: How long a bulk sender waits before it connects again after its connection failed, s.
_RECONNECT_S = 0.5


def _sender_counts(sock: socket.socket) -> tuple[int, int, int]:
    """(bytes the receiver acknowledged, segments retransmitted, the window it advertises in
    bytes) of a sending socket, from the kernel's TCP_INFO."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
    (retrans,) = struct.unpack_from("=I", raw, _TCPI_TOTAL_RETRANS)
    (acked,) = struct.unpack_from("=Q", raw, _TCPI_BYTES_ACKED)
    snd_wnd = struct.unpack_from("=I", raw, _TCPI_SND_WND)[0] if len(raw) >= _TCP_INFO_BYTES else 0
    return acked, retrans, snd_wnd


class _Tally:
    """What one sender program's connections have done, finished and open (its progress lines)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()
        self.acked_bytes = 0
        self.retrans = 0

    def opened(self, sock: socket.socket) -> None:
        with self.lock:
            self.open.add(sock)

    def closed(self, sock: socket.socket) -> tuple[int, int]:
        """Move a finished connection's counts into the totals; (bytes acked, retransmissions)."""
        try:
            acked, retrans, _ = _sender_counts(sock)
        except OSError:
            acked = retrans = 0
        with self.lock:
            self.open.discard(sock)
            self.acked_bytes += acked
            self.retrans += retrans
        return acked, retrans

    def sample(self) -> dict[str, Any]:
        """The totals now, open connections included, and the largest window they are offered."""
        with self.lock:
            acked, retrans, windows = self.acked_bytes, self.retrans, []
            for sock in self.open:
                try:
                    a, r, w = _sender_counts(sock)
                except OSError:
                    continue
                acked, retrans = acked + a, retrans + r
                windows.append(w)
            return {"t_unix_s": round(time.time(), 6), "bytes_acked": acked, "retrans": retrans,
                    "open": len(self.open), "snd_wnd_max": max(windows) if windows else None}


def _transfer(address: str, port: int, cc: str, size: int | None, tally: _Tally) -> dict[str, Any]:
    """One connection (congestion control ``cc``) carrying ``size`` bytes (None: until the
    program ends), timed from connect until the sink has closed it."""
    payload = b"\0" * _CHUNK_BYTES
    t0 = time.time()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        s.connect((address, port))
        tally.opened(s)
        try:
            if size is None:
                while True:
                    s.sendall(payload)
            left = size
            while left:
                left -= s.send(payload[:min(left, _CHUNK_BYTES)])
            s.shutdown(socket.SHUT_WR)
            while s.recv(_CHUNK_BYTES):
                pass
        finally:
            acked, retrans = tally.closed(s)
    return {"bytes": size, "t_start_unix_s": round(t0, 6), "t_end_unix_s": round(time.time(), 6),
            "bytes_acked": acked, "retrans": retrans}


def sink(address: str, port: int, rcvbuf_bytes: int | None = None) -> None:
    """Accept connections on ``address:port``; read each to its end, then close it (so the
    sender knows the transfer arrived). ``rcvbuf_bytes``: every connection's receive buffer,
    as the kernel counts it (SO_RCVBUF asks for half, the kernel doubles it for its overhead),
    fixed (no auto-tuning), which caps the window it advertises; None: the namespace's tcp_rmem."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf_bytes is not None:
        # On the listener, before listen: accepted sockets inherit it, and the SYN-ACK's window
        # scale is chosen from it.
        server.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, rcvbuf_bytes // 2)
    server.bind((address, port))
    server.listen(64)
    print(json.dumps({"listening": port, "rcvbuf_bytes": server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
                      if rcvbuf_bytes is not None else None}), flush=True)

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(_CHUNK_BYTES):
                pass

    while True:
        conn, _ = server.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def send(address: str, port: int, seed: int, flows: int, mean_bytes: int, sigma: float, mean_off_ms: float,
         cc: str, log: Path, *, sizes: Sequence[int] = (), arrivals: str = "closed", rate_per_s: float = 1.0,
         progress_log: Path | None = None, progress_ms: float = 50.0) -> None:
    """``flows`` independent senders, each forever, every transfer on a new TCP connection
    (congestion control ``cc``), timed until the sink has closed it; one JSON line per
    transfer in ``log``. ``arrivals``:

    - ``closed`` (on/off): an off period ~ Exp(mean ``mean_off_ms``), then one transfer, in turn;
    - ``poisson``: transfers start at the arrivals of a Poisson process of ``rate_per_s``
      (exponential inter-arrival times), whether or not the previous ones have finished;
    - ``bulk``: one connection that sends until the program is stopped.

    A transfer's size is drawn from ``sizes`` with equal chances (empty: ``mean_bytes``), then
    ~ lognormal with that mean and log-σ ``sigma`` (``sigma`` 0: exactly that). With
    ``progress_log``, a line every ``progress_ms`` with the totals over every connection so
    far (bytes acknowledged, retransmissions; open ones included)."""
    sizes = list(sizes) or [mean_bytes]
    tally = _Tally()
    lock = threading.Lock()
    stop = threading.Event()

    def draw(rng: random.Random) -> int:
        mean = sizes[0] if len(sizes) == 1 else rng.choice(sizes)  # one size: no draw (same sequence)
        if sigma <= 0:
            return mean
        return max(1, round(rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))  # E[size] = mean

    def record(out: Any, flow: int, done: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps({"flow": flow, **done}) + "\n")
            out.flush()

    def one(out: Any, flow: int, size: int) -> None:
        try:
            record(out, flow, _transfer(address, port, cc, size, tally))
        except OSError as e:
            record(out, flow, {"bytes": size, "error": f"{type(e).__name__}: {e}"})

    def run(flow: int, out: Any) -> None:
        rng = random.Random(f"{seed}:{flow}")
        while True:
            if arrivals == "bulk":
                try:
                    _transfer(address, port, cc, None, tally)
                except OSError as e:
                    record(out, flow, {"bytes": None, "error": f"{type(e).__name__}: {e}"})
                time.sleep(_RECONNECT_S)
            elif arrivals == "poisson":
                time.sleep(rng.expovariate(rate_per_s))
                size = draw(rng)
                with tally.lock:
                    busy = len(tally.open) >= MAX_OPEN_TRANSFERS
                if busy:
                    record(out, flow, {"bytes": size, "skipped": True, "t_start_unix_s": round(time.time(), 6)})
                    continue
                threading.Thread(target=one, args=(out, flow, size), daemon=True).start()
            else:
                time.sleep(rng.expovariate(1000.0 / mean_off_ms))
                one(out, flow, draw(rng))

    def report() -> None:
        assert progress_log is not None
        with progress_log.open("a") as f:
            while not stop.wait(progress_ms / 1000):
                f.write(json.dumps(tally.sample()) + "\n")
                f.flush()

    if progress_log is not None:
        threading.Thread(target=report, daemon=True).start()
    with log.open("a") as out:
        threads = [threading.Thread(target=run, args=(i, out), daemon=True) for i in range(flows)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m clawbed.replay.network.crosstraffic")
    sub = parser.add_subparsers(dest="role", required=True)
    p_sink = sub.add_parser("sink", help="receive transfers")
    p_send = sub.add_parser("send", help="send transfers (on/off, Poisson or bulk)")
    for p in (p_sink, p_send):
        p.add_argument("--address", required=True)
        p.add_argument("--port", type=int, required=True)
    p_send.add_argument("--seed", type=int, required=True)
    p_send.add_argument("--flows", type=int, default=1)
    p_send.add_argument("--mean-bytes", type=int, default=100_000, help="mean transfer size, bytes")
    p_send.add_argument("--sigma", type=float, default=ONOFF_SIGMA, help="log-σ of the sizes (0: fixed size)")
    p_send.add_argument("--mean-off-ms", type=float, default=1000.0, help="mean off time, ms")
    p_send.add_argument("--cc", default="cubic", help="TCP congestion control")
    p_send.add_argument("--log", type=Path, required=True, help="JSON lines, one per transfer")
    p_send.add_argument("--sizes", type=lambda t: [int(v) for v in t.split(",")], default=[],
                        help="transfer sizes drawn with equal chances, bytes (comma-separated; overrides --mean-bytes)")
    p_send.add_argument("--arrivals", choices=("closed", "poisson", "bulk"), default="closed",
                        help="closed: off time then a transfer, in turn; poisson: open-loop arrivals; bulk: one "
                             "endless transfer")
    p_send.add_argument("--rate-per-s", type=float, default=1.0, help="poisson: mean arrivals per second")
    p_send.add_argument("--progress-log", type=Path, help="JSON lines of the running totals")
    p_send.add_argument("--progress-ms", type=float, default=50.0, help="period of the progress lines, ms")
    p_sink.add_argument("--rcvbuf", type=int, help="each connection's receive buffer, bytes (default: tcp_rmem)")
    args = parser.parse_args(argv)
    if args.role == "sink":
        sink(args.address, args.port, args.rcvbuf)
    else:
        send(args.address, args.port, args.seed, args.flows, args.mean_bytes, args.sigma, args.mean_off_ms,
             args.cc, args.log, sizes=args.sizes, arrivals=args.arrivals, rate_per_s=args.rate_per_s,
             progress_log=args.progress_log, progress_ms=args.progress_ms)


if __name__ == "__main__":
    main()
