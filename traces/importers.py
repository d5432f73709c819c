"""Import foreign traces into the PHY trace format (FORMAT.md), and export Mahimahi traces.

- :func:`import_mahimahi`: a Mahimahi delivery-opportunity trace (capacity only) mapped onto
  MCS / other users' RBs / layers, with the mapping and its worst-case error stated in the
  trace's provenance.
- :func:`import_decoder_csv`: the per-subframe CSV an LTE control-channel decoder writes
  (OWL, FALCON, LTEye-like tools): the cell's and the UE's RBs, the UE's MCS and TBS.
- :func:`export_mahimahi`: the UE's capacity alone in the cell → delivery opportunities.

Every error on an input names the file and line (and the column, for CSV).
"""

from __future__ import annotations

import csv
import hashlib
import re
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from clawbed.errors import InputError
from clawbed.files import atomic_write
from clawbed.lte import MAX_MCS, N_RB_BY_BANDWIDTH_MHZ, SFN_CYCLE, capacity_bits, tbs_grid
from clawbed.traces.schema import COLUMN_BY_NAME, Trace, make_trace, new_metadata

#: One Mahimahi delivery opportunity: one 1500-byte packet.
MAHIMAHI_PACKET_BYTES = 1500
MAHIMAHI_PACKET_BITS = 8 * MAHIMAHI_PACKET_BYTES
#: Window over which the Mahimahi mapping's error is stated, ms.
ERROR_WINDOW_MS = 100
#: Largest time of an imported row, ms: ``t_ms`` is a u32 and a trace has last + 1 rows.
MAX_T_MS = 2**32 - 2
#: Decoder TTIs written as SFN*10 + subframe wrap here, ms.
TTI_WRAP_MS = SFN_CYCLE * 10
#: A step back in TTI is read as a wrap only if the gap it implies is at most this, ms;
#: a longer implied gap is far likelier to be rows out of order.
MAX_WRAP_GAP_MS = TTI_WRAP_MS // 2
#: Largest recorded TBS the format holds (``own_tbs_bits`` range), bits.
MAX_TBS_BITS = int(COLUMN_BY_NAME["own_tbs_bits"].hi)
#: Highest MCS index a decoder may report (29..31 are retransmissions).
MAX_DCI_MCS = 31

#: Accepted header names of a decoder CSV, per column. Headers are matched after lowering
#: and turning every run of non-alphanumerics into one "_" (so "TBS (bits)" is "tbs_bits").
DECODER_COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "tti": ("tti", "t_ms", "time_ms", "timestamp_ms", "sfn_sf", "tti_ms"),
    "cell_prbs": ("cell_prbs", "cell_prb", "cell_rbs", "total_prbs", "total_prb", "total_rbs",
                  "prbs_total", "allocated_prbs", "cell_nprb"),
    "ue_prbs": ("ue_prbs", "ue_prb", "ue_rbs", "own_prbs", "own_rbs", "user_prbs", "ue_nprb",
                "nprb", "n_prb"),
    "mcs": ("mcs", "ue_mcs", "i_mcs", "imcs", "mcs_index", "mcs_idx"),
    "tbs": ("tbs", "tbs_bits", "ue_tbs", "ue_tbs_bits", "tb_size_bits", "tbs_size"),
}
_CANONICAL_BY_ALIAS = {a: name for name, aliases in DECODER_COLUMN_ALIASES.items() for a in aliases}


def _cell(bandwidth_mhz: float, n_antennas: int) -> tuple[float, int]:
    """(canonical bandwidth in MHz, N_rb) of a cell, or InputError for an invalid cell."""
    if n_antennas not in (1, 2):
        raise InputError(f"antennas {n_antennas}: must be 1 or 2")
    for bw, n_rb in N_RB_BY_BANDWIDTH_MHZ.items():
        if abs(bw - bandwidth_mhz) < 1e-6:
            return bw, n_rb
    raise InputError(f"bandwidth {bandwidth_mhz} MHz is not an LTE bandwidth "
                     f"({', '.join(str(b) for b in N_RB_BY_BANDWIDTH_MHZ)})")


