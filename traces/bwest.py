"""Passive bandwidth estimation from a server-side capture (LTE13 §6.1–6.2, fidelity row LTE-6).

The idea of the in-depth LTE study: while the server sends faster than the cell can carry,
the data queues at the bottleneck and the UE receives it at the available bandwidth; the
UE's ACKs say how many bytes it received, and the UE's TCP timestamps (TSval) say when, on
the UE's own clock — so a capture at the server alone gives the UE's receive rate.

Defaults from the fidelity table's parameter section (docs/fidelity-table.md §7 F, §7 H and
row LTE-6): the sending-rate threshold **C = 30 Mbit/s** (above any LTE capacity of the
study), the tick inference span **δ_G = 3 s** (< 0.1 % error in the paper), evaluation windows
of **1.0 s** (and 0.1 s), reported accuracy **mean error 7.9 %** at 1.0 s.

:func:`estimate` per downlink flow of the capture:

1. the UE's timestamp tick G: the capture time between two of the UE's ACKs at least δ_G
   apart over their TSval difference (median over such pairs); a flow without UE timestamps
   gives no samples (5.9 % of large flows in the paper);
2. *bursts*: maximal runs of new, in-order data segments the server sent at ≥ C (bytes sent
   before a segment over the time since the run's first one; a TSO super-packet is one
   instant);
3. per burst, the UE tick in which its first byte was acknowledged (a: the last ACK of the
   tick of the first ACK reaching it; an ACK of exactly everything before the burst only if it
   reached the server at least RTT_min after the burst left, so the link had not idled in
   between) and the tick of its last byte (b, the same way): the UE
   received ``ack_b − ack_a`` bytes in ``(TSval_b − TSval_a)·G``, each tick's bytes counted
   once. An LTE UE receives in batches (HARQ-retransmitted blocks release the blocks queued
   behind them in order), so a burst's edges fall inside one large ACK step; choosing the ACKs
   inside the burst instead left both edge steps out, and the fastest deliveries with them
   (−11 % on the typical preset). Skipped as the paper does: a burst with a retransmitted or
   out-of-order segment, a duplicate ACK from a to b, and any ACK of a loss recovery (from a
   duplicate ACK until the cumulative ACK passes what had been sent by then: a hole's repair
   acknowledges bytes that arrived earlier);
4. samples are placed on the UE's clock mapped to capture time (``TSval·G`` plus the smallest
   offset seen, minus ``uplink_delay_s`` when known), and a window's estimate is the bytes of
   its samples over their durations, in IP bytes (payload × (MSS + headers) / MSS, the
   flow's header size).

The capture is a pcap (link types RAW/IPv4, Ethernet, Linux cooked; µs or ns stamps), e.g.
``server.pcap`` of ``clawbed replay --capture-server`` (``replay/capture.py``) or tcpdump's.
"""

from __future__ import annotations

import socket
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clawbed.errors import InputError

#: LTE13 §6.1's sending-rate threshold, bit/s.
C_BPS = 30e6
#: LTE13 §6.1's span for inferring the UE's timestamp tick, s.
DELTA_G_S = 3.0
#: Evaluation window of the paper's lab check, s (0.1 s is the finer one).
WINDOW_S = 1.0
#: The paper's mean error at 1.0 s windows (lab, Carrier A, ~10 Mbit/s).
PAPER_MEAN_ERROR = 0.079

_LINKTYPE_L2 = {101: 0, 228: 0, 1: 14, 113: 16}


@dataclass
class Packet:
    t: float
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: int
    hdr: int
    tsval: int | None
    mss_opt: int | None


