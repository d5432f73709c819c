"""The CLAW server agent: feedback in, per-UE window into the CC's map, echo out (UDP, one ``select`` loop).

For every datagram from a CLAW client:

1. decode and authenticate it (:func:`clawbed.claw.feedback.decode_feedback`: length,
   version, HMAC, value ranges), check the UE id against the sender's address when ids are
   bound to addresses (``--ue``), then reject replays (:class:`~clawbed.claw.feedback.ReplayGuard`);
   each refusal is counted by kind and changes nothing;
2. write the UE's entry of ``claw_peers`` (key: the UE's IPv4 address, the datagram's
   source): W_claw, the mode from the flags (wireline > saturated > cellular), the time of
   acceptance and the staleness limit (3 feedback periods: after that the CC falls back to
   its Cubic window);
3. answer with an :class:`~clawbed.claw.feedback.Echo` of the flows to that UE from
   ``claw_flows``: the smoothed RTT of the most recently acknowledged flow, the sum of the
   windows, and whether any was held back by the network at CLAW's window throughout the
   report's window T (the echo's "cwnd-limited" flag, :func:`limited_by_claws_window`).
   With no active flow the echo carries srtt 0 and cwnd 0 ("unknown").

The agent runs in the server's namespace (its socket must be there; the maps are reached
through pins in the run's bpffs, which any namespace can open). It logs its counters every
``--log-interval-s`` and on exit, and keeps them in ``--stats-file`` (JSON, replaced
atomically; written first when the socket is bound, so its existence means "ready"), and say
``ready agent pid=<pid>`` on ``--ready-file`` then (the scheme's readiness FIFO). With
``--wait-maps-s`` it may start before the congestion control has pinned its maps, and
opens them once they appear: its interpreter's start overlaps the BPF loads.

``python -m clawbed.claw.server.agent --help`` for the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import select
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from clawbed.claw.feedback import Echo, Feedback, FeedbackRejected, ReplayGuard, decode_feedback, read_key
from clawbed.claw.server.maps import FLOWS_MAP, PEERS_MAP, FlowFlag, FlowStats, Mode, Peer, addr_key
from clawbed.errors import ClawbedError, InputError

log = logging.getLogger("clawbed.claw.server.agent")

#: Shortest key accepted, bytes (as the client: HMAC-SHA256 keys of at least 16 bytes).
#: A report counts as absent once older than this many feedback periods (spec: 3).
STALE_PERIODS = 3
#: A flow is active for the echo when its last ACK is at most this old, ns.
ACTIVE_FLOW_NS = 1_000_000_000
#: Walk the whole flow map for a UE's flows at most this often, ns.
RESCAN_INTERVAL_NS = 1_000_000_000
#: ... and at most this often while none of the UE's known flows is active, ns: half the
#: default feedback period, so a new connection is found by the first report after it
#: (a limit of one period would skip every other report when they arrive a little early).
RESCAN_IDLE_INTERVAL_NS = 50_000_000
#: How often the maps' pins are looked for while the congestion control loads, s.
PIN_POLL_S = 0.002
WRONG_SOURCE = "wrong-source"
MAP_ERROR = "map-error"


class AgentError(ClawbedError):
    """The agent cannot start: says which input or resource and why."""


class WritableMap(Protocol):
    """What the agent needs of ``claw_peers`` (a :class:`~clawbed.claw.server.bpfmap.BpfMap`)."""

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None: ...


class ReadableMap(Protocol):
    """What the agent needs of ``claw_flows``."""

    def lookup(self, key: bytes) -> bytes | None: ...

    def keys(self) -> Iterable[bytes]: ...


def mode_of(fb: Feedback) -> Mode:
    """The server mode a report asks for: a wireline bottleneck overrides saturation."""
    if fb.wireline:
        return Mode.WIRELINE
    if fb.saturated:
        return Mode.SATURATED
    return Mode.CELLULAR


@dataclass
class Counters:
    """What the agent did, by kind (reported in logs and the stats file)."""

    accepted: int = 0
    echoes: int = 0
    rejected: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {"accepted": self.accepted, "echoes": self.echoes, "rejected": dict(self.rejected),
                "rejected_total": sum(self.rejected.values())}


class Agent:
    """The agent's logic without I/O: one datagram in, maybe one echo out."""

    def __init__(self, key: bytes, peers: WritableMap, flows: ReadableMap, *, period_ms: int = 100,
                 ue_addresses: dict[int, str] | None = None,
                 clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        if period_ms < 1:
            raise ValueError(f"feedback period {period_ms} ms: must be at least 1")
        self.key = key
        self.peers = peers
        self.flows = flows
        self.stale_after_ns = STALE_PERIODS * period_ms * 1_000_000
        self.ue_addresses = {ue: str(ipaddress.IPv4Address(a)) for ue, a in (ue_addresses or {}).items()}
        self.clock_ns = clock_ns
        self.guard = ReplayGuard()
        self.counters = Counters()
        self.last: dict[str, dict[str, object]] = {}
        self._flow_keys: dict[bytes, list[bytes]] = {}
        self._last_scan_ns: int | None = None

    def handle(self, data: bytes, source: tuple[str, int]) -> bytes | None:
        """Act on one datagram from ``source``; the echo to send back, or None if refused."""
        try:
            fb = decode_feedback(data, self.key)
        except FeedbackRejected as e:
            return self._reject(e.reason.value, source, str(e))
        bound = self.ue_addresses.get(fb.ue_id)
        if bound is not None and bound != source[0]:
            return self._reject(WRONG_SOURCE, source, f"UE {fb.ue_id} is bound to {bound}")
        try:
            self.guard.check(fb)
        except FeedbackRejected as e:
            return self._reject(e.reason.value, source, str(e))

        now = self.clock_ns()
        mode = mode_of(fb)
        ue_key = addr_key(source[0])
        peer = Peer(updated_ns=now, stale_after_ns=self.stale_after_ns, w_claw_bytes=fb.w_claw_bytes,
                    mode=int(mode), seq=fb.seq, window_ms=fb.window_ms)
        try:
            self.peers.update(ue_key, peer.pack())
        except ClawbedError as e:  # BpfError: the map is gone or full
            log.warning("writing the report of %s into %s: %s", source[0], PEERS_MAP, e)
            return self._reject(MAP_ERROR, source, str(e))
        self.counters.accepted += 1
        srtt_us, cwnd, limited = self.flow_summary(ue_key, now, fb.window_ms)
        self.last[source[0]] = {"ue_id": fb.ue_id, "seq": fb.seq, "w_claw_bytes": fb.w_claw_bytes,
                                "mode": mode.name.lower(), "srtt_us": srtt_us, "cwnd_packets": cwnd,
                                "cwnd_limited": limited}
        self.counters.echoes += 1
        return Echo(ue_id=fb.ue_id, seq=fb.seq, srtt_us=srtt_us, cwnd_packets=cwnd,
                    cwnd_limited=limited).encode(self.key)

    def _reject(self, kind: str, source: tuple[str, int], detail: str) -> bytes | None:
        """Count a refusal by kind; None (no echo), what :meth:`handle` returns then."""
        self.counters.rejected[kind] += 1
        log.debug("rejected a datagram from %s:%d: %s", source[0], source[1], detail)
        return None

    def _rescan(self, now: int) -> None:
        groups: dict[bytes, list[bytes]] = {}
        for key in self.flows.keys():
            groups.setdefault(bytes(key[:4]), []).append(bytes(key))
        self._flow_keys = groups
        self._last_scan_ns = now

    def _active_flows(self, ue_key: bytes, now: int) -> list[FlowStats]:
        active: list[FlowStats] = []
        for key in self._flow_keys.get(ue_key, []):
            raw = self.flows.lookup(key)
            if raw is None:
                continue
            st = FlowStats.unpack(raw)
            if st.flags & FlowFlag.RELEASED or now - st.updated_ns > ACTIVE_FLOW_NS:
                continue
            active.append(st)
        return active

    def flow_summary(self, ue_key: bytes, now: int, window_ms: int) -> tuple[int, int, bool]:
        """(srtt µs, cwnd packets, the echo's flag) over the UE's active flows; zeros if none.

        The flow map is walked once a second, and sooner (at most every
        ``RESCAN_IDLE_INTERVAL_NS``) when none of the UE's known flows is active, so a new
        connection is found by the next report without walking the whole map for every
        report."""
        since_scan = None if self._last_scan_ns is None else now - self._last_scan_ns
        if since_scan is None or since_scan >= RESCAN_INTERVAL_NS:
            self._rescan(now)
            since_scan = 0
        active = self._active_flows(ue_key, now)
        if not active and since_scan >= RESCAN_IDLE_INTERVAL_NS:
            self._rescan(now)
            active = self._active_flows(ue_key, now)
        if not active:
            return 0, 0, False
        latest = max(active, key=lambda s: s.updated_ns)
        window_ns = window_ms * 1_000_000
        limited = any(limited_by_claws_window(s, now, window_ns) for s in active)
        return latest.srtt_us, sum(s.cwnd_pkts for s in active), limited

    def report(self) -> dict[str, object]:
        return {**self.counters.as_dict(), "peers": self.last}


def limited_by_claws_window(st: FlowStats, now_ns: int, window_ns: int) -> bool:
    """The echo's "cwnd-limited" flag for one flow: held back by the network at CLAW's
    window on every ACK of the last ``window_ns`` (the report's T), up to now — the run the
    CC keeps in ``claw_limited_since_ns``: cwnd-limited, or a segment written and not sent
    with the receive window open (TCP small queues or pacing holding it: a bottleneck at the
    server's own link), in cellular or saturated mode, and no W_claw cap after a loss the
    UE flagged as a base-station overflow.

    Stricter than "cwnd-limited at some point in the window" because the client's
    bottleneck detector reads the flag as "the server offered W_claw throughout the window
    whose RBs I counted": a flow in its initial window, capped by a stale report, an
    overflow loss or an RTO, or held to a W_cubic below W_claw in wireline mode, is cwnd-limited too, yet
    uses fewer RBs than N_f on any path (claw/DESIGN.md, Bottleneck detector).
    """
    since = st.claw_limited_since_ns
    return since != 0 and now_ns - since >= window_ns and now_ns - st.updated_ns <= window_ns


@dataclass
class AgentConfig:
    listen: tuple[str, int]
    key: bytes
    bpffs: Path
    period_ms: int = 100
    ue_addresses: dict[int, str] = field(default_factory=dict)
    stats_file: Path | None = None
    log_interval_s: float = 10.0
    netns: str | None = None
    #: Say ``ready agent pid=<pid>`` here once serving (a file, or a launcher's FIFO).
    ready_file: Path | None = None
    #: Wait up to this long for the maps' pins to appear (the agent may start while the
    #: congestion control is still loading), s; 0: they must be there.
    wait_maps_s: float = 0.0


def _write_stats(path: Path | None, payload: dict[str, object]) -> None:
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
    os.replace(tmp, path)


def open_socket(listen: tuple[str, int], netns: str | None) -> socket.socket:
    """The agent's UDP socket, bound, in ``netns`` if given (else where this process runs)."""
    try:
        if netns:
            from clawbed.setns import socket_in_namespace  # not clawbed.netns: no pyroute2
            sock = socket_in_namespace(netns, socket.AF_INET, socket.SOCK_DGRAM)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(listen)
    except OSError as e:
        raise AgentError(f"binding UDP {listen[0]}:{listen[1]}: {e.strerror}") from e
    except ClawbedError as e:
        raise AgentError(f"binding UDP {listen[0]}:{listen[1]}: {e}") from e
    sock.setblocking(False)
    return sock


def _wait_for_pins(bpffs: Path, names: Sequence[str], timeout_s: float) -> None:
    """Return once every pin ``bpffs/<name>`` exists, or ``timeout_s`` passed (the open
    that follows then says which is missing)."""
    deadline = time.monotonic() + timeout_s
    while not all((bpffs / n).exists() for n in names) and time.monotonic() < deadline:
        time.sleep(PIN_POLL_S)


def signal_ready(path: Path) -> None:
    """Append ``ready agent pid=<pid>`` to ``path`` (non-blocking: a FIFO whose reader went
    away is an error, not a hang)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
        try:
            os.write(fd, f"ready agent pid={os.getpid()}\n".encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise AgentError(f"--ready-file {path}: {e.strerror or e}") from e


def serve(config: AgentConfig) -> dict[str, object]:
    """Serve until SIGTERM or SIGINT; the final report.

    A plain ``select`` loop over the socket and a signal wake-up pipe rather than asyncio:
    the agent starts once per load, and importing asyncio took about as long as the rest of
    its start."""
    from clawbed.claw.server.bpfmap import BpfError, BpfMap

    stopping: list[int] = []
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    previous = {s: signal.signal(s, lambda signum, _frame: stopping.append(signum))
                for s in (signal.SIGTERM, signal.SIGINT)}
    previous_wakeup = signal.set_wakeup_fd(wake_w)  # a signal between two selects wakes the next
    maps = []
    sock: socket.socket | None = None
    try:
        _wait_for_pins(config.bpffs, (PEERS_MAP, FLOWS_MAP), config.wait_maps_s)
        for name in (PEERS_MAP, FLOWS_MAP):
            try:
                maps.append(BpfMap.open_pinned(config.bpffs / name))
            except BpfError as e:
                raise AgentError(f"{e} (is the CLAW congestion control registered with bpffs {config.bpffs}?)") from e
        agent = Agent(config.key, maps[0], maps[1], period_ms=config.period_ms, ue_addresses=config.ue_addresses)
        sock = open_socket(config.listen, config.netns)
        started = time.monotonic()
        info = {"listen": f"{config.listen[0]}:{config.listen[1]}", "pid": os.getpid()}
        _write_stats(config.stats_file, {**info, "ready": True, **agent.report()})
        if config.ready_file is not None:
            signal_ready(config.ready_file)
        log.info("listening on %s:%d, maps in %s, period %d ms", *config.listen, config.bpffs, config.period_ms)
        next_log = started + config.log_interval_s
        while not stopping:
            readable, _, _ = select.select([sock.fileno(), wake_r], [], [], max(0.0, next_log - time.monotonic()))
            if sock.fileno() in readable:
                _serve_datagrams(agent, sock)
            if wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 64)
            if time.monotonic() >= next_log:
                next_log += config.log_interval_s
                counts = agent.counters.as_dict()
                log.info("accepted %d, rejected %d %s", counts["accepted"], counts["rejected_total"],
                         counts["rejected"])
                _write_stats(config.stats_file, {**info, "ready": True, "uptime_s": time.monotonic() - started,
                                                 **agent.report()})
        report = {**info, "ready": False, "uptime_s": time.monotonic() - started, **agent.report()}
        _write_stats(config.stats_file, report)
        return report
    finally:
        if sock is not None:
            sock.close()
        for m in maps:
            m.close()
        signal.set_wakeup_fd(previous_wakeup)
        for s, handler in previous.items():
            signal.signal(s, handler)
        os.close(wake_r)
        os.close(wake_w)


def _serve_datagrams(agent: Agent, sock: socket.socket) -> None:
    """Answer every datagram waiting on ``sock``."""
    while True:
        try:
            data, addr = sock.recvfrom(2048)
        except BlockingIOError:
            return
        except OSError as e:  # e.g. an ICMP error queued on the socket
            log.warning("socket error: %s", e)
            return
        echo = agent.handle(data, addr)
        if echo is not None:
            try:
                sock.sendto(echo, addr)
            except OSError as e:
                log.warning("echo to %s:%d: %s", addr[0], addr[1], e)


def parse_endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not HOST:PORT")
    try:
        ipaddress.IPv4Address(host)
        port_n = int(port)
    except ValueError as e:
        raise ValueError(f"{text!r} is not IPv4-ADDRESS:PORT") from e
    if not 0 <= port_n <= 65535:
        raise ValueError(f"port {port_n} outside 0..65535")
    return host, port_n


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m clawbed.claw.server.agent",
        description="The CLAW server agent: accepts authenticated feedback from CLAW clients, writes each UE's "
                    "window into the claw/cqic congestion control's map, and echoes the flow's RTT and cwnd.",
        epilog="Example (in the server namespace): python -m clawbed.claw.server.agent --listen 10.64.0.1:7070 "
               "--bpffs runs/x/bpffs --key-file runs/x/key --stats-file runs/x/agent.json")
    p.add_argument("--listen", required=True, metavar="ADDR:PORT", help="UDP address to receive feedback on")
    p.add_argument("--bpffs", required=True, type=Path,
                   help="the run's bpffs directory holding the pinned claw_peers and claw_flows maps")
    p.add_argument("--key-file", required=True, type=Path,
                   help="file holding the key shared with the clients (its exact bytes, ≥ 16)")
    p.add_argument("--period-ms", type=int, default=100,
                   help="the clients' feedback period; a report older than 3 periods counts as absent (default 100)")
    p.add_argument("--ue", action="append", default=[], metavar="ID=ADDR",
                   help="accept UE id ID only from IPv4 address ADDR (repeatable; default: any id from any address)")
    p.add_argument("--netns", help="network namespace to open the socket in (default: where this process runs)")
    p.add_argument("--stats-file", type=Path, help="JSON file kept up to date with the counters")
    p.add_argument("--ready-file", type=Path,
                   help="once serving, append a line 'ready agent pid=<pid>' to this file or FIFO (a launcher's "
                        "readiness signal; the stats file says ready too)")
    p.add_argument("--wait-maps-s", type=float, default=0.0,
                   help="wait up to this long for the maps' pins in --bpffs (the agent may start while the "
                        "congestion control loads) (default 0: they must be there)")
    p.add_argument("--log-interval-s", type=float, default=10.0, help="log the counters this often (default 10)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every rejected datagram")
    return p


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> AgentConfig:
    try:
        listen = parse_endpoint(args.listen)
    except ValueError as e:
        parser.error(f"--listen: {e}")
    if args.period_ms < 1:
        parser.error(f"--period-ms {args.period_ms}: must be at least 1")
    if args.log_interval_s <= 0:
        parser.error("--log-interval-s must be positive")
    if not 0 <= args.wait_maps_s <= 600:
        parser.error(f"--wait-maps-s {args.wait_maps_s}: must be 0..600")
    ues: dict[int, str] = {}
    for item in args.ue:
        ue, sep, addr = item.partition("=")
        try:
            if not sep:
                raise ValueError("expected ID=ADDR")
            ue_id = int(ue)
            if not 0 <= ue_id <= 0xFFFF:
                raise ValueError(f"UE id {ue_id} outside 0..65535")
            ues[ue_id] = str(ipaddress.IPv4Address(addr))
        except ValueError as e:
            parser.error(f"--ue {item}: {e}")
    if not args.bpffs.is_dir():
        parser.error(f"--bpffs {args.bpffs}: no such directory")
    if args.netns and not Path(f"/var/run/netns/{args.netns}").exists():
        parser.error(f"--netns {args.netns}: no such network namespace")
    try:
        key = read_key(args.key_file)
    except InputError as e:
        parser.error(f"--key-file: {e}")
    return AgentConfig(listen=listen, key=key, bpffs=args.bpffs, period_ms=args.period_ms, ue_addresses=ues,
                       stats_file=args.stats_file, log_interval_s=args.log_interval_s, netns=args.netns,
                       ready_file=args.ready_file, wait_maps_s=args.wait_maps_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="claw-agent %(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    config = config_from_args(args, parser)
    try:
        report = serve(config)
    except ClawbedError as e:
        print(f"claw-agent: error: {e}", file=sys.stderr)
        return 1
    print("claw-agent " + json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
