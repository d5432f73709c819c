"""When a phone's diag port delivers what it logged: records per log packet and how late.

A phone does not send one diag message per subframe as it happens. Its modem fills a log
packet with the records of several subframes and sends it later. Both show in a log: each
packet's header timestamp (the modem's clock when it sent the packet) against the frame and
subframe numbers of the records it carries.

Method (per log, all packets of 0xB173 PDSCH Stat, 0xB063 MAC DL Transport Block and 0xB193
Serving Cell Measurement that carry at least one frame/subframe number):

1. ``lag = timestamp ms − SFN ms of the packet's last record`` (SFN ms = (Frame Num mod
   1024) × 10 + Subframe Num). The two clocks differ by an unknown constant modulo the
   10 240-ms SFN period.
2. Segments: in file order, each lag is brought to the 10 240-ms alias nearest the segment's
   anchor (its first packet's lag); one more than :data:`SEGMENT_BREAK_MS` from it starts a
   new segment (a handover to a cell with other frame timing, a clock step: the T-Mobile log
   steps by ~695 ms), as the trace importer's ``timing.SfnClock`` does with a wider bound.
3. Alignment by the minimum: within a segment, ``delay = lag − min(lag)``: the promptest
   packet of the segment is taken as sent in its last record's subframe. The absolute delay
   from the modem to an application (USB, the diag driver) is not in a log and is not counted.
   Check of the alignment: packets sent because they were full are sent at once, and after
   the alignment their delays are 0–1 ms (the ``full_packet_delay_ms`` figures).
4. Per packet: ``records`` (records or samples it carries), ``subframes`` (distinct
   subframes among them), ``span_ms`` (first to last record) and ``delay_ms``.

Per log code the result has their distributions (quantiles) and the two parameters that
explain them: a packet is sent when it holds ``capacity_records`` records (the most any
packet held; "full") or at the modem's flush tick every ``flush_period_ms`` (the commonest
spacing of consecutive packets that were not full, to 10 ms). A full packet goes at once; a
flushed one is as late as its last record is old. ``phone_feed`` gives the emulator's
``diag.phone`` defaults: the 0xB173 parameters (the records CLAW reads). The rule is checked
per log (``packing_rule_check``, :func:`replay_packing`): replayed over the log's own records,
with the ticks at the phase the log's flushed packets show, it gives the packet sizes and
delays beside the measured ones.

Run: ``clawbed trace feed-timing LOG... -o out.json`` (or ``python -m clawbed.traces.diaglog.feedtiming``); the committed
result is ``traces/diaglog/phone-feed-timing.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.errors import InputError
from clawbed.traces.diaglog.log import decode_bytes
from clawbed.traces.diaglog.messages import LTE_MAC_DL_TB, LTE_PHY_PDSCH_STAT, LTE_PHY_SERV_CELL_MEAS
from clawbed.traces.diaglog.timing import HALF_PERIOD_MS, SFN_PERIOD_MS

#: The codes measured, with the names used in the result.
CODES: dict[int, str] = {LTE_PHY_PDSCH_STAT: "0xB173", LTE_MAC_DL_TB: "0xB063",
                         LTE_PHY_SERV_CELL_MEAS: "0xB193"}
#: A lag this far from its segment's anchor starts a new segment, ms: more than a packet's
#: lateness can vary within one (a flush period, 300 ms, and a few ms), less than the clock
#: steps met in the logs (~695 ms).
SEGMENT_BREAK_MS = 400
#: Quantiles reported, percent.
QUANTILES_PCT = (0, 5, 10, 25, 50, 75, 90, 95, 99, 100)
#: Flush periods are read to this many ms (the timestamps' tick is 1.25 ms; the spacing of
#: timer flushes wanders by about a ms).
FLUSH_PERIOD_STEP_MS = 10
#: Where the committed result lives (beside this module).
RESULT_FILE = Path(__file__).with_name("phone-feed-timing.json")


@dataclass(frozen=True)
class PacketTiming:
    """One log packet's records and lateness."""

    code: int
    index: int          #: packet number in the log (file order)
    time_ms: float      #: header timestamp, Unix ms
    records: int        #: records (0xB173) or samples (0xB063) or sub-packets (0xB193)
    subframes: int      #: distinct (SFN, subframe) among them
    span_ms: int        #: from the first record's subframe to the last's, inclusive
    last_sfn_ms: int    #: SFN ms of the last record
    segment: int        #: alignment segment (see the module doc)
    delay_ms: float     #: timestamp − last record's subframe, aligned by the segment's minimum
    sfn_ms: tuple[int, ...] = ()  #: SFN ms of each record, in order


