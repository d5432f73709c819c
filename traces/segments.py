"""What an imported log says about the cell, second by second, and the spans worth replaying.

An imported phone log marks each row's MCS as the log's own, inferred from the phone's
measurements, or held (``mcs_source``, FORMAT.md). Per second this module counts them and
the UE's own traffic; the *informative* seconds are those where the log gives the UE's own
link-adapted MCS in at least :data:`INFORMATIVE_SHARE` of the subframes (the cell was
sending to it, so the trace there is the log's, not the model's). Runs of them, bridged over
holes of up to :data:`MAX_HOLE_S` and at least :data:`MIN_SEGMENT_S` long, are the segments
(on a log without the UE's MCS, the lossy 0xB063 path: its scheduled subframes instead)
``clawbed trace info`` lists and ``clawbed trace import --segment`` cuts, best first (most
measured subframes), so a user replays the informative part of a long log rather than its
idle minutes.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from clawbed.errors import InputError
from clawbed.lte import SFN_CYCLE
from clawbed.traces.schema import Trace, make_trace

MS_PER_S = 1000
#: A second is informative when at least this share of its subframes carry the log's own MCS
#: (50 of 1000: five blocks per 100 ms, the scale of an RTT and of CLAW's window).
INFORMATIVE_SHARE = 0.05
#: Informative runs separated by at most this many seconds are one segment.
MAX_HOLE_S = 2
#: Shorter segments are not listed (a page load needs more).
MIN_SEGMENT_S = 2
#: Segments listed by ``trace info``.
LISTED_SEGMENTS = 5
#: Timeline symbols, per second: share of measured subframes ≥ 20 %, ≥ 5 %, > 0; none but
#: inferred; mostly held (no measurement near).
TIMELINE = {"high": "█", "some": "▓", "few": "░", "inferred": "·", "held": "?"}
TIMELINE_WIDTH_S = 60


def per_second(trace: Trace) -> dict[str, list[Any]] | None:
    """Per second of the trace (the last one partial): subframes measured, inferred and held,
    subframes the UE was scheduled in and its kbit received. None when the trace does not
    mark its MCS (no ``mcs_source``: not an imported phone log)."""
    source = trace.get("mcs_source")
    if source is None:
        return None
    n = trace.duration_ms
    sec = np.arange(n) // MS_PER_S
    n_s = int(sec[-1]) + 1

    def count(mask: np.ndarray) -> list[int]:
        return np.bincount(sec[mask], minlength=n_s).astype(int).tolist()

    own = trace.get("own_rbs")
    tbs = trace.get("own_tbs_bits")
    return {
        "measured": count(source == 0), "inferred": count(source == 1), "held": count(source == 2),
        "scheduled": count(own > 0) if own is not None else [0] * n_s,
        "ue_kbit": (np.bincount(sec, weights=tbs.astype(np.float64), minlength=n_s) / 1000).round(1).tolist()
        if tbs is not None else [0.0] * n_s,
    }


def informative_segments(seconds: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The segments (module doc), best first: ``start_s``, ``end_s`` (exclusive), measured
    subframes and share, the UE's Mbit/s over them. A log without an MCS of the UE's own
    (the lossy 0xB063 path) is judged by the subframes it was scheduled in instead."""
    basis = "measured" if sum(seconds["measured"]) else "scheduled"
    measured = np.array(seconds[basis], dtype=np.float64)
    good = measured >= INFORMATIVE_SHARE * MS_PER_S
    idx = np.flatnonzero(good)
    if len(idx) == 0:
        return []
    spans: list[list[int]] = [[int(idx[0]), int(idx[0]) + 1]]
    for i in idx[1:]:
        if i - spans[-1][1] <= MAX_HOLE_S:
            spans[-1][1] = int(i) + 1
        else:
            spans.append([int(i), int(i) + 1])
    kbit = np.array(seconds["ue_kbit"], dtype=np.float64)
    out = []
    for a, b in spans:
        if b - a < MIN_SEGMENT_S:
            continue
        m = int(measured[a:b].sum())
        out.append({"start_s": a, "end_s": b, "basis": basis, "measured_subframes": m,
                    "measured_share": round(m / ((b - a) * MS_PER_S), 4),
                    "ue_mbps": round(float(kbit[a:b].sum()) / 1000 / (b - a), 3)})
    return sorted(out, key=lambda s: (-s["measured_subframes"], s["start_s"]))