def read_pcap(path: Path) -> list[Packet]:
    """The IPv4 TCP packets of a pcap file, in file order."""
    raw = Path(path).read_bytes()
    if len(raw) < 24:
        raise InputError(f"{path}: not a pcap file (shorter than its header)")
    magic = struct.unpack_from("<I", raw, 0)[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        endian = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        endian = ">"
        magic = struct.unpack_from(">I", raw, 0)[0]
    else:
        raise InputError(f"{path}: not a pcap file (magic {magic:#x}; pcapng is not read: convert it to pcap)")
    frac = 1e-9 if magic == 0xA1B23C4D else 1e-6
    linktype = struct.unpack_from(endian + "I", raw, 20)[0]
    if linktype not in _LINKTYPE_L2:
        raise InputError(f"{path}: link type {linktype} is not read (RAW, IPv4, Ethernet or Linux cooked are)")
    l2 = _LINKTYPE_L2[linktype]
    out: list[Packet] = []
    pos = 24
    rec = struct.Struct(endian + "IIII")
    while pos + 16 <= len(raw):
        sec, frac_part, caplen, origlen = rec.unpack_from(raw, pos)
        pos += 16
        data = raw[pos:pos + caplen]
        pos += caplen
        if len(data) < caplen:
            break  # a capture cut short: its last record is incomplete
        p = _parse(data[l2:], sec + frac_part * frac, origlen - l2)
        if p is not None:
            out.append(p)
    return out


def _parse(data: bytes, t: float, length: int) -> Packet | None:
    if len(data) < 20 or data[0] >> 4 != 4 or data[9] != 6:
        return None
    ihl = (data[0] & 15) * 4
    (total,) = struct.unpack_from("!H", data, 2)
    length = max(length, total)
    if len(data) < ihl + 20:
        return None
    sport, dport, seq, ack, off_flags, _win = struct.unpack_from("!HHIIHH", data, ihl)
    doff = (off_flags >> 12) * 4
    flags = off_flags & 0x3F
    tsval = mss = None
    opts = data[ihl + 20:ihl + doff]
    i = 0
    while i < len(opts):
        kind = opts[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2:
            break
        olen = opts[i + 1]
        if kind == 8 and olen == 10 and i + 10 <= len(opts):
            tsval = struct.unpack_from("!I", opts, i + 2)[0]
        elif kind == 2 and olen == 4 and i + 4 <= len(opts):
            mss = struct.unpack_from("!H", opts, i + 2)[0]
        i += olen
    return Packet(t, socket.inet_ntoa(data[12:16]), socket.inet_ntoa(data[16:20]), sport, dport, seq, ack, flags,
                  max(length - ihl - doff, 0), ihl + doff, tsval, mss)


@dataclass
class FlowEstimate:
    """One downlink flow: (server addr, server port, UE addr, UE port)."""

    flow: tuple[str, int, str, int]
    data_bytes: int
    tick_s: float | None
    #: Samples: UE-clock start and end mapped to capture time (s), bytes received (IP bytes).
    samples: list[tuple[float, float, float]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass
class BandwidthEstimate:
    flows: list[FlowEstimate]
    c_bps: float
    delta_g_s: float
    uplink_delay_s: float

    @property
    def samples(self) -> np.ndarray:
        """All samples, (start, end, bytes) rows, by start."""
        rows = [s for f in self.flows for s in f.samples]
        arr = np.array(rows, dtype=np.float64).reshape(-1, 3)
        return arr[np.argsort(arr[:, 0])] if len(arr) else arr

    def windows(self, window_s: float = WINDOW_S, t0: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(window starts, estimated bit/s) for every window holding a sample's midpoint
        (NaN where none); windows start at ``t0`` (default: the first sample's start)."""
        s = self.samples
        if not len(s):
            return np.array([]), np.array([])
        t0 = s[0, 0] if t0 is None else t0
        mid = (s[:, 0] + s[:, 1]) / 2
        idx = np.floor((mid - t0) / window_s).astype(int)
        keep = idx >= 0
        n = int(idx[keep].max()) + 1 if keep.any() else 0
        nbytes = np.bincount(idx[keep], weights=s[keep, 2], minlength=n)
        dur = np.bincount(idx[keep], weights=s[keep, 1] - s[keep, 0], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(dur > 0, nbytes * 8 / dur, np.nan)
        return t0 + np.arange(n) * window_s, rate


def infer_tick(acks: list[Packet], delta_g_s: float = DELTA_G_S) -> float | None:
    """The UE's timestamp tick, s: capture time over TSval difference between ACKs at least
    ``delta_g_s`` apart (median over pairs one second apart); None without timestamps or span."""
    stamped = [(p.t, p.tsval) for p in acks if p.tsval is not None]
    if len(stamped) < 2 or stamped[-1][0] - stamped[0][0] < delta_g_s:
        return None
    t = np.array([s[0] for s in stamped])
    ts = np.array([s[1] for s in stamped], dtype=np.float64)
    ratios = []
    for start in np.arange(t[0], t[-1] - delta_g_s, 1.0):
        i = int(np.searchsorted(t, start))
        j = int(np.searchsorted(t, t[i] + delta_g_s))
        if j < len(t) and ts[j] > ts[i]:
            ratios.append((t[j] - t[i]) / (ts[j] - ts[i]))
    return float(np.median(ratios)) if ratios else None


def _flow_estimate(flow: tuple[str, int, str, int], data: list[Packet], acks: list[Packet], syn_mss: int | None,
                   c_bps: float, delta_g_s: float, uplink_delay_s: float) -> FlowEstimate:
    est = FlowEstimate(flow, sum(p.payload for p in data), infer_tick(acks, delta_g_s))
    skipped: dict[str, int] = defaultdict(int)
    est.skipped = skipped
    if est.tick_s is None or not data:
        skipped["no UE timestamps or too short for δ_G" if est.tick_s is None else "no data"] += 1
        return est
    g = est.tick_s
    hdr = int(np.median([p.hdr for p in data]))
    seg = (syn_mss - (hdr - 40)) if syn_mss else 1448  # payload per segment: MSS less TCP options
    ip_factor = (seg + hdr) / seg
    # Data: mark retransmitted / out-of-order segments (end not beyond the highest so far).
    t = np.array([p.t for p in data])
    start = np.array([p.seq for p in data], dtype=np.int64)
    end = start + np.array([p.payload for p in data], dtype=np.int64)
    base = start[0]
    start, end = (start - base) % (1 << 32), (end - base) % (1 << 32)  # relative (flows < 4 GB)
    new = np.ones(len(data), dtype=bool)
    high = -1
    for k in range(len(data)):
        new[k] = start[k] >= high
        high = max(high, end[k])
    # ACKs: relative, in order, with TSval; duplicates marked.
    stamped = [p for p in acks if p.tsval is not None]
    a_t = np.array([p.t for p in stamped])
    a_ack = (np.array([p.ack for p in stamped], dtype=np.int64) - base) % (1 << 32)
    a_ts = np.array([p.tsval for p in stamped], dtype=np.float64)
    a_dup = np.zeros(len(stamped), dtype=bool)
    a_dup[1:] = a_ack[1:] <= a_ack[:-1]
    # Loss recovery: from a duplicate ACK until the cumulative ACK passes the highest byte sent
    # before it; a repair's ACK acknowledges bytes the UE had received out of order, earlier.
    a_recovery = np.zeros(len(stamped), dtype=bool)
    sent_high = np.maximum.accumulate(end)
    recover_to = -1
    for i in range(len(stamped)):
        if a_dup[i]:
            last_sent = int(np.searchsorted(t, a_t[i], side="right")) - 1
            recover_to = max(recover_to, int(sent_high[last_sent]) if last_sent >= 0 else -1)
        a_recovery[i] = a_dup[i] or a_ack[i] < recover_to
    # The UE clock on capture time: the smallest (capture − TSval·G) is the least-delayed ACK.
    offset = float(np.min(a_t - a_ts * g)) - uplink_delay_s
    min_bytes_per_s = c_bps / 8
    # RTT_min: data segment → the first ACK covering it, the smallest.
    first_cover = np.searchsorted(a_ack, end, side="left")
    ok = first_cover < len(a_ack)
    rtts = a_t[first_cover[ok]] - t[ok]
    rtt_min = float(rtts[rtts > 0].min()) if (rtts > 0).any() else 0.0

    def tick_end(i: int) -> int:
        """The last ACK sent in the same UE tick as ACK ``i``."""
        while i + 1 < len(a_ts) and a_ts[i + 1] == a_ts[i]:
            i += 1
        return i

    k = 0
    n = len(data)
    while k < n:
        if not new[k] or data[k].payload == 0:
            k += 1
            continue
        j, sent, clean = k, data[k].payload, True
        while j + 1 < n:
            dt = t[j + 1] - t[k]
            if dt > 0 and sent / dt < min_bytes_per_s:
                break
            j += 1
            clean &= bool(new[j])
            sent += data[j].payload
        lo, hi, k0 = start[k], end[j], k
        k = j + 1
        if not clean:
            skipped["retransmission or reordering in the burst"] += 1
            continue
        # a, b: the ends of the ticks in which the burst's first and last bytes were acknowledged.
        ia, ib = (int(np.searchsorted(a_ack, edge, side="left")) for edge in (lo, hi))
        if ia < len(a_ack) and a_ack[ia] == lo and a_t[ia] < t[k0] + rtt_min:
            # It acknowledges all before the burst and left the UE before the burst could be
            # queued at the bottleneck: the link may have idled since; start at the burst's own.
            ia += 1
        if ib >= len(a_ack):
            skipped["burst too short for two ACKs"] += 1
            continue
        ia, ib = tick_end(ia), tick_end(ib)
        if ib <= ia:
            skipped["burst too short for two ACKs"] += 1
            continue
        if a_dup[ia + 1:ib + 1].any():
            skipped["duplicate ACK"] += 1
            continue
        if a_recovery[max(ia - 1, 0):ib + 1].any():
            skipped["loss recovery"] += 1
            continue
        # A sample may span 0 ticks: windows sum bytes and ticks, and TSval differences are
        # unbiased (dropping short samples would drop the fastest stretches).
        if a_ts[ib] < a_ts[ia]:
            skipped["TSval went back"] += 1
            continue
        received = float(a_ack[ib] - a_ack[ia]) * ip_factor
        est.samples.append((a_ts[ia] * g + offset, a_ts[ib] * g + offset, received))
    return est


def estimate(capture: Path | str, *, ue_address: str | None = None, c_bps: float = C_BPS,
             delta_g_s: float = DELTA_G_S, uplink_delay_s: float = 0.0, min_flow_bytes: int = 1_000_000) -> BandwidthEstimate:
    """LTE13's estimator on the capture (module docstring): every downlink TCP flow of at
    least ``min_flow_bytes`` (a "large" flow: > 1 MB) towards ``ue_address`` (default: any
    receiver)."""
    if c_bps <= 0:
        raise InputError(f"C {c_bps}: the sending-rate threshold must be positive")
    if delta_g_s <= 0:
        raise InputError(f"δ_G {delta_g_s}: must be positive")
    packets = read_pcap(Path(capture))
    by_flow: dict[tuple[str, int, str, int], list[Packet]] = defaultdict(list)
    for p in packets:
        key = (p.src, p.sport, p.dst, p.dport) if (p.src, p.sport) < (p.dst, p.dport) else \
            (p.dst, p.dport, p.src, p.sport)
        by_flow[key].append(p)
    flows = []
    for key, pkts in by_flow.items():
        ends = {(key[0], key[1]), (key[2], key[3])}
        sent = {e: sum(p.payload for p in pkts if (p.src, p.sport) == e) for e in ends}
        server = max(sent, key=lambda e: sent[e])
        ue = next(iter(ends - {server}), server)
        if sent[server] < min_flow_bytes or (ue_address is not None and ue[0] != ue_address):
            continue
        data = [p for p in pkts if (p.src, p.sport) == server and p.payload > 0]
        acks = [p for p in pkts if (p.src, p.sport) == ue and p.flags & 0x10 and not p.flags & 0x07]
        syn_mss = next((p.mss_opt for p in pkts if (p.src, p.sport) == ue and p.flags & 0x02 and p.mss_opt), None)
        flows.append(_flow_estimate((server[0], server[1], ue[0], ue[1]), data, acks, syn_mss, c_bps, delta_g_s,
                                    uplink_delay_s))
    return BandwidthEstimate(flows, c_bps, delta_g_s, uplink_delay_s)
