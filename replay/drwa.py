"""DRWA at the UE: the bufferbloat paper's Dynamic Receive Window Adjustment (BB12 §5).

The receiver keeps the sender's window near what the path needs by advertising

    rwnd = λ · (RTT_min / RTT_est) · cwnd_est

where cwnd_est is an EWMA (weight α on the old value) of the bytes received per RTT_est,
RTT_est the receiver's RTT from TCP timestamps, RTT_min its minimum. Defaults from the
fidelity table's parameter section (docs/fidelity-table.md §7 B, BB12 §5.2, §5.4):
**λ = 3, α = 7/8**; with them DRWA holds the RTT near λ·RTT_min (row BB-6).

How it runs here (the kernel has no DRWA), split where each part is exact:

- **the controller** (this module, a thread of the run): every :data:`PERIOD_S` it dumps the
  UE namespace's established TCP sockets over ``inet_diag`` (the sockets of Chromium or the
  h2 loader, whoever owns them) and, per flow, runs :class:`DrwaEstimator` on the kernel's
  own numbers: ``tcpi_bytes_received`` and ``tcpi_rcv_rtt``, the UE kernel's receiver-side
  RTT — an EWMA (1/8) of TSecr-based samples, i.e. "RTT_est ← averaged RTT from timestamps"
  of BB12's Algorithm 1 (DRWA itself was built on that kernel estimator). Once per RTT_est
  the bytes received in it update cwnd_est; the resulting rwnd goes, in bytes, into the
  program's ``drwa_rwnd`` map keyed by the flow's 4-tuple;
- **the tc egress program** (``claw/bpf/drwa_egress.bpf.c``) on the UE's device records each
  flow's window scale from the UE's own SYN/SYN-ACK and lowers the 16-bit window of every
  outgoing ACK to ``rwnd >> wscale`` when that is smaller (never raises it), fixing the
  checksum.

Choices not in the paper: rwnd is never set below :data:`MIN_WINDOW_SEGMENTS` × the flow's
MSS (a new connection's initial window), so a flow that idled can ramp again; flows opened
before the program was attached (their SYN unseen) are left alone.

:class:`Drwa` is an owned resource like CLAW's ACK marker (:mod:`clawbed.claw.client.marking`):
a bpffs of the run's own (``<run dir>/cb<run id>dw``), the program and maps pinned there, the
tc filter — both recorded in the run's ledger before they are made — and the controller
thread; :meth:`Drwa.close` stops the thread and removes exactly those (also after Ctrl-C,
through the run's :class:`~clawbed.netns.Resources`).
"""

from __future__ import annotations

import contextlib
import csv
import math
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import DiagSocket
from pyroute2.netlink import NETLINK_SOCK_DIAG
from pyroute2.netlink.diag import MarshalDiag
from pyroute2.netlink.nlsocket import NetlinkSocket

from clawbed.claw.bpfobjects import BpffsMount, TcProgram, device_l2_len, object_path
from clawbed.claw.server import bpfmap
from clawbed.claw.server.bpfmap import BpfMap
from clawbed.claw.server.libbpf import BpfObject
from clawbed.netns import Ledger, ResourceError, resource_name

#: λ and α of BB12 §5.2 / §5.4 (fidelity table §7 B).
LAMBDA = 3.0
ALPHA = 7 / 8
#: How often the controller reads the UE's sockets, s (RTTs here are ≥ ~50 ms).
PERIOD_S = 0.010
#: rwnd's floor, in segments of the flow's MSS (RFC 6928's initial window; not in BB12).
MIN_WINDOW_SEGMENTS = 10

OBJECT_NAME = "drwa_egress.bpf.o"
PROGRAM = "drwa_egress"
FLOWS_MAP, RWND_MAP, CONFIG_MAP, STATS_MAP = "drwa_flows", "drwa_rwnd", "drwa_cfg", "drwa_stats"
#: tc filter preference (the ACK marker's is 49152; both may sit on one device).
FILTER_PREF = 49153
#: ``struct drwa_key``: addresses and ports as on the wire.
_KEY = struct.Struct("=4s4s2s2s")
_RWND = struct.Struct("=II")
_CONFIG = struct.Struct("=II")
_STATS = struct.Struct("=QQQQQ")
_FLOW = struct.Struct("=QQIIB7x")
_KEY0 = struct.pack("=I", 0)
_TCP_ESTABLISHED = 1
_EXT_INFO = 1 << (2 - 1)


#: (UE address, UE port, peer address, peer port) → whether DRWA drives that flow.
FlowSelector = Callable[[tuple[str, int, str, int]], bool]


def drwa_name(run_id: str, ue_id: int = 0) -> str:
    """``cb<run id>dw`` (UE 0) or ``cb<run id>dw<ue>``: the DRWA bpffs (mount and directory)."""
    return resource_name(run_id, "dw" if ue_id == 0 else f"dw{ue_id}")