def channel_summary(trace: Trace) -> dict[str, Any] | None:
    """``trace info``'s channel part: totals, per second, the segments, the fit; None for a
    trace without ``mcs_source``."""
    seconds = per_second(trace)
    if seconds is None:
        return None
    n = trace.duration_ms
    prov = trace.metadata.get("provenance", {})
    fit = prov.get("channel", {})
    totals = {k: int(sum(seconds[k])) for k in ("measured", "inferred", "held")}
    return {
        **{f"{k}_subframes": v for k, v in totals.items()},
        **{f"{k}_share": round(v / n, 4) for k, v in totals.items()},
        "per_second": seconds,
        "segments": informative_segments(seconds),
        "segment_rule": f"seconds with ≥ {INFORMATIVE_SHARE:.0%} measured subframes, bridged over ≤ {MAX_HOLE_S} s, "
                        f"≥ {MIN_SEGMENT_S} s long; best (most measured subframes) first",
        "fit": fit.get("fit"), "no_fit_reason": fit.get("no_fit_reason"),
        "error_held_out": fit.get("error_held_out"), "longest_held_spans_ms": fit.get("longest_held_spans_ms", []),
        "segment_of_log": prov.get("segment"),
    }


def timeline(seconds: dict[str, list[Any]]) -> list[str]:
    """One symbol per second (:data:`TIMELINE`), :data:`TIMELINE_WIDTH_S` to a line."""
    chars = []
    for m, i, h in zip(seconds["measured"], seconds["inferred"], seconds["held"]):
        total = m + i + h
        if h * 2 >= total:
            chars.append(TIMELINE["held"])
        elif m >= 0.2 * total:
            chars.append(TIMELINE["high"])
        elif m >= INFORMATIVE_SHARE * total:
            chars.append(TIMELINE["some"])
        elif m > 0:
            chars.append(TIMELINE["few"])
        else:
            chars.append(TIMELINE["inferred"])
    return ["".join(chars[k:k + TIMELINE_WIDTH_S]) for k in range(0, len(chars), TIMELINE_WIDTH_S)]


def render_lines(summary: dict[str, Any]) -> list[str]:
    """``trace info``'s lines for :func:`channel_summary`'s result."""
    s = summary
    lines = [f"channel MCS: measured (the log's own) {s['measured_share']:.1%}, inferred from the UE's measurements "
             f"{s['inferred_share']:.1%}, held without a measurement near {s['held_share']:.1%}"]
    fit = s.get("fit")
    if fit:
        err = s.get("error_held_out") or {}
        bins = ", ".join(f"{b[0]:g}…{b[1]:g}: {b[2]}" for b in fit["bins"])
        lines.append(f"fit: median MCS by {fit['predictor']} ({fit['blocks']} own blocks) {bins}"
                     + (f"; held-out error {err['mae_mcs']:.2f} MCS (bias {err['bias_mcs']:+.2f}, "
                        f"{err['within_2_mcs']:.0%} within ±2)" if "mae_mcs" in err else ""))
    elif s.get("no_fit_reason"):
        lines.append(f"no fit: {s['no_fit_reason']}")
    if s["longest_held_spans_ms"]:
        spans = ", ".join(f"{n} ms at {t} ms" for t, n in s["longest_held_spans_ms"][:3])
        lines.append(f"held spans (no measurement near; longest): {spans}")
    if s.get("segment_of_log"):
        seg = s["segment_of_log"]
        lines.append(f"a segment of the log: {seg['from_ms']}–{seg['to_ms']} ms of {seg['of_ms']} ms")
    lines.append("per second (█ ≥ 20 % measured, ▓ ≥ 5 %, ░ some, · inferred only, ? mostly held):")
    for k, row in enumerate(timeline(s["per_second"])):
        lines.append(f"  {k * TIMELINE_WIDTH_S:5d} s  {row}")
    if s["segments"]:
        lines.append("segments worth replaying (" + s["segment_rule"] + "):")
        for seg in s["segments"][:LISTED_SEGMENTS]:
            lines.append(f"  --segment {seg['start_s']}:{seg['end_s']}  {seg['end_s'] - seg['start_s']} s, "
                         f"{seg['measured_share']:.0%} {seg['basis']}, the UE received {seg['ue_mbps']:.2f} Mbit/s")
    else:
        lines.append(f"no segment worth replaying: no second has ≥ {INFORMATIVE_SHARE:.0%} of its subframes "
                     "with the UE's own blocks")
    return lines


