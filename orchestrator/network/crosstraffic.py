"""Background traffic beside a replay: wired cross traffic through the wireline bottleneck,
and other UEs of the cell with downloads of their own.

Each activity is a small class behind one interface (:class:`Background`): ``start(res,
topo)`` makes its namespaces and processes through the run's :class:`~clawbed.netns.Resources`
(so Ctrl-C or an error removes them), ``stop()`` stops its processes by PID, and
``bytes_delivered()`` counts what it has got across so far. Activities compose by listing
them (Mahimahi-style: each adds one source of load, none knows of the others):

- :class:`BulkCross` — ``flows`` iperf3 TCP flows from a cross-traffic host
  (``cb<rid>x<i>``, a Mininet host on the wired side's gateway:
  :meth:`~clawbed.orchestrator.network.topology.Topology.add_cross_host`) to a sink on the core
  router's end of the wired bottleneck, so they cross the bottleneck the server's traffic
  crosses (``orchestrator/network/topology.py``);
- :class:`OnOffCross` — web-like transfers from a cross-traffic host: off periods
  exponentially distributed, each on period one new TCP connection carrying a lognormal
  number of bytes (the sender below, seeded);
- :class:`OtherUeBulk` — a bulk iperf3 download from the core namespace to UE ``i`` ≥ 1;
- :class:`OtherUePage` — periodic page-sized downloads from the core namespace to UE ``i``.

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

    python -m clawbed.orchestrator.network.crosstraffic sink --address A --port P
    python -m clawbed.orchestrator.network.crosstraffic send --address A --port P --seed S \\
        --flows N --mean-bytes B --sigma 1.0 --mean-off-ms M --cc cubic --log transfers.jsonl

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
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawbed.claw.schemes import SchemeContext, UeEndpoint, get_scheme
from clawbed.claw.schemes.base import Scheme, scheme_names
from clawbed.emulator.config import MAX_UES
from clawbed.emulator.topology import UeNode
from clawbed.errors import InputError
from clawbed.netns import Namespace, OwnedProcess, ResourceError, Resources, wait_until

if TYPE_CHECKING:
    from clawbed.orchestrator.network.topology import Topology, WiredHost

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
        return [sys.executable, "-m", "clawbed.orchestrator.network.crosstraffic", "sink", "--address", address,
                "--port", str(port)]

    def _sender_argv(self, address: str, port: int, log_dir: Path) -> list[str]:
        return [sys.executable, "-m", "clawbed.orchestrator.network.crosstraffic", "send", "--address", address,
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
        return [sys.executable, "-m", "clawbed.orchestrator.network.crosstraffic", "sink", "--address", address,
                "--port", str(port)]

    def _sender_argv(self, address: str, port: int, log_dir: Path) -> list[str]:
        return [sys.executable, "-m", "clawbed.orchestrator.network.crosstraffic", "send", "--address", address,
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


# -- the on/off sender and its sink (run as a program inside a namespace) ----------------------

#: Bytes written per send call.
_CHUNK_BYTES = 64 * 1024


def sink(address: str, port: int) -> None:
    """Accept connections on ``address:port``; read each to its end, then close it (so the
    sender knows the transfer arrived)."""
    server = socket.create_server((address, port), backlog=64, reuse_port=False)

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(_CHUNK_BYTES):
                pass

    while True:
        conn, _ = server.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def send(address: str, port: int, seed: int, flows: int, mean_bytes: int, sigma: float, mean_off_ms: float,
         cc: str, log: Path) -> None:
    """``flows`` independent senders, each forever: an off period ~ Exp(mean ``mean_off_ms``),
    then one transfer on a new TCP connection (congestion control ``cc``) of a size ~
    lognormal with mean ``mean_bytes`` and log-σ ``sigma`` (``sigma`` 0: exactly
    ``mean_bytes``), timed until the sink has closed; one JSON line per transfer in ``log``."""
    mu = math.log(mean_bytes) - sigma * sigma / 2  # so that E[size] = mean_bytes
    payload = b"\0" * _CHUNK_BYTES
    lock = threading.Lock()

    def run(flow: int, out: Any) -> None:
        rng = random.Random(f"{seed}:{flow}")
        while True:
            time.sleep(rng.expovariate(1000.0 / mean_off_ms))
            size = max(1, round(rng.lognormvariate(mu, sigma))) if sigma > 0 else mean_bytes
            t0 = time.time()
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
                s.connect((address, port))
                left = size
                while left:
                    left -= s.send(payload[:min(left, _CHUNK_BYTES)])
                s.shutdown(socket.SHUT_WR)
                while s.recv(_CHUNK_BYTES):
                    pass
            with lock:
                out.write(json.dumps({"flow": flow, "bytes": size, "t_start_unix_s": round(t0, 6),
                                      "t_end_unix_s": round(time.time(), 6)}) + "\n")
                out.flush()

    with log.open("a") as out:
        threads = [threading.Thread(target=run, args=(i, out), daemon=True) for i in range(flows)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m clawbed.orchestrator.network.crosstraffic")
    sub = parser.add_subparsers(dest="role", required=True)
    p_sink = sub.add_parser("sink", help="receive transfers")
    p_send = sub.add_parser("send", help="send on/off transfers")
    for p in (p_sink, p_send):
        p.add_argument("--address", required=True)
        p.add_argument("--port", type=int, required=True)
    p_send.add_argument("--seed", type=int, required=True)
    p_send.add_argument("--flows", type=int, default=1)
    p_send.add_argument("--mean-bytes", type=int, required=True, help="mean transfer size, bytes")
    p_send.add_argument("--sigma", type=float, default=ONOFF_SIGMA, help="log-σ of the sizes (0: fixed size)")
    p_send.add_argument("--mean-off-ms", type=float, required=True, help="mean off time, ms")
    p_send.add_argument("--cc", default="cubic", help="TCP congestion control")
    p_send.add_argument("--log", type=Path, required=True, help="JSON lines, one per transfer")
    args = parser.parse_args(argv)
    if args.role == "sink":
        sink(args.address, args.port)
    else:
        send(args.address, args.port, args.seed, args.flows, args.mean_bytes, args.sigma, args.mean_off_ms,
             args.cc, args.log)


if __name__ == "__main__":
    main()