@dataclass(frozen=True)
class DrwaParams:
    lam: float = LAMBDA
    alpha: float = ALPHA
    period_s: float = PERIOD_S
    min_window_segments: int = MIN_WINDOW_SEGMENTS

    def check(self, flag: str = "--drwa") -> None:
        from clawbed.errors import InputError

        if not 1.0 <= self.lam <= 16.0:
            raise InputError(f"{flag}: λ {self.lam}: must be 1..16 (BB12 uses 3)")
        if not 0.0 <= self.alpha < 1.0:
            raise InputError(f"{flag}: α {self.alpha}: must be in [0, 1) (BB12 uses 7/8)")
        if not 0.001 <= self.period_s <= 1.0:
            raise InputError(f"{flag}: period {self.period_s} s: must be 0.001..1")


@dataclass
class DrwaEstimator:
    """BB12's Algorithm 1 for one flow, fed with the kernel's counters (no kernel needed)."""

    params: DrwaParams = field(default_factory=DrwaParams)
    rtt_min_s: float = math.inf
    rtt_s: float = 0.0
    cwnd_est: float | None = None
    round_start_s: float | None = None
    round_bytes: int = 0
    rwnd: int | None = None
    rounds: int = 0

    def update(self, now_s: float, bytes_received: int, rtt_s: float, mss: int) -> int | None:
        """One reading of the flow; the window to advertise (bytes), or None before the first
        complete RTT with an RTT estimate."""
        if rtt_s <= 0:
            return self.rwnd  # no receiver-side RTT sample yet
        self.rtt_s = rtt_s
        self.rtt_min_s = min(self.rtt_min_s, rtt_s)
        if self.round_start_s is None:
            self.round_start_s, self.round_bytes = now_s, bytes_received
            return None
        if now_s - self.round_start_s >= rtt_s:
            received = bytes_received - self.round_bytes
            a = self.params.alpha
            self.cwnd_est = float(received) if self.cwnd_est is None else a * self.cwnd_est + (1 - a) * received
            self.round_start_s, self.round_bytes = now_s, bytes_received
            self.rounds += 1
        if self.cwnd_est is None:
            return None
        window = self.params.lam * (self.rtt_min_s / rtt_s) * self.cwnd_est
        self.rwnd = max(int(window), self.params.min_window_segments * max(mss, 536))
        return self.rwnd


@dataclass(frozen=True)
class DrwaStats:
    acks_seen: int
    acks_lowered: int
    syns_seen: int
    no_flow: int
    rewrite_errors: int


class _DiagSocket(DiagSocket):
    """pyroute2's DiagSocket opened inside namespace ``netns``."""

    def __init__(self, netns: str) -> None:
        NetlinkSocket.__init__(self, NETLINK_SOCK_DIAG, netns=netns)
        self.set_marshal(MarshalDiag())


def flow_key(ue_addr: str, ue_port: int, peer_addr: str, peer_port: int) -> bytes:
    """The program's ``struct drwa_key`` for a flow."""
    return _KEY.pack(socket.inet_aton(ue_addr), socket.inet_aton(peer_addr), struct.pack("!H", ue_port),
                     struct.pack("!H", peer_port))