def _sfn_list(code: int, message: dict[str, Any]) -> list[int]:
    """SFN ms (0..10239) of each record of a decoded packet, in order."""
    if code == LTE_PHY_PDSCH_STAT:
        return [(r["Frame Num"] % 1024) * 10 + r["Subframe Num"] % 10 for r in message["Records"]]
    if code == LTE_MAC_DL_TB:
        return [(s["SFN"] % 1024) * 10 + s["Sub-FN"] % 10
                for sp in message["Subpackets"] for s in sp["Samples"]]
    return [(sp["Current SFN"] % 1024) * 10 + sp["Current Subframe Number"] % 10
            for sp in message["Subpackets"] if "Current SFN" in sp]


def packet_timings(data: bytes) -> tuple[list[PacketTiming], dict[str, Any]]:
    """Every measured packet of a log held in memory, and what the decoding met."""
    log = decode_bytes(data, codes=set(CODES))
    raw: list[tuple[int, int, float, list[int]]] = []
    for i, p in enumerate(log.packets):
        sfns = _sfn_list(p.log_code, p.message)
        if sfns:
            raw.append((p.log_code, i, p.time_unix_s * 1000.0, sfns))
    # Segments and lags (step 2).
    lags = np.zeros(len(raw))
    segment = np.zeros(len(raw), dtype=np.int64)
    anchor: float | None = None
    seg = -1
    for k, (_code, _i, t, sfns) in enumerate(raw):
        lag = t - sfns[-1]
        if anchor is not None:
            d = (lag - anchor + HALF_PERIOD_MS) % SFN_PERIOD_MS - HALF_PERIOD_MS
            if abs(d) <= SEGMENT_BREAK_MS:
                lags[k], segment[k] = anchor + d, seg
                continue
        anchor, seg = lag, seg + 1
        lags[k], segment[k] = lag, seg
    # Alignment by the segment's minimum (step 3).
    delay = lags.copy()
    for s in range(seg + 1):
        sel = segment == s
        delay[sel] -= lags[sel].min()
    packets = [PacketTiming(code, i, t, len(sfns), len(set(sfns)), (sfns[-1] - sfns[0]) % SFN_PERIOD_MS + 1,
                            sfns[-1], int(segment[k]), float(delay[k]), tuple(sfns))
               for k, (code, i, t, sfns) in enumerate(raw)]
    segments = [{"packets": int((segment == s).sum()),
                 "first_packet_time_unix_s": round(float(min(p.time_ms for p in packets if p.segment == s)) / 1000, 3)}
                for s in range(seg + 1)]
    info = {"decoded": dict(sorted(log.stats.decoded.items())),
            "unknown_versions": dict(sorted(log.stats.unknown_versions.items())),
            "defects": dict(sorted(log.stats.defects_by_kind.items())), "segments": segments}
    return packets, info


def _quantiles(values: Sequence[float], digits: int = 1) -> dict[str, float] | None:
    if not values:
        return None
    q = np.percentile(np.asarray(values, dtype=np.float64), QUANTILES_PCT)
    return {f"p{p}": round(float(v), digits) for p, v in zip(QUANTILES_PCT, q)}


def _flush_period_ms(packets: list[PacketTiming], capacity: int) -> float | None:
    """The commonest spacing of consecutive packets that were not full, to
    :data:`FLUSH_PERIOD_STEP_MS` (a full packet goes out of turn; a period with no record
    sends nothing, so spacings of 2, 3 … periods also occur, less often)."""
    times = sorted(p.time_ms for p in packets if p.records < capacity)
    gaps = [round((b - a) / FLUSH_PERIOD_STEP_MS) * FLUSH_PERIOD_STEP_MS for a, b in zip(times, times[1:])]
    gaps = [g for g in gaps if g > 0]
    if not gaps:
        return None
    counts = Counter(gaps)
    best = max(counts.values())
    return float(min(g for g, c in counts.items() if c == best))


def summarize(packets: list[PacketTiming]) -> dict[str, Any]:
    """Distributions and parameters of one code's packets (from one or more logs)."""
    if not packets:
        return {"packets": 0}
    capacity = max(p.records for p in packets)
    full = [p for p in packets if p.records == capacity]
    flushed = [p for p in packets if p.records < capacity]
    return {
        "packets": len(packets),
        "records": sum(p.records for p in packets),
        "records_per_packet": _quantiles([p.records for p in packets], 0),
        "records_per_packet_mean": round(float(np.mean([p.records for p in packets])), 2),
        "subframes_per_packet": _quantiles([p.subframes for p in packets], 0),
        "span_ms": _quantiles([p.span_ms for p in packets], 0),
        "delay_ms": _quantiles([p.delay_ms for p in packets]),
        "delay_ms_mean": round(float(np.mean([p.delay_ms for p in packets])), 1),
        "capacity_records": capacity,
        "full_packets": len(full),
        "full_packet_delay_ms": _quantiles([p.delay_ms for p in full]),
        "flushed_packet_delay_ms": _quantiles([p.delay_ms for p in flushed]),
        "flush_period_ms": _flush_period_ms(packets, capacity),
    }