_SEGMENT = re.compile(r"^\s*(\d+(?:\.\d*)?)?\s*:\s*(\d+(?:\.\d*)?)?\s*$")


def parse_segment(text: str, trace: Trace) -> tuple[int, int]:
    """``--segment``: ``START:END`` in seconds of the trace (either may be empty: its start,
    its end) or ``best`` (the first of :func:`informative_segments`); (from_ms, to_ms),
    from_ms rounded down to a frame (10 ms) so SFNs stay exact."""
    n = trace.duration_ms
    if text.strip() == "best":
        seconds = per_second(trace)
        if seconds is None:
            raise InputError("--segment best: the trace does not mark its MCS (mcs_source), so it has no "
                             "measured seconds to choose from; give START:END in seconds")
        segs = informative_segments(seconds)
        if not segs:
            raise InputError(f"--segment best: no second has ≥ {INFORMATIVE_SHARE:.0%} measured subframes; "
                             "give START:END in seconds")
        a, b = segs[0]["start_s"] * MS_PER_S, min(segs[0]["end_s"] * MS_PER_S, n)
    else:
        m = _SEGMENT.match(text)
        if not m:
            raise InputError(f"--segment {text!r}: expected START:END in seconds (e.g. 12:40, :30, 600:) or best")
        a = round(float(m.group(1)) * MS_PER_S) if m.group(1) else 0
        b = round(float(m.group(2)) * MS_PER_S) if m.group(2) else n
    a -= a % 10
    if not 0 <= a < b or a >= n:
        raise InputError(f"--segment {text!r}: must be a non-empty span inside the trace's {n / MS_PER_S:g} s "
                         f"(START < END, START < {n / MS_PER_S:g})")
    return a, min(b, n)


def cut(trace: Trace, from_ms: int, to_ms: int) -> Trace:
    """Rows ``from_ms`` … ``to_ms − 1`` as a trace of their own (``from_ms`` a multiple of
    10: the start SFN moves by whole frames); the provenance records the cut."""
    if from_ms % 10:
        raise ValueError(f"a segment starts on a frame: {from_ms} ms is not a multiple of 10")
    meta = dict(trace.metadata)
    meta["start_sfn"] = (int(meta.get("start_sfn", 0)) + from_ms // 10) % SFN_CYCLE
    prov = dict(meta.get("provenance", {}))
    prov["segment"] = {"from_ms": from_ms, "to_ms": to_ms, "of_ms": trace.duration_ms,
                       "note": "rows from_ms … to_ms − 1 of the import; coverage and channel describe the whole log"}
    meta["provenance"] = prov
    cols = {k: v[from_ms:to_ms] for k, v in trace.columns.items() if k != "t_ms"}
    return make_trace(meta, **cols)