class Drwa:
    """DRWA on UE ``ue_id``'s device ``dev`` in namespace ``netns`` (see the module
    docstring); a context manager. ``log_path``: a CSV of the controller's per-round values."""

    def __init__(self, *, netns: str, dev: str, run_id: str, run_dir: Path | str, ue_id: int = 0,
                 params: DrwaParams | None = None, ledger: Ledger | None = None, obj_dir: Path | None = None,
                 log_path: Path | None = None, select: FlowSelector | None = None) -> None:
        self.netns, self.dev = netns, dev
        #: Which of the UE's flows DRWA drives (None: all): a background flow keeps its own
        #: window setting beside the page's (``replay/flows.py``).
        self.select = select
        self.params = params or DrwaParams()
        self.params.check()
        self.name = drwa_name(run_id, ue_id)
        self.log_path = log_path
        self.flows: dict[tuple[str, int, str, int], DrwaEstimator] = {}
        self.log_rows: list[tuple[Any, ...]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._maps: list[BpfMap] = []
        self._stack = contextlib.ExitStack()
        try:
            obj_path = object_path(OBJECT_NAME, obj_dir)
            l2_len = device_l2_len(netns, dev)
            self.bpffs = BpffsMount(Path(run_dir) / self.name, self.name, ledger=ledger)
            self._stack.callback(self.bpffs.close)  # unmounting drops the pins below
            self.prog_pin = self.bpffs / "prog"
            with BpfObject(obj_path) as obj:
                for m in (FLOWS_MAP, RWND_MAP, CONFIG_MAP, STATS_MAP):
                    obj.set_pin_path(m, self.bpffs / m)
                obj.load()
                bpfmap.obj_pin(obj.prog_fd(PROGRAM), self.prog_pin)
            self._stack.callback(self._close_maps)
            self.rwnd_map = self._open(RWND_MAP)
            self.flows_map = self._open(FLOWS_MAP)
            self.stats_map = self._open(STATS_MAP)
            cfg = self._open(CONFIG_MAP)
            cfg.update(_KEY0, _CONFIG.pack(l2_len, 1))
            self._diag = _DiagSocket(netns)
            self._diag.bind()
            self._stack.callback(self._diag.close)
            tc = TcProgram(netns, dev, self.prog_pin, direction="egress", pref=FILTER_PREF, ledger=ledger)
            self._stack.callback(tc.close)
            self._thread = threading.Thread(target=self._loop, name=f"drwa-{netns}", daemon=True)
            self._thread.start()
            self._stack.callback(self._join)
        except BaseException:
            self._stack.close()
            raise

    def _open(self, name: str) -> BpfMap:
        m = BpfMap.open_pinned(self.bpffs / name)
        self._maps.append(m)
        return m

    def _close_maps(self) -> None:
        for m in self._maps:
            m.close()
        self._maps = []

    # -- the controller ---------------------------------------------------------------------

    def step(self, now_s: float | None = None) -> int:
        """One reading of every established socket of the UE; returns how many flows got a window."""
        now_s = time.monotonic() if now_s is None else now_s
        messages = self._diag.get_sock_stats(family=socket.AF_INET, states=1 << _TCP_ESTABLISHED,
                                             extensions=_EXT_INFO)
        seen: set[tuple[str, int, str, int]] = set()
        written = 0
        for msg in messages:
            info = msg.get_attr("INET_DIAG_INFO")
            if info is None:
                continue
            flow = (msg["idiag_src"], msg["idiag_sport"], msg["idiag_dst"], msg["idiag_dport"])
            if self.select is not None and not self.select(flow):
                continue  # no window written: the program leaves the flow's ACKs alone
            seen.add(flow)
            est = self.flows.get(flow)
            if est is None:
                est = self.flows[flow] = DrwaEstimator(self.params)
            rounds = est.rounds
            previous = est.rwnd
            rwnd = est.update(now_s, info["tcpi_bytes_received"], info["tcpi_rcv_rtt"] / 1e6,
                              info["tcpi_rcv_mss"] or info["tcpi_advmss"])
            if rwnd is None:
                continue
            if rwnd != previous:
                self.rwnd_map.update(flow_key(*flow), _RWND.pack(min(rwnd, 0xFFFFFFFF), 0))
                written += 1
            if est.rounds != rounds:
                self.log_rows.append((round(time.time(), 6), f"{flow[2]}:{flow[3]}", flow[1],
                                      round(est.rtt_s * 1e3, 3), round(est.rtt_min_s * 1e3, 3),
                                      int(est.cwnd_est or 0), rwnd))
        for gone in set(self.flows) - seen:
            del self.flows[gone]
            with contextlib.suppress(ResourceError):
                self.rwnd_map.delete(flow_key(*gone))
        return written

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.step()
            except (OSError, ResourceError, ValueError):
                self.errors += 1
            next_t += self.params.period_s
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t, delay = time.monotonic(), 0
            self._stop.wait(delay)

    def _join(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # -- what it did ---------------------------------------------------------------------------

    def stats(self) -> DrwaStats:
        value = self.stats_map.lookup(_KEY0)
        return DrwaStats(*_STATS.unpack(value)) if value else DrwaStats(0, 0, 0, 0, 0)

    def flow_windows(self) -> dict[bytes, tuple[int, int, int, int, int]]:
        """Per flow key: (acks seen, acks lowered, kernel's last window, last window sent, wscale)."""
        return {k: _FLOW.unpack(v) for k, v in self.flows_map.items()}

    def describe(self) -> dict[str, Any]:
        """Parameters and counters, for the manifest."""
        out: dict[str, Any] = {"params": asdict(self.params), "rtt_source": "tcpi_rcv_rtt (UE kernel, timestamps)",
                               "controller_errors": self.errors}
        with contextlib.suppress(ResourceError, OSError, AttributeError):
            out["counters"] = asdict(self.stats())
        return out

    def write_log(self, path: Path) -> int:
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("t_unix_s", "peer", "ue_port", "rtt_ms", "rtt_min_ms", "cwnd_est_bytes", "rwnd_bytes"))
            w.writerows(self.log_rows)
        return len(self.log_rows)

    def close(self) -> None:
        """Stop the controller, detach, close the maps, unmount (idempotent)."""
        if self.log_path is not None and self._thread is not None:
            self._join()
            with contextlib.suppress(OSError):
                self.write_log(self.log_path)
        self._stack.close()

    def __enter__(self) -> Drwa:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