def _tick_phase_ms(packets: list[PacketTiming], capacity: int, period_ms: int) -> int:
    """Where in the period the flush ticks fall (ms of the timestamp clock modulo the period):
    the median phase of the packets that were not full near the phase most of them are
    within ±2 ms of."""
    phases = np.array([round(p.time_ms) % period_ms for p in packets if p.records < capacity])

    def offsets(k: int) -> np.ndarray:  # signed distance of each phase from k, ms
        return (phases - k + period_ms // 2) % period_ms - period_ms // 2

    best = int(np.argmax([(np.abs(offsets(k)) <= 2).sum() for k in range(period_ms)]))
    d = offsets(best)
    return int(round(best + float(np.median(d[np.abs(d) <= 2])))) % period_ms


def replay_packing(packets: list[PacketTiming], capacity: int, period_ms: int) -> dict[str, Any] | None:
    """The packing rule of the emulator's phone timing (``emulator/dataplane/src/diag/phone.rs``:
    a packet goes when it holds ``capacity`` records, else at a tick every ``period_ms``)
    replayed over one log's own records, placed at their aligned times: the delays and
    packet sizes it gives beside the log's. None for a log of several segments or too few
    packets to place the ticks."""
    if len({p.segment for p in packets}) != 1 or sum(p.records < capacity for p in packets) < 5:
        return None
    times = sorted({round(p.time_ms - p.delay_ms - (p.last_sfn_ms - s) % SFN_PERIOD_MS)
                    for p in packets for s in p.sfn_ms})
    phase = _tick_phase_ms(packets, capacity, period_ms)
    tick = times[0] - (times[0] - phase) % period_ms + period_ms
    sizes: list[int] = []
    delays: list[float] = []
    held, last = 0, 0
    for t in times:
        while tick <= t:  # a tick at t goes before the record of subframe t (phone.rs)
            if held:
                sizes.append(held)
                delays.append(float(tick - last))
                held = 0
            tick += period_ms
        held, last = held + 1, t
        if held == capacity:
            sizes.append(held)
            delays.append(0.0)
            held = 0
    if held:  # the last records go at the next tick
        sizes.append(held)
        delays.append(float(tick - last))
    return {"packets_measured": len(packets), "packets_modelled": len(sizes),
            "records_per_packet_measured": _quantiles([p.subframes for p in packets], 0),
            "records_per_packet_modelled": _quantiles(sizes, 0),
            "delay_ms_measured": _quantiles([p.delay_ms for p in packets]),
            "delay_ms_modelled": _quantiles(delays)}


def measure(paths: Sequence[Path]) -> dict[str, Any]:
    """The feed timing of the logs at ``paths``: per log and pooled, per code (module doc).
    InputError naming the file when one cannot be read."""
    logs: list[dict[str, Any]] = []
    pooled: dict[int, list[PacketTiming]] = {c: [] for c in CODES}
    for path in paths:
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror}") from e
        packets, info = packet_timings(data)
        per_code = {}
        for code, name in CODES.items():
            mine = [p for p in packets if p.code == code]
            pooled[code].extend(mine)
            if mine:
                per_code[name] = summarize(mine)
        entry: dict[str, Any] = {"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                                 **info, "codes": per_code}
        pdsch = [p for p in packets if p.code == LTE_PHY_PDSCH_STAT]
        if pdsch and per_code["0xB173"]["flush_period_ms"]:
            check = replay_packing(pdsch, per_code["0xB173"]["capacity_records"],
                                   int(per_code["0xB173"]["flush_period_ms"]))
            if check is not None:
                entry["packing_rule_check"] = check
        logs.append(entry)
    result: dict[str, Any] = {
        "what": "A phone's diag feed timing: records per log packet and how late the packet is sent "
                "after its last record's subframe (traces/diaglog/feedtiming.py).",
        "method": (__doc__ or "").split("Method", 1)[1].split("Run:", 1)[0].strip(),
        "logs": logs,
        "pooled": {name: summarize(pooled[code]) for code, name in CODES.items()},
    }
    pdsch = result["pooled"]["0xB173"]
    if pdsch["packets"]:
        result["phone_feed"] = {
            "records_per_packet": pdsch["capacity_records"],
            "flush_period_ms": pdsch["flush_period_ms"],
            "from": f"0xB173 over {pdsch['packets']} packets of "
                    f"{sum(1 for lg in logs if '0xB173' in lg['codes'])} logs: the most records a packet "
                    "held, and the commonest spacing of packets that were not full",
        }
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clawbed.traces.diaglog.feedtiming",
                                     description="Measure a phone's diag feed timing (records per log packet, "
                                                 "delay after the last record) from diag logs.")
    parser.add_argument("logs", nargs="+", type=Path, metavar="LOG", help=".mi2log or .qmdl files")
    parser.add_argument("-o", "--output", type=Path, help="write the JSON result here (default: stdout)")
    args = parser.parse_args(argv)
    try:
        result = measure(args.logs)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
