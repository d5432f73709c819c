"""Control-channel (DCI) decoder logs — FALCON and NG-Scope — as per-subframe cell load, and
their import as traces.

Formats: ``shared/docs/diag-log-format.md`` §6. Both are tab-separated, one row per decoded
downlink assignment (FALCON: every decoded DCI, uplink rows marked and skipped here;
NG-Scope: also one all-zero row per TTI without a DCI). Every error names the file and line.

Users: an RNTI in 61..65523 (0x003D..0xFFF3) is a C-RNTI, one user; RA-RNTIs (1..60) and
the M-/P-/SI-RNTI (65533..65535) are broadcast: their RBs are cell load, not a user.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.errors import InputError
from clawbed.lte import MAX_MCS, N_RB_BY_BANDWIDTH_MHZ
from clawbed.traces.diaglog.timing import SFN_PERIOD_MS, SfnClock
from clawbed.traces.schema import Trace, make_trace, new_metadata

FIRST_C_RNTI = 0x003D
LAST_C_RNTI = 0xFFF3
FALCON_FIELDS = 20
NGSCOPE_FIELDS = 14
#: Largest subframe span a DCI log may cover (a bad timestamp must not make a huge trace), ms.
MAX_SPAN_MS = 48 * 3600 * 1000


def is_c_rnti(rnti: int) -> bool:
    return FIRST_C_RNTI <= rnti <= LAST_C_RNTI


@dataclass
class DciLog:
    """Downlink DCI rows of a decoder log, each placed on one ms time line."""

    kind: str                 #: "falcon" or "ngscope"
    path: Path
    sha256: str
    abs_ms: np.ndarray        #: row time: SFN-exact ms on the log's clock (Unix ms)
    sfn_ms: np.ndarray        #: SFN × 10 + subframe
    rnti: np.ndarray
    prbs: np.ndarray          #: RBs of this assignment (0 on an NG-Scope empty-TTI row)
    cell_prbs: np.ndarray | None  #: NG-Scope: the cell's RBs in the row's TTI, as logged
    mcs: np.ndarray           #: TB0 MCS
    tbs_bits: np.ndarray      #: TBS of both blocks, bits
    two_tbs: np.ndarray       #: bool
    lines: np.ndarray         #: file line of each row
    reanchors: int
    uplink_rows: int = 0

    def cell_load(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(abs ms, SFN ms, cell RBs) of every subframe that has a row, sorted by time."""
        t, idx = np.unique(self.abs_ms, return_index=True)
        if self.cell_prbs is not None:
            load = np.zeros(len(t), dtype=np.int64)
            np.maximum.at(load, np.searchsorted(t, self.abs_ms), self.cell_prbs)
        else:
            load = np.bincount(np.searchsorted(t, self.abs_ms), weights=self.prbs,
                               minlength=len(t)).astype(np.int64)
        return t, self.sfn_ms[idx], load


