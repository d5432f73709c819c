"""The server's TCP state per flow, sampled every ~10 ms during a load.

Each sample is one ``inet_diag`` dump (``SOCK_DIAG_BY_FAMILY`` with ``tcp_info`` and the CC
name) over a netlink socket made *inside the server namespace*, of the sockets whose local
port is one the web server listens on (443; a recorded site's plain-HTTP hosts add 80). For claw and cqic, the CC's per-flow statistics map
(``claw_flows``, pinned in the scheme's bpffs) adds W_claw, the shadow Cubic's W_cubic and the
mode the CC applied on the flow's last ACK.

The sampler runs on a thread rather than as an asyncio task: the load it observes is run in
the main thread, so that a Ctrl-C interrupts the load itself (an executor thread could not be
interrupted, and would hold the run's teardown until its timeout).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import DiagSocket
from pyroute2.netlink import NETLINK_SOCK_DIAG
from pyroute2.netlink.diag import SS_ALL, SS_LISTEN, MarshalDiag
from pyroute2.netlink.nlsocket import NetlinkSocket

from clawbed.claw.server.loader import open_map
from clawbed.claw.server.maps import FLOWS_MAP, Applied, FlowKey, FlowStats
from clawbed.netns import ResourceError

#: Default period between two samples, s.
DEFAULT_PERIOD_S = 0.010
#: inet_diag extension bits (``1 << (INET_DIAG_x - 1)``): tcp_info and the CC's name.
_EXT_INFO = 1 << (2 - 1)
_EXT_CONG = 1 << (4 - 1)
#: Columns of a sample row (``tcp.csv``). Windows in bytes are packets × the flow's MSS.
SAMPLE_COLUMNS = (
    "t_unix_s", "flow", "state", "ca_state", "cc", "cwnd_pkts", "ssthresh_pkts", "mss_bytes", "cwnd_bytes",
    "srtt_ms", "rttvar_ms", "min_rtt_ms", "unacked_pkts", "delivered_pkts", "bytes_acked", "bytes_sent",
    "retrans_total", "lost_pkts", "pacing_rate_bps", "delivery_rate_bps", "snd_wnd_bytes", "notsent_bytes",
    "w_claw_bytes", "w_cubic_bytes", "claw_mode",
)
#: tcp_info's "no pacing limit" (~0 bytes/s).
_UNLIMITED_RATE = (1 << 64) - 1
#: tcp_info's "no ssthresh yet" (TCP_INFINITE_SSTHRESH).
_INFINITE_SSTHRESH = 0x7FFFFFFF


class _NamespaceDiagSocket(DiagSocket):
    """pyroute2's DiagSocket opened in network namespace ``netns`` (its own constructor has no
    such argument; the base NetlinkSocket does)."""

    def __init__(self, netns: str) -> None:
        NetlinkSocket.__init__(self, NETLINK_SOCK_DIAG, netns=netns)
        self.set_marshal(MarshalDiag())


@dataclass
class TcpSampler:
    """Samples the TCP sockets on local port ``port`` (and ``more_ports``) in namespace ``netns``.

    ``cc_maps_dir``: the claw/cqic scheme's bpffs directory, to add the CC's per-flow state.
    Use :meth:`start` / :meth:`stop` around a load; :attr:`rows` then holds the samples
    (mappings keyed by :data:`SAMPLE_COLUMNS`). Reuse for the next load with :meth:`reset`.
    """

    netns: str
    port: int
    period_s: float = DEFAULT_PERIOD_S
    #: Further local ports to sample (a server listening on several, e.g. 80 and 443).
    more_ports: tuple[int, ...] = ()
    cc_maps_dir: Path | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: Dumps that failed (the namespace went away mid-load, ...): counted, not fatal.
    errors: int = 0
    _diag: Any = field(default=None, repr=False)
    _flows_map: Any = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    #: Flows (peer address, port) left out: those present when the load began (:meth:`start`).
    _excluded: set[tuple[str, int]] = field(default_factory=set, repr=False)

    @property
    def ports(self) -> tuple[int, ...]:
        """Every local port sampled."""
        return (self.port, *(p for p in self.more_ports if p != self.port))

    def open(self) -> TcpSampler:
        """Open the netlink socket in the namespace (once per run)."""
        try:
            self._diag = _NamespaceDiagSocket(self.netns)
            self._diag.bind()
        except OSError as e:
            raise ResourceError(f"opening an inet_diag socket in namespace {self.netns}: {e}") from e
        return self

    def close(self) -> None:
        self.stop()
        if self._diag is not None:
            self._diag.close()
            self._diag = None

    def reset(self, cc_maps_dir: Path | None = None) -> None:
        """Forget the samples; sample the CC map of ``cc_maps_dir`` (or none) from now on."""
        self.rows = []
        self.errors = 0
        self.cc_maps_dir = cc_maps_dir
        self._excluded = set()

    # -- one sample ---------------------------------------------------------------------------

    def sample_once(self) -> int:
        """Take one sample of every flow now; return how many flows it saw."""
        if self._diag is None:
            raise RuntimeError("TcpSampler.open() was not called")
        now = time.time()
        messages = self._dump()
        claw = self._claw_flows()
        seen = 0
        for msg in messages:
            if msg["idiag_sport"] not in self.ports or (msg["idiag_dst"], msg["idiag_dport"]) in self._excluded:
                continue
            info = msg.get_attr("INET_DIAG_INFO")
            if info is None:
                continue
            seen += 1
            self.rows.append(self._row(now, msg, info, claw))
        return seen

    def _dump(self) -> list[Any]:
        # The kernel filters on the local port: a namespace shared with other UEs' senders
        # holds dozens of other flows, and decoding them all each period costs a core's tenth.
        # One dump per port (the filter takes one).
        return [msg for port in self.ports
                for msg in self._diag.get_sock_stats(family=socket.AF_INET, states=SS_ALL & ~(1 << SS_LISTEN),
                                                     extensions=_EXT_INFO | _EXT_CONG, sport=port)]

    def _claw_flows(self) -> dict[tuple[str, int], FlowStats]:
        """The CC's per-flow state keyed by (UE address, UE port); empty without a CLAW scheme."""
        if self.cc_maps_dir is None:
            return {}
        if self._flows_map is None:
            try:
                self._flows_map = open_map(self.cc_maps_dir, FLOWS_MAP)
            except ResourceError:
                return {}  # the pin is not there yet (set-up still running)
        flows: dict[tuple[str, int], FlowStats] = {}
        for raw_key, raw_value in self._flows_map.items():
            key = FlowKey.unpack(raw_key)
            flows[(key.ue_addr, key.ue_port)] = FlowStats.unpack(raw_value)
        return flows

    def _row(self, now: float, msg: Any, info: Any, claw: dict[tuple[str, int], FlowStats]) -> dict[str, Any]:
        peer = (msg["idiag_dst"], msg["idiag_dport"])
        mss = info["tcpi_snd_mss"]
        cwnd = info["tcpi_snd_cwnd"]
        ssthresh = info["tcpi_snd_ssthresh"]
        row: dict[str, Any] = {
            "t_unix_s": round(now, 6),
            "flow": f"{peer[0]}:{peer[1]}",
            "state": msg["idiag_state"],
            "ca_state": info["tcpi_ca_state"],
            "cc": msg.get_attr("INET_DIAG_CONG"),
            "cwnd_pkts": cwnd,
            "ssthresh_pkts": None if ssthresh >= _INFINITE_SSTHRESH else ssthresh,
            "mss_bytes": mss,
            "cwnd_bytes": cwnd * mss,
            "srtt_ms": info["tcpi_rtt"] / 1000.0,
            "rttvar_ms": info["tcpi_rttvar"] / 1000.0,
            "min_rtt_ms": info["tcpi_min_rtt"] / 1000.0,
            "unacked_pkts": info["tcpi_unacked"],
            "delivered_pkts": info["tcpi_delivered"],
            "bytes_acked": info["tcpi_bytes_acked"],
            "bytes_sent": info["tcpi_bytes_sent"],
            "retrans_total": info["tcpi_total_retrans"],
            "lost_pkts": info["tcpi_lost"],
            "pacing_rate_bps": None if info["tcpi_pacing_rate"] == _UNLIMITED_RATE else info["tcpi_pacing_rate"] * 8,
            "delivery_rate_bps": info["tcpi_delivery_rate"] * 8,
            # The receiver's advertised window as the sender sees it (what a receive-buffer cap
            # limits): 0 from kernels before tcpi_snd_wnd existed.
            "snd_wnd_bytes": info.get("tcpi_snd_wnd") or None,
            # Bytes the application wrote that the sender has not sent yet: > 0 means the
            # window, pacing or the receiver held data back (replay.airtime reads it).
            "notsent_bytes": info.get("tcpi_notsent_bytes"),
            "w_claw_bytes": None, "w_cubic_bytes": None, "claw_mode": None,
        }
        stats = claw.get(peer)
        if stats is not None:
            flow_mss = stats.mss_bytes or mss
            # W_claw is in force only once a report arrived; before, the map holds 0.
            row["w_claw_bytes"] = None if stats.applied == Applied.NO_FEEDBACK else stats.w_claw_pkts * flow_mss
            row["w_cubic_bytes"] = stats.w_cubic_pkts * flow_mss
            row["claw_mode"] = Applied(stats.applied).name.lower() if stats.applied in Applied._value2member_map_ \
                else str(stats.applied)
        return row

    # -- the sampling thread ------------------------------------------------------------------

    def start(self, leave_out_present: bool = False) -> None:
        """Sample every :attr:`period_s` on a thread until :meth:`stop`. ``leave_out_present``:
        the flows there now are an earlier load's, still closing (the server's socket waits in
        LAST_ACK for the UE's last ACK, a round trip through the cell, and the next load may
        begin first): their samples would be this load's under the earlier scheme's CC."""
        if self._thread is not None:
            raise RuntimeError("the sampler is already running")
        if leave_out_present:
            if self._diag is None:
                raise RuntimeError("TcpSampler.open() was not called")
            try:
                self._excluded = {(m["idiag_dst"], m["idiag_dport"]) for m in self._dump()
                                  if m["idiag_sport"] in self.ports}
            except (OSError, ValueError):
                self.errors += 1
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"tcp-sampler-{self.netns}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        # Absolute deadlines: a slow dump delays one sample, not every later one.
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except (OSError, ResourceError, ValueError):
                self.errors += 1
            next_t += self.period_s
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t = time.monotonic()  # fell behind: restart the grid rather than burst
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        """Stop sampling (idempotent) and let go of the CC's map (the scheme is about to go)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._flows_map is not None:
            with contextlib.suppress(OSError):
                self._flows_map.close()
            self._flows_map = None