def _read_bytes(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e


def _carry_forward(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``values`` where ``valid``; elsewhere the last valid value before (the first valid one
    before any). ``valid`` must have at least one True."""
    idx = np.where(valid, np.arange(len(values)), -1)
    np.maximum.accumulate(idx, out=idx)
    idx[idx < 0] = np.argmax(valid)
    return values[idx]


# --- Mahimahi ------------------------------------------------------------------------------


def read_mahimahi_ms(path: Path) -> tuple[np.ndarray, bytes]:
    """The delivery-opportunity timestamps (ms, int64, non-decreasing) of a Mahimahi trace,
    and the file's bytes. InputError naming file and line for any malformed line."""
    data = _read_bytes(path)
    if not data:
        raise InputError(f"{path}: empty file: a Mahimahi trace needs at least one line")
    text = data.replace(b"\r\n", b"\n")
    if not text.endswith(b"\n"):
        text += b"\n"
    # Whole-file checks run at C speed; only a malformed file is then read line by line.
    if text.translate(None, b"0123456789\n") or text.startswith(b"\n") or b"\n\n" in text:
        for i, line in enumerate(text.split(b"\n")):
            if not line.isdigit():
                raise InputError(f"{path}:{i + 1}: expected a whole number of ms since the trace "
                                 f"start, found {line.decode(errors='replace')!r}")
    ms = np.fromstring(text, dtype=np.int64, sep="\n")
    back = np.diff(ms) < 0
    if back.any():
        i = int(np.argmax(back)) + 1
        raise InputError(f"{path}:{i + 1}: time goes back from {ms[i - 1]} to {ms[i]} ms")
    # Times never go back, so the last is the largest. (Parsing saturates values beyond int64
    # at its maximum, which this catches too.)
    if ms[-1] > MAX_T_MS:
        i = int(np.argmax(ms > MAX_T_MS))
        raise InputError(f"{path}:{i + 1}: time beyond the format's {MAX_T_MS} ms")
    return ms, data


@dataclass(frozen=True)
class TbsLadder:
    """Every TBS the mapping may give one subframe, ascending, with the cell settings giving it.

    One-layer TBSs up to the one-layer maximum (the UE on the whole cell), then, with two
    antennas, the two-layer TBSs above it. For a TBS reachable several ways the most own RBs
    win (so ``other_rbs``, capacity a closed-loop scheduler could hand back, is smallest),
    then the lowest MCS. Entry 0 is 0 bits: no RBs for the UE.
    """

    bits: np.ndarray      #: TBS, bits (int64, strictly increasing, bits[0] = 0)
    mcs: np.ndarray       #: MCS giving it (entry 0: meaningless, the caller carries an MCS)
    own_rbs: np.ndarray   #: RBs of the UE: N_rb − other_rbs
    layers: np.ndarray    #: 1 or 2


def _best_per_tbs(grid: np.ndarray, layers: int) -> tuple[np.ndarray, ...]:
    """(bits, mcs, own_rbs, layers) per distinct non-zero TBS of ``grid[mcs, n_prb]``,
    keeping the most RBs, then the lowest MCS."""
    mcs, own = np.nonzero(grid)
    bits = grid[mcs, own]
    order = np.lexsort((mcs, -own, bits))  # by bits, then most RBs, then lowest MCS
    bits, mcs, own = bits[order], mcs[order], own[order]
    first = np.concatenate(([True], bits[1:] != bits[:-1]))
    return bits[first], mcs[first], own[first], np.full(int(first.sum()), layers)


@lru_cache(maxsize=16)
def tbs_ladder(n_rb: int, n_antennas: int) -> TbsLadder:
    """The :class:`TbsLadder` of a cell of ``n_rb`` RBs and ``n_antennas`` antennas."""
    no_rbs = tuple(np.array([v]) for v in (0, 0, 0, 1))  # (bits, mcs, own_rbs, layers)
    one = _best_per_tbs(tbs_grid(n_rb, 1), 1)
    parts = [no_rbs, one]
    if n_antennas == 2:
        two = _best_per_tbs(tbs_grid(n_rb, 2), 2)
        above = two[0] > one[0][-1]  # two layers only where one layer cannot carry it
        parts.append(tuple(a[above] for a in two))
    bits, mcs, own, layers = (np.concatenate(cols).astype(np.int64) for cols in zip(*parts))
    for a in (bits, mcs, own, layers):
        a.setflags(write=False)
    return TbsLadder(bits, mcs, own, layers)


def track_capacity(target_bits: np.ndarray, ladder_bits: np.ndarray) -> np.ndarray:
    """Per subframe, the index into ``ladder_bits`` (ascending, [0] = 0) that tracks
    ``target_bits`` by error feedback; returns int64 indices.

    Each subframe takes the smallest ladder TBS ≥ its target minus the surplus already
    delivered (the largest TBS when none is), so the cumulative delivered bits stay in
    [recorded, recorded + one ladder step) and fall behind only when the ladder's top clips
    a subframe; that deficit is carried into the following subframes, idle ones included.
    """
    levels = ladder_bits.tolist()
    top = len(levels) - 1  # bisecting levels[:top] returns top for anything above levels[top - 1]
    n = len(target_bits)
    targets = target_bits.tolist()
    # next_busy[k]: first subframe ≥ k with a non-zero target (n if none). Idle subframes
    # with no deficit to make up take TBS 0 and leave the surplus alone, so they are skipped.
    busy = np.flatnonzero(target_bits)
    next_busy = np.full(n + 1, n, dtype=np.int64)
    next_busy[busy] = busy
    next_busy = np.minimum.accumulate(next_busy[::-1])[::-1].tolist()
    choice = [0] * n
    surplus_bits = 0
    k = 0
    while k < n:
        target = targets[k]
        if target == 0 and surplus_bits >= 0:
            k = next_busy[k]
            continue
        i = bisect_left(levels, target - surplus_bits, 0, top)
        choice[k] = i
        surplus_bits += levels[i] - target
        k += 1
    return np.array(choice, dtype=np.int64)


def max_window_error_packets(delivered_bits: np.ndarray, target_bits: np.ndarray,
                             window_ms: int = ERROR_WINDOW_MS) -> int:
    """Largest |exported − recorded| delivery opportunities over any window of at most
    ``window_ms`` ms, when ``delivered_bits`` per ms are exported as :func:`export_mahimahi`
    does and ``target_bits`` are whole packets per ms.

    Exported opportunities in [s, e) are ⌊D_e/P⌋ − ⌊D_s/P⌋ with D the cumulative delivered
    bits and P the packet's bits; recorded ones are (R_e − R_s)/P with R a multiple of P; so
    the difference is q_e − q_s with q = ⌊(D − R)/P⌋, maximised over |e − s| ≤ window_ms.
    """
    drift = np.concatenate(([0], np.cumsum(delivered_bits) - np.cumsum(target_bits)))
    q = drift // MAHIMAHI_PACKET_BITS
    if len(q) <= window_ms + 1:
        return int(q.max() - q.min())
    windows = sliding_window_view(q, window_ms + 1)
    return int((windows.max(axis=1) - windows.min(axis=1)).max())


def import_mahimahi(path: Path, *, bandwidth_mhz: float, n_antennas: int) -> Trace:
    """Map a Mahimahi delivery-opportunity trace onto the PHY trace format.

    Millisecond k of the file (c_k = 12000 bits × its lines with timestamp k) becomes
    subframe k, rows 0..last timestamp. The cell (``bandwidth_mhz``, ``n_antennas``) is
    wholly this UE's except ``other_rbs``; (mcs, other_rbs, layers) are chosen per subframe
    by :func:`track_capacity` over :func:`tbs_ladder`. Subframes given no RBs get
    other_rbs = N_rb and keep the last MCS. The mapping, the error it guarantees per 100 ms
    (exact, computed on this trace) and the input's identity are in ``provenance``.

    Mahimahi loops a trace with a period of its last timestamp; this trace has one row more
    (the last ms itself), so a looping emulator's period is 1 ms longer.
    """
    path = Path(path)
    bandwidth_mhz, n_rb = _cell(bandwidth_mhz, n_antennas)
    ms, data = read_mahimahi_ms(path)
    duration_ms = int(ms[-1]) + 1
    target_bits = np.bincount(ms, minlength=duration_ms).astype(np.int64) * MAHIMAHI_PACKET_BITS

    ladder = tbs_ladder(n_rb, n_antennas)
    choice = track_capacity(target_bits, ladder.bits)
    delivered_bits = ladder.bits[choice]
    # The first busy ms starts with nothing delivered, so it always gets RBs: `given` has a True.
    given = choice > 0
    mcs = _carry_forward(ladder.mcs[choice], given)

    drift_bits = np.cumsum(delivered_bits) - np.cumsum(target_bits)
    max_surplus_bits = max(int(drift_bits.max()), 0)
    max_deficit_bits = max(int(-drift_bits.min()), 0)
    clipped_ms = int(np.count_nonzero((choice == len(ladder.bits) - 1)
                                      & (delivered_bits < target_bits)))
    max_error_bytes = MAHIMAHI_PACKET_BYTES * max_window_error_packets(delivered_bits, target_bits)
    max_step_bits = int(np.diff(ladder.bits).max())
    mapping = (
        f"Each ms of the Mahimahi trace (12000 bits per delivery opportunity) is one subframe in "
        f"which the whole {n_rb}-RB cell is this UE's except other_rbs, with (mcs, other_rbs, "
        f"layers) giving the smallest TBS(mcs, N_rb - other_rbs, layers) at or above the ms's "
        f"recorded bits minus the surplus already delivered (error feedback; two layers only "
        f"where one layer on the whole cell is too small; the most own RBs, then the lowest MCS, "
        f"for a given TBS; 0 opportunities give other_rbs = N_rb and keep the last MCS), so the "
        f"cumulative delivered bits stay between the recorded ones and one TBS step (at most "
        f"{max_step_bits} bits) above them, except where the cell's largest TBS "
        f"({int(ladder.bits[-1])} bits) clipped a ms ({clipped_ms} ms, the deficit carried into "
        f"the next subframes, at most {max_deficit_bits} bits behind); exported back to "
        f"Mahimahi it differs by at most {max_error_bytes} bytes in any 100 ms; the result is "
        f"faithful in the emulator's open-loop modes (background-first, mahimahi), whereas under "
        f"closed-loop proportional-fair the UE could claim the RBs in other_rbs that encode lost "
        f"capacity."
    )
    provenance = {
        "generator": "clawbed trace import --from mahimahi",
        "input_file": path.name,
        "input_sha256": hashlib.sha256(data).hexdigest(),
        "input_lines": len(ms),
        "input_span_ms": [int(ms[0]), int(ms[-1])],
        "bits_per_opportunity": MAHIMAHI_PACKET_BITS,
        "mapping": mapping,
        "max_error_bytes_per_100ms": max_error_bytes,
        "max_surplus_bits": max_surplus_bits,
        "max_deficit_bits": max_deficit_bits,
        "clipped_ms": clipped_ms,
    }
    metadata = new_metadata(bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas,
                            duration_ms=duration_ms, source="mahimahi", provenance=provenance,
                            description=f"imported from Mahimahi trace {path.name}")
    columns = {"mcs": mcs, "other_rbs": n_rb - ladder.own_rbs[choice]}
    if n_antennas == 2:
        columns["layers"] = ladder.layers[choice]
    return make_trace(metadata, **columns)


def mahimahi_opportunities_per_ms(trace: Trace) -> np.ndarray:
    """Delivery opportunities per subframe of the UE's capacity alone in the cell.

    Capacity is TBS(mcs, N_rb − other_rbs, layers) bits per subframe (HARQ failures and BLER
    ignored); bits accumulate and each full 12000 bits is one opportunity, the remainder
    carried to the next subframe.
    """
    own_rbs = trace.n_rb - trace["other_rbs"].astype(np.int64)
    bits = capacity_bits(trace["mcs"], own_rbs, trace.n_rb, trace.get("layers"))
    return np.diff(np.cumsum(bits) // MAHIMAHI_PACKET_BITS, prepend=0)


def export_mahimahi(trace: Trace, out_path: Path) -> int:
    """Write the UE's capacity alone in the cell as a Mahimahi trace; return its line count.

    One line ``t_ms`` per opportunity of :func:`mahimahi_opportunities_per_ms`, repeated for
    several in one ms. Mahimahi loops a trace at its last line, so trailing subframes with no
    opportunity shorten the loop. Written to a temporary file then renamed (atomic).
    """
    out_path = Path(out_path)
    per_ms = mahimahi_opportunities_per_ms(trace)
    busy = np.flatnonzero(per_ms)
    if len(busy) == 0:
        raise InputError(f"{out_path}: the trace gives the UE no capacity; a Mahimahi trace "
                         "needs at least one delivery opportunity")
    # One string per busy ms, not per line: a busy ms often has several opportunities.
    text = "".join(f"{t}\n" * n for t, n in zip(trace["t_ms"][busy].tolist(), per_ms[busy].tolist()))
    with atomic_write(out_path) as f:
        f.write(text.encode())
    return int(per_ms.sum())


# --- decoder CSV ---------------------------------------------------------------------------


def _normalise_header(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


def _decoder_header(path: Path, header: list[str]) -> tuple[dict[str, int], list[str]]:
    """(canonical column → field index, ignored header names) of a decoder CSV header."""
    where: dict[str, int] = {}
    ignored = []
    for i, raw in enumerate(header):
        name = _CANONICAL_BY_ALIAS.get(_normalise_header(raw))
        if name is None:
            ignored.append(raw)
        elif name in where:
            raise InputError(f"{path}:1: columns {header[where[name]]!r} and {raw!r} "
                             f"both mean {name!r}")
        else:
            where[name] = i
    missing = [n for n in DECODER_COLUMN_ALIASES if n not in where]
    if missing:
        accepted = "; ".join(f"{n}: {', '.join(a)}" for n, a in DECODER_COLUMN_ALIASES.items()
                             if n in missing)
        raise InputError(f"{path}:1: missing column(s) {', '.join(missing)} (accepted names: {accepted})")
    return where, ignored


def _decoder_rows(path: Path, text: str) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """(column → int64 values, file line of each row, ignored columns) of a decoder CSV."""
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        raise InputError(f"{path}: empty file: expected a header line then one row per subframe")
    where, ignored = _decoder_header(path, header)
    fields = list(where.items())
    values: dict[str, list[int]] = {name: [] for name in where}
    lines: list[int] = []
    for row in reader:
        if not any(f.strip() for f in row):
            continue  # blank lines carry no subframe
        line = reader.line_num
        for name, i in fields:
            try:
                values[name].append(int(row[i]))
            except IndexError:
                raise InputError(f"{path}:{line}: column {name!r}: missing (row has "
                                 f"{len(row)} fields)") from None
            except ValueError:
                raise InputError(f"{path}:{line}: column {name!r}: expected an integer, "
                                 f"found {row[i]!r}") from None
        lines.append(line)
    if not lines:
        raise InputError(f"{path}: no rows after the header")
    return ({n: np.array(v, dtype=np.int64) for n, v in values.items()},
            np.array(lines, dtype=np.int64), ignored)


def _check_range(path: Path, lines: np.ndarray, name: str, values: np.ndarray,
                 lo: np.ndarray | int, hi: np.ndarray | int, why: str) -> None:
    bad = (values < lo) | (values > hi)
    if bad.any():
        i = int(np.argmax(bad))
        lo_i = lo if isinstance(lo, int) else int(lo[i])
        hi_i = hi if isinstance(hi, int) else int(hi[i])
        raise InputError(f"{path}:{lines[i]}: column {name!r}: {values[i]} outside "
                         f"{lo_i}..{hi_i} ({why})")


def _unwrap_tti(path: Path, lines: np.ndarray, tti: np.ndarray) -> tuple[np.ndarray, int]:
    """(ms since the first row, number of 10240-ms wraps) of a TTI column.

    A step back is a wrap of SFN*10 + subframe when both TTIs are below 10240 and the gap it
    implies is at most 5120 ms; any other step back, or a repeated TTI, is an error.
    """
    step = np.diff(tti)
    wrap = step < 0
    for i in np.flatnonzero(step <= 0):
        prev, cur, line = int(tti[i]), int(tti[i + 1]), int(lines[i + 1])
        if prev == cur:
            raise InputError(f"{path}:{line}: column 'tti': {cur} repeats the previous row's TTI")
        if prev >= TTI_WRAP_MS or cur + TTI_WRAP_MS - prev > MAX_WRAP_GAP_MS:
            raise InputError(f"{path}:{line}: column 'tti': goes back from {prev} to {cur} "
                             f"(not a wrap at {TTI_WRAP_MS}: rows out of order?)")
    unwrapped = tti + TTI_WRAP_MS * np.concatenate(([0], np.cumsum(wrap)))
    return unwrapped - unwrapped[0], int(wrap.sum())


def import_decoder_csv(path: Path, *, bandwidth_mhz: float, n_antennas: int) -> Trace:
    """Import the per-subframe CSV of an LTE control-channel decoder.

    Columns (names per :data:`DECODER_COLUMN_ALIASES`, others ignored): ``tti`` (ms, or
    SFN*10 + subframe wrapping at 10240), ``cell_prbs`` (RBs allocated in the cell),
    ``ue_prbs`` (this UE's), ``mcs`` (the UE's, 0..31), ``tbs`` (the UE's TB, bits). Mapping:
    other_rbs = cell_prbs − ue_prbs, own_rbs = ue_prbs, own_tbs_bits = tbs; mcs is the UE's
    where it was scheduled with a new-transmission MCS (0..28), else carried from the last
    such subframe (the first such one before it); missing TTIs are filled by repeating the
    previous row. The mapping and the fill count are in ``provenance``.
    """
    path = Path(path)
    bandwidth_mhz, n_rb = _cell(bandwidth_mhz, n_antennas)
    data = _read_bytes(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start})") from None
    cols, lines, ignored = _decoder_rows(path, text)

    cell, ue, mcs, tbs = cols["cell_prbs"], cols["ue_prbs"], cols["mcs"], cols["tbs"]
    negative = cols["tti"] < 0
    if negative.any():
        i = int(np.argmax(negative))
        raise InputError(f"{path}:{lines[i]}: column 'tti': {cols['tti'][i]} is negative")
    _check_range(path, lines, "cell_prbs", cell, 0, n_rb, f"the {bandwidth_mhz} MHz cell has "
                 f"{n_rb} RBs; is --bandwidth-mhz right?")
    _check_range(path, lines, "ue_prbs", ue, 0, cell, "the UE's RBs are part of the cell's")
    _check_range(path, lines, "mcs", mcs, 0, MAX_DCI_MCS, "36.213 Table 7.1.7.1-1")
    _check_range(path, lines, "tbs", tbs, 0, MAX_TBS_BITS, "a TBS in bits")
    t_ms, wraps = _unwrap_tti(path, lines, cols["tti"])
    duration_ms = int(t_ms[-1]) + 1
    _check_range(path, lines, "tti", t_ms, 0, MAX_T_MS, "ms after the first row")

    channel = (ue > 0) & (mcs <= MAX_MCS)
    if not channel.any():
        raise InputError(f"{path}: no row schedules the UE (ue_prbs > 0) with a new-transmission "
                         f"MCS 0..{MAX_MCS}, so its channel MCS is unknown")
    mcs = _carry_forward(mcs, channel)
    # Row of each subframe: the last row at or before it, which fills gaps by repetition.
    row = np.searchsorted(t_ms, np.arange(duration_ms), side="right") - 1
    filled_ms = duration_ms - len(t_ms)
    mapping = (
        f"Each decoded subframe gives other_rbs = cell_prbs - ue_prbs, own_rbs = ue_prbs and "
        f"own_tbs_bits = tbs as recorded; mcs is the UE's MCS where it was scheduled with a "
        f"new-transmission MCS (0..{MAX_MCS}), carried from the last such subframe elsewhere "
        f"(and taken from the first one before it); the TTI was unwrapped at {TTI_WRAP_MS} "
        f"({wraps} wraps) and starts at 0 at the first row, and {filled_ms} missing subframes were "
        f"filled by repeating the previous row (other_rbs, own_rbs, own_tbs_bits and mcs kept)."
    )
    provenance = {
        "generator": "clawbed trace import --from decoder-csv",
        "input_file": path.name,
        "input_sha256": hashlib.sha256(data).hexdigest(),
        "input_rows": len(t_ms),
        "first_tti": int(cols["tti"][0]),
        "tti_wraps": wraps,
        "filled_ms": filled_ms,
        "ignored_columns": ignored,
        "mapping": mapping,
    }
    metadata = new_metadata(bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas,
                            duration_ms=duration_ms, source="decoder-csv", provenance=provenance,
                            description=f"imported from decoder CSV {path.name}")
    return make_trace(metadata, mcs=mcs[row], other_rbs=(cell - ue)[row], own_rbs=ue[row],
                      own_tbs_bits=tbs[row])


# --- phone diag logs and control-channel (DCI) logs -----------------------------------------


def import_mobileinsight(path: Path, *, bandwidth_mhz: float = 20.0, n_antennas: int = 2,
                         cell: int = 0, dci_path: Path | None = None,
                         dci_kind: str | None = None, infer_v48: bool = False) -> Trace:
    """Import a phone diag log (MobileInsight ``.mi2log``/``.qmdl``); rules in
    :mod:`clawbed.traces.diaglog.importer` and in the trace's provenance."""
    from clawbed.traces.diaglog.importer import import_mobileinsight as run

    return run(path, bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas, cell=cell,
               dci_path=dci_path, dci_kind=dci_kind, infer_v48=infer_v48)


def import_dci_log(path: Path, *, kind: str, bandwidth_mhz: float | None = None,
                   n_antennas: int = 2, rnti: int | None = None) -> Trace:
    """Import one UE of a FALCON (``kind="falcon"``) or NG-Scope (``"ngscope"``) log; rules
    in :mod:`clawbed.traces.diaglog.dci` and in the trace's provenance."""
    from clawbed.traces.diaglog.dci import import_dci

    return import_dci(path, kind=kind, bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas,
                      rnti=rnti)