def _int(path: Path, line: int, name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{path}:{line}: column {name!r}: expected an integer, found {text!r}") from None


def _float(path: Path, line: int, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{path}:{line}: column {name!r}: expected a number, found {text!r}") from None
    if not np.isfinite(value):
        raise InputError(f"{path}:{line}: column {name!r}: {text!r} is not finite")
    return value


def _check(path: Path, line: int, name: str, value: int, lo: int, hi: int) -> int:
    if not lo <= value <= hi:
        raise InputError(f"{path}:{line}: column {name!r}: {value} outside {lo}..{hi}")
    return value


def _lines(path: Path) -> tuple[list[str], bytes]:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return text.splitlines(), data


def detect_kind(path: Path) -> str:
    """"falcon" or "ngscope" from the first data line's field count."""
    lines, _ = _lines(path)
    for i, line in enumerate(lines, start=1):
        if line.strip():
            n = len(line.rstrip("\r").split("\t"))
            if n == FALCON_FIELDS:
                return "falcon"
            if n == NGSCOPE_FIELDS:
                return "ngscope"
            raise InputError(f"{path}:{i}: {n} tab-separated fields: neither a FALCON log "
                             f"({FALCON_FIELDS}) nor an NG-Scope DL log ({NGSCOPE_FIELDS})")
    raise InputError(f"{path}: empty file: no DCI rows")


def read_dci_log(path: Path, kind: str | None = None) -> DciLog:
    """Parse a FALCON (``kind="falcon"``) or NG-Scope DL (``"ngscope"``) log; ``None``
    detects it. InputError naming file and line for any malformed row."""
    path = Path(path)
    kind = kind or detect_kind(path)
    lines, data = _lines(path)
    expected = FALCON_FIELDS if kind == "falcon" else NGSCOPE_FIELDS
    rows: list[tuple[int, int, int, int, int, int, int, int, int]] = []
    cell: list[int] = []
    clock = SfnClock()
    uplink = 0
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        f = raw.rstrip("\r").split("\t")
        if len(f) != expected:
            raise InputError(f"{path}:{i}: {len(f)} tab-separated fields, expected {expected} "
                             f"({kind} log)")
        if kind == "falcon":
            clock_ms = _float(path, i, "timestamp", f[0]) * 1000.0
            # FALCON's SFN keeps counting past 1023 (1377 in the shared capture): wrap it.
            sfn = _check(path, i, "sfn", _int(path, i, "sfn", f[1]), 0, 2**31)
            sf = _check(path, i, "subframe", _int(path, i, "subframe", f[2]), 0, 9)
            sfn_ms = (sfn % 1024) * 10 + sf
            if _check(path, i, "direction", _int(path, i, "direction", f[4]), 0, 1) == 0:
                uplink += 1
                continue
            rnti = _check(path, i, "rnti", _int(path, i, "rnti", f[3]), 0, 65535)
            mcs = _check(path, i, "mcs_idx", _int(path, i, "mcs_idx", f[5]), 0, 31)
            prbs = _check(path, i, "nof_prb", _int(path, i, "nof_prb", f[6]), 0, 110)
            # -1: no TBS (e.g. MCS 29..31 with no earlier size known to the sniffer)
            tbs = max(_check(path, i, "tbs_sum", _int(path, i, "tbs_sum", f[7]), -1, 2**24), 0)
            two = _int(path, i, "tbs_1", f[9]) > 0
        else:
            sfn_ms = _check(path, i, "tti", _int(path, i, "tti", f[0]), 0, SFN_PERIOD_MS - 1)
            rnti = _check(path, i, "rnti", _int(path, i, "rnti", f[1]), 0, 65535)
            cell.append(_check(path, i, "cell_dl_prb", _int(path, i, "cell_dl_prb", f[2]), 0, 110))
            prbs = _check(path, i, "ue_prb", _int(path, i, "ue_prb", f[3]), 0, 110)
            mcs = _check(path, i, "tb0_mcs", _int(path, i, "tb0_mcs", f[4]), 0, 31)
            tbs0 = _check(path, i, "tb0_tbs", _int(path, i, "tb0_tbs", f[6]), 0, 2**24)
            tbs1 = _check(path, i, "tb1_tbs", _int(path, i, "tb1_tbs", f[9]), 0, 2**24)
            tbs, two = tbs0 + tbs1, tbs1 > 0
            clock_ms = _float(path, i, "timestamp_us", f[11]) / 1000.0
        t = clock.place(clock_ms, sfn_ms)
        rows.append((t, sfn_ms, rnti, prbs, mcs, tbs, int(two), i, 0))
    if not rows:
        raise InputError(f"{path}: no downlink DCI rows")
    a = np.array(rows, dtype=np.int64)
    span = int(a[:, 0].max() - a[:, 0].min())
    if span > MAX_SPAN_MS:
        raise InputError(f"{path}: rows span {span / 3.6e6:.1f} h: a timestamp is wrong "
                         f"(line {int(a[np.argmax(a[:, 0]), 7])} or {int(a[np.argmin(a[:, 0]), 7])})")
    return DciLog(kind, path, hashlib.sha256(data).hexdigest(), a[:, 0], a[:, 1], a[:, 2], a[:, 3],
                  np.array(cell, dtype=np.int64) if kind == "ngscope" else None, a[:, 4], a[:, 5],
                  a[:, 6].astype(bool), a[:, 7], clock.reanchors, uplink)


def bandwidth_for(max_rbs: int, source: str) -> float:
    """The smallest LTE bandwidth whose cell holds ``max_rbs`` RBs."""
    for bw, n_rb in sorted(N_RB_BY_BANDWIDTH_MHZ.items(), key=lambda kv: kv[1]):
        if max_rbs <= n_rb:
            return bw
    raise InputError(f"{source}: {max_rbs} RBs in one subframe: more than any LTE cell (100)")


def carry_forward(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``values`` where ``valid``; elsewhere the last valid value before (the first valid
    one before any). ``valid`` must have a True."""
    idx = np.where(valid, np.arange(len(values)), -1)
    np.maximum.accumulate(idx, out=idx)
    idx[idx < 0] = int(np.argmax(valid))
    return values[idx]


def import_dci(path: Path, *, kind: str | None = None, bandwidth_mhz: float | None = None,
               n_antennas: int = 2, rnti: int | None = None) -> Trace:
    """A trace of one UE of a FALCON or NG-Scope log (see the module doc; rules in the
    provenance's ``mapping``)."""
    log = read_dci_log(path, kind)
    path = Path(path)
    counts = Counter(r for r in log.rnti.tolist() if is_c_rnti(r))
    if rnti is None:
        if not counts:
            raise InputError(f"{path}: no C-RNTI (61..65523) has a downlink row: no user to import")
        rnti = min(counts, key=lambda r: (-counts[r], r))
        chosen = "most active C-RNTI (most downlink rows)"
    else:
        chosen = "given (--rnti)"
        if counts[rnti] == 0:
            top = ", ".join(f"{r} ({n} rows)" for r, n in counts.most_common(5))
            raise InputError(f"{path}: RNTI {rnti} has no downlink row; most active: {top}")

    t0_abs = int(log.abs_ms.min())
    first_sfn_ms = int(log.sfn_ms[np.argmin(log.abs_ms)])
    t0_abs -= first_sfn_ms % 10  # row 0 is subframe 0 of its frame
    start_sfn = (first_sfn_ms // 10) % 1024
    row = log.abs_ms - t0_abs
    duration = int(row.max()) + 1

    if log.cell_prbs is not None:
        cell = np.zeros(duration, dtype=np.int64)
        np.maximum.at(cell, row, log.cell_prbs)
    else:
        cell = np.bincount(row, weights=log.prbs, minlength=duration).astype(np.int64)
    # A sniffer's false decodes can overlap real assignments, so the cell size is inferred
    # from the largest single assignment (a whole-cell grant is common), not the busiest sum.
    max_grant = int(log.prbs.max()) if log.cell_prbs is None else int(log.cell_prbs.max())
    if bandwidth_mhz is None:
        bandwidth_mhz = bandwidth_for(max_grant, str(path))
        bw_rule = f"inferred: the smallest LTE cell holding the largest assignment ({max_grant} RBs)"
    else:
        bw_rule = "given (--bandwidth-mhz)"
    n_rb = N_RB_BY_BANDWIDTH_MHZ.get(bandwidth_mhz)
    if n_rb is None:
        raise InputError(f"bandwidth {bandwidth_mhz} MHz is not an LTE bandwidth")
    if max_grant > n_rb:
        line = int(log.lines[np.argmax((log.prbs if log.cell_prbs is None else log.cell_prbs) > n_rb)])
        raise InputError(f"{path}:{line}: an assignment of {max_grant} RBs, more than the "
                         f"{bandwidth_mhz} MHz cell's {n_rb}; is --bandwidth-mhz right?")
    clipped = int((cell > n_rb).sum())  # overlapping (false) decodes: more RBs than the cell
    cell = np.minimum(cell, n_rb)

    ue = log.rnti == rnti
    own = np.bincount(row[ue], weights=log.prbs[ue], minlength=duration).astype(np.int64)
    own = np.minimum(own, cell)
    tbs = np.bincount(row[ue], weights=log.tbs_bits[ue], minlength=duration).astype(np.int64)
    new_tx = ue & (log.mcs <= MAX_MCS) & (log.prbs > 0)
    if not new_tx.any():
        raise InputError(f"{path}: RNTI {rnti} is never scheduled with a new-transmission MCS "
                         f"0..{MAX_MCS}, so its channel MCS is unknown")
    mcs = np.zeros(duration, dtype=np.int64)
    valid = np.zeros(duration, dtype=bool)
    mcs[row[new_tx]] = log.mcs[new_tx]
    valid[row[new_tx]] = True
    mcs = carry_forward(mcs, valid)
    others = np.zeros(duration, dtype=np.int64)
    other_rows = np.array([is_c_rnti(r) and r != rnti for r in log.rnti.tolist()], dtype=bool)
    if other_rows.any():
        pairs = np.unique(np.stack([row[other_rows], log.rnti[other_rows]], axis=1), axis=0)
        others = np.bincount(pairs[:, 0], minlength=duration)
    columns: dict[str, np.ndarray] = {
        "mcs": mcs, "other_rbs": np.clip(cell - own, 0, n_rb - own), "own_rbs": own,
        "own_tbs_bits": np.minimum(tbs, 2**24), "other_users": np.minimum(others, 255)}
    if n_antennas == 2:
        two = np.zeros(duration, dtype=bool)
        two[row[ue & log.two_tbs]] = True
        columns["layers"] = np.where(carry_forward(two, valid), 2, 1)

    rows_with_dci = np.zeros(duration, dtype=bool)
    rows_with_dci[row] = True
    filled = 0
    if log.kind == "ngscope":
        # NG-Scope writes a row for every TTI, so a TTI without one was lost: repeat the
        # previous TTI's load there.
        filled = int(duration - rows_with_dci.sum())
        if filled:
            for name in ("other_rbs", "own_rbs", "own_tbs_bits", "other_users"):
                columns[name] = carry_forward(columns[name], rows_with_dci)
    mapping = (
        f"Per subframe (SFN-exact: SFN wraps resolved by the timestamps, {log.reanchors} "
        f"re-anchorings): cell RBs = "
        + ("the logged cell_dl_prb" if log.kind == "ngscope" else "the sum of nof_prb over the "
           "subframe's downlink DCIs (no DCI: 0)")
        + f"; own_rbs = the UE's (RNTI {rnti}, {chosen}); other_rbs = cell RBs - own_rbs, "
        "broadcast SI/P/RA-RNTI assignments included as load; other_users = distinct other "
        f"C-RNTIs scheduled; mcs = the UE's TB0 MCS where it has a new-transmission MCS "
        f"(0..{MAX_MCS}), held from the last such subframe elsewhere (the first one before it)"
        + ("; layers 2 where the UE's DCI carries two TBs, held likewise" if n_antennas == 2 else "")
        + "; own_tbs_bits = the UE's TBS as decoded. HARQ outcomes are not in a DCI log."
        + (f" {filled} TTIs without a row were filled with the previous TTI's." if filled else "")
        + (f" {clipped} subframes whose assignments sum to more than the cell's {n_rb} RBs "
           "(false decodes) were clipped to it." if clipped else ""))
    provenance: dict[str, Any] = {
        "generator": f"clawbed trace import --from {log.kind}",
        "input_file": path.name, "input_sha256": log.sha256,
        "input_rows": int(len(log.rnti)), "uplink_rows_skipped": log.uplink_rows,
        "rnti": rnti, "rnti_rule": chosen,
        "c_rntis": len(counts), "bandwidth_rule": bw_rule, "mapping": mapping,
        "coverage": {"subframes": duration, "subframes_with_data": int(rows_with_dci.sum()),
                     "ue_scheduled_subframes": int((own > 0).sum()), "filled_subframes": filled,
                     "clipped_subframes": clipped,
                     "timing_reanchors": log.reanchors},
    }
    metadata = new_metadata(bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas,
                            duration_ms=duration, source=log.kind, provenance=provenance,
                            start_sfn=start_sfn,
                            description=f"imported from {log.kind} log {path.name}")
    return make_trace(metadata, **columns)
