"""Import a phone diag log (MobileInsight ``.mi2log`` / ``.qmdl``) as a PHY trace.

Sources: 0xB173 (the UE's PDSCH per subframe and cell) and 0xB193 (RSRP/RSRQ), through the
codec (:mod:`clawbed.traces.diaglog`); optionally a FALCON / NG-Scope log of the same cell
for the other users' RBs. The rules (also written into each trace's provenance):

- Time: one row per ms, SFN-exact (``timing.SfnClock``: SFN wraps counted by the diag
  timestamps, each 0xB173 packet placed by its last record). Row 0 is subframe 0 of the
  first frame with a record; the trace ends at the last record.
- Serving cell: records of ``cell`` only (0 = PCell; carrier aggregation logs interleave
  records of several cells).
- ``own_rbs``: ``Num RBs`` of the subframe's record if it carries a C-RNTI block, else 0;
  ``own_tbs_bits``: Σ (TB Size − 3) × 8 over its C-RNTI blocks (the log's size includes the
  24-bit CRC).
- ``mcs``: where the UE received a block with MCS 0..28: that MCS for one block; for two,
  the MCS whose two-layer TBS on the subframe's RBs is nearest the two blocks' total.
  That is the subframe's *measured* MCS when the block has at least 1,000 bits (smaller
  blocks are payload-sized, sent at a fixed robust MCS). Elsewhere (not scheduled, a
  retransmission with MCS 29..31, a payload-sized block) *inferred* from the UE's nearest
  0xB193 measurement by the log's own fit of its MCS on that measurement
  (:mod:`.channelfit`; CHANNEL_MODEL.md §6), or, with no measurement within 1.28 s, the last
  measured or inferred value *held*. ``mcs_source`` says which, per row (0, 1, 2), and the
  provenance's ``channel`` gives the fit, its error and the held spans.
- ``layers`` (two antennas only): 2 where the UE received two C-RNTI blocks, else 1;
  inferred and held likewise where it was not scheduled.
- ``harq_fail``: 1 where a C-RNTI block that is a first transmission ("Did Recombining" No)
  failed its CRC.
- ``rsrp_dbm``/``rsrq_db``: the cell's 0xB193 measurements, each held until the next (and
  the first before it); values outside the format's ranges (e.g. a −180 dBm placeholder)
  are dropped. Absent when the log has none.
- ``other_rbs``: with a DCI log, exact: the cell's RBs in that subframe (its assignments,
  aligned by SFN) minus ``own_rbs``; subframes it does not cover fall back to the estimate.
  Without one, *estimated* from RSRQ through CLAW's load model (``clawbed.lte``
  ``load_from_rsrq``, CLAW Eq. 7): other_rbs = round(load × N_rb) − own_rbs, clipped to
  [0, N_rb − own_rbs]. It is the very model CLAW uses, so CLAW's estimates on such a trace
  are not an independent check. With neither: 0.

**The lossy path** (0xB063), when the log has no 0xB173 record of a known version for the
cell (e.g. the T-Mobile log, which has none): per subframe the UE's transport blocks come
from 0xB063 LTE MAC DL Transport Block samples (C-RNTI only; SI/P/RA-RNTI samples are cell
load, not the UE), placed SFN-exact as above:

- ``own_tbs_bits``: Σ ``DL TBS (bytes)`` × 8, exact (the MAC PDU is the TBS without its CRC).
- ``mcs``: *estimated* from the measurements' ``FTL SNR Rx[0]``, held between them: MCS =
  ⌊SNR + 6 dB + ½⌋ clamped to 0..28 (the inverse of the emulator's own SNR indication, not a
  phone's link adaptation: on the shared Pixel XL log the logged MCS − SNR has median 3.4 dB,
  10–90 % −1.7…9.5 dB). Where a block does not fit N_rb at that MCS, the lowest MCS at which
  it does. Without any SNR, the lowest MCS at which each block fits N_rb, held.
  ``mcs_source``: 1 (inferred) within 1.28 s of an SNR measurement, else 2 (held).
- ``own_rbs``: *estimated*: the fewest RBs carrying the block at that MCS (36.213 TBS).
- ``layers``: 1, or 2 where a block fits N_rb only on two layers.
- ``harq_fail``: unknown, 0: 0xB063 logs the blocks MAC received, not the CRC failures.
- RSRP/RSRQ and ``other_rbs`` as above (the estimate then uses the estimated ``own_rbs``).

The provenance says which path was taken (``path``: ``pdsch`` or ``mac-fallback``) and lists
the estimated columns (``estimated_columns``).

0xB173 version 48 (2023 Pixel 5) has no published layout; ``docs/diag-log-format.md`` §2.5
infers v36's (40-byte records, 12-byte TB slots) from one log. With ``infer_v48`` (flag
``--infer-b173-v48``) those records are read with it and the provenance says so; without it
they are unknown versions, counted.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.errors import InputError
from clawbed.lte import MAX_MCS, N_RB_BY_BANDWIDTH_MHZ, db_to_linear, load_from_rsrq, tbs_grid
from clawbed.traces.diaglog import channelfit
from clawbed.traces.diaglog.channelfit import MIN_FIT_TBS_BITS
from clawbed.traces.diaglog.dci import carry_forward, read_dci_log
from clawbed.traces.diaglog.log import GPS_EPOCH_UNIX_S, TICKS_PER_S, DiagLog, decode_bytes
from clawbed.traces.diaglog.messages import LTE_MAC_DL_TB, LTE_PHY_PDSCH_STAT, LTE_PHY_SERV_CELL_MEAS, cell_index_of
from clawbed.traces.diaglog.pdsch import INFERRED_LAYOUTS, PdschCollector, PdschColumns
from clawbed.traces.diaglog.timing import HALF_PERIOD_MS, REANCHOR_MS, SFN_PERIOD_MS, SfnClock
from clawbed.traces.schema import COLUMN_BY_NAME, Trace, make_trace, new_metadata

#: A run of at least this many subframes with neither a record nor a measurement is a gap.
GAP_MS = 1000
#: Gaps listed in the coverage (the longest ones).
LISTED_GAPS = 10
#: Defects quoted in the coverage (all are counted).
QUOTED_DEFECTS = 10
MAX_SPAN_MS = 48 * 3600 * 1000
C_RNTI = 0
TB_CRC_BYTES = 3
#: The fallback's channel MCS from FTL SNR: MCS = SNR + this, dB (the emulator's rule).
SNR_BELOW_MCS_DB = 6.0


def _unix_ms(ticks: np.ndarray) -> np.ndarray:
    return GPS_EPOCH_UNIX_S * 1000.0 + ticks * (1000.0 / TICKS_PER_S)


def _place_records(cols: PdschColumns) -> tuple[np.ndarray, list[tuple[float, int]], int]:
    """Absolute ms (diag clock, Unix ms) of every record, the anchors [(from clock ms,
    offset ms)], and the number of re-anchorings. Each packet is placed by its last record
    (the one its timestamp tracks); earlier records lie before it in SFN."""
    n = len(cols)
    last_idx = np.flatnonzero(cols.packet_last)
    clock = _unix_ms(cols.ticks[last_idx])
    sfn_last = cols.sfn_ms[last_idx]
    t_last = np.zeros(len(last_idx), dtype=np.int64)
    anchors: list[tuple[float, int]] = []
    i = 0
    while i < len(last_idx):
        offset = int(round(clock[i])) - int(sfn_last[i])
        anchors.append((float(clock[i]), offset))
        base = offset + sfn_last[i:]
        k = np.round((clock[i:] - base) / SFN_PERIOD_MS)
        t = (base + k * SFN_PERIOD_MS).astype(np.int64)
        bad = np.flatnonzero(np.abs(clock[i:] - t) > REANCHOR_MS)
        stop = len(t) if len(bad) == 0 else int(bad[0])
        t_last[i:i + stop] = t[:stop]
        i += max(stop, 1) if stop else 0
        if stop == 0:  # the anchor's own packet is always placed; start again after it
            t_last[i] = int(round(clock[i]))
            i += 1
    # Records before their packet's last: back by their SFN distance to it.
    packet_of = np.searchsorted(last_idx, np.arange(n))
    back = (sfn_last[packet_of] - cols.sfn_ms) % SFN_PERIOD_MS
    return t_last[packet_of] - back, anchors, len(anchors) - 1


def _place_measurement(clock_ms: float, sfn_ms: int, anchors: list[tuple[float, int]]) -> int:
    offset = anchors[max(bisect_right([a[0] for a in anchors], clock_ms) - 1, 0)][1]
    base = offset + sfn_ms
    return base + round((clock_ms - base) / SFN_PERIOD_MS) * SFN_PERIOD_MS


def _channel_mcs(cols: PdschColumns, sel: np.ndarray, user: np.ndarray, n_rb: int,
                 bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mcs, valid) per selected record: see the module doc."""
    mcs0 = cols.tb_mcs[sel, 0]
    n_user = user.sum(axis=1)
    ok_mcs = np.where(user, cols.tb_mcs[sel] <= MAX_MCS, True).all(axis=1)
    valid = (n_user >= 1) & ok_mcs
    one_mcs = np.where(user[:, 0], mcs0, cols.tb_mcs[sel, 1])
    mcs = np.where(valid, one_mcs, 0)
    two = valid & (n_user == 2)
    if two.any():
        rbs = np.clip(cols.num_rbs[sel][two], 1, n_rb)
        grid = tbs_grid(n_rb, 2)[:, rbs]  # (29 MCS, records)
        mcs[two] = np.argmin(np.abs(grid - bits[two][None, :]), axis=0)
    return np.clip(mcs, 0, MAX_MCS), valid


def import_mobileinsight(path: Path, *, bandwidth_mhz: float = 20.0, n_antennas: int = 2,
                         cell: int = 0, dci_path: Path | None = None,
                         dci_kind: str | None = None, infer_v48: bool = False) -> Trace:
    """A trace from a diag log (rules: the module doc). Without a 0xB173 record of a known
    version for ``cell`` it takes the lossy 0xB063 path; InputError when the file cannot be
    read or holds neither (naming the versions met); defects inside the log are counted in
    the provenance, never fatal."""
    path = Path(path)
    n_rb = N_RB_BY_BANDWIDTH_MHZ.get(bandwidth_mhz)
    if n_rb is None:
        raise InputError(f"bandwidth {bandwidth_mhz} MHz is not an LTE bandwidth")
    if n_antennas not in (1, 2):
        raise InputError(f"antennas {n_antennas}: must be 1 or 2")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    collector = PdschCollector(INFERRED_LAYOUTS if infer_v48 else None)
    log = decode_bytes(data, codes={LTE_PHY_SERV_CELL_MEAS}, raw={LTE_PHY_PDSCH_STAT: collector})
    cols = collector.columns()
    sel = np.flatnonzero(cols.cell == cell)
    if len(sel) == 0:
        return _import_from_mac(path, data, log, cols, bandwidth_mhz=bandwidth_mhz, n_rb=n_rb,
                                n_antennas=n_antennas, cell=cell, dci_path=dci_path, dci_kind=dci_kind,
                                infer_v48=infer_v48)

    t_abs_all, anchors, reanchors = _place_records(cols)
    t_abs = t_abs_all[sel]
    first = int(np.argmin(t_abs))
    t0 = int(t_abs[first]) - int(cols.sfn_ms[sel][first]) % 10
    start_sfn = (int(cols.sfn_ms[sel][first]) // 10) % 1024
    row = t_abs - t0
    duration = int(row.max()) + 1
    if duration > MAX_SPAN_MS:
        raise InputError(f"{path}: records span {duration / 3.6e6:.1f} h: a timestamp is wrong")

    slots = np.arange(2)[None, :] < np.minimum(cols.num_tbs[sel], 2)[:, None]
    user = slots & (cols.tb_rnti_type[sel] == C_RNTI)
    has_user = user.any(axis=1)
    size_bits = np.maximum(cols.tb_size_bytes[sel] - TB_CRC_BYTES, 0) * 8
    bits = np.where(user, size_bits, 0).sum(axis=1)
    too_many = has_user & (cols.num_rbs[sel] > n_rb)
    if too_many.any():
        raise InputError(f"{path}: a record gives the UE {int(cols.num_rbs[sel][too_many].max())} "
                         f"RBs, more than the {bandwidth_mhz} MHz cell's {n_rb}; is "
                         f"--bandwidth-mhz right?")
    mcs_rec, valid_rec = _channel_mcs(cols, sel, user, n_rb, bits)
    first_fail = user & ~cols.tb_crc_pass[sel] & ~cols.tb_recombined[sel]

    # Per row; records are in file order, so a repeated subframe keeps the last record.
    own = np.zeros(duration, dtype=np.int64)
    tbs = np.zeros(duration, dtype=np.int64)
    harq = np.zeros(duration, dtype=np.int64)
    mcs = np.zeros(duration, dtype=np.int64)
    valid = np.zeros(duration, dtype=bool)
    two = np.zeros(duration, dtype=bool)
    record_rows = np.zeros(duration, dtype=bool)
    record_rows[row] = True
    own[row] = np.where(has_user, cols.num_rbs[sel], 0)
    tbs[row] = bits
    harq[row] = first_fail.any(axis=1)
    mcs[row[valid_rec]] = mcs_rec[valid_rec]
    valid[row[valid_rec]] = True
    two[row] = user.sum(axis=1) == 2
    repeated = int(len(row) - record_rows.sum())
    if not valid.any():
        raise InputError(f"{path}: no record of cell {cell} gives the UE a block with a "
                         f"new-transmission MCS 0..{MAX_MCS}, so its channel MCS is unknown")
    mcs = carry_forward(mcs, valid)

    columns: dict[str, np.ndarray] = {"mcs": mcs, "own_rbs": own,
                                      "own_tbs_bits": np.minimum(tbs, 2**24), "harq_fail": harq}
    mapping = (
        f"One row per ms from subframe 0 of the first frame with a 0xB173 record of serving cell "
        f"{cell} to the last such record, SFN-exact (wraps counted by the diag timestamps, "
        f"{reanchors} re-anchorings). own_rbs = the record's Num RBs when it carries a C-RNTI "
        f"block, own_tbs_bits = Σ(TB Size − 3 CRC bytes) × 8 over them; mcs = the block's MCS "
        f"(two blocks: the MCS whose two-layer TBS on those RBs is nearest their total) where a "
        f"block has MCS 0..{MAX_MCS} and at least {MIN_FIT_TBS_BITS} bits (measured, mcs_source 0); "
        f"elsewhere (not scheduled, a retransmission, a payload-sized block) inferred from the UE's "
        f"nearest serving-cell measurement by the log's own fit (mcs_source 1; provenance.channel), "
        f"or, with no measurement near, the last measured or inferred value held (mcs_source 2)"
        + ("; layers = 2 where two C-RNTI blocks, inferred and held likewise" if n_antennas == 2 else "")
        + "; harq_fail = a first-transmission (not recombined) C-RNTI block failed its CRC; "
        "rsrp_dbm/rsrq_db = 0xB193 values held between measurements; other_rbs: ")
    if n_antennas == 2:
        columns["layers"] = np.where(carry_forward(two, valid | record_rows), 2, 1)
    path_info: dict[str, Any] = {
        "path": "pdsch", "estimated_columns": [],
        "records": int(len(sel)), "c_rnti_blocks": int(user.sum()),
        "crc_failures": int((user & ~cols.tb_crc_pass[sel]).sum()),
        "first_transmission_failures": int(first_fail.sum()),
    }
    if 48 in cols.versions:
        path_info["inferred_layouts"] = {"0xB173 v48": "v36's (docs/diag-log-format.md §2.5, inferred "
                                         "from one log; not a published layout)"}
    fit_rows = np.flatnonzero(valid & (tbs >= MIN_FIT_TBS_BITS))
    logged_rows = np.flatnonzero(valid)
    return _finish(path, data, log, columns, record_rows, anchors, t0=t0, start_sfn=start_sfn,
                   duration=duration, n_rb=n_rb, bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas,
                   cell=cell, dci_path=dci_path, dci_kind=dci_kind, mapping=mapping, path_info=path_info,
                   coverage_extra={"timing_reanchors": reanchors, "repeated_subframe_records": repeated},
                   fit=(fit_rows, two, (logged_rows, mcs[logged_rows])))


def _measurements(log: DiagLog, cell: int, anchors: list[tuple[float, int]], t0: int,
                  duration: int) -> tuple[list[int], list[float], list[float], list[float]]:
    """Rows, RSRP, RSRQ and FTL SNR (NaN where absent) of the cell's 0xB193 measurements."""
    meas_rows: list[int] = []
    rsrp: list[float] = []
    rsrq: list[float] = []
    snr: list[float] = []
    for p in log.packets:
        for sp in p.message.get("Subpackets", ()):
            if "Current SFN" not in sp or cell_index_of(sp.get("Serving Cell Index", "")) != cell:
                continue
            r = _place_measurement(_unix_ms(np.array(p.ticks)).item(),
                                   sp["Current SFN"] * 10 + sp["Current Subframe Number"] % 10,
                                   anchors) - t0
            if 0 <= r < duration:
                meas_rows.append(r)
                rsrp.append(sp.get("RSRP", float("nan")))
                rsrq.append(sp.get("RSRQ", float("nan")))
                s = sp.get("FTL SNR Rx[0]")
                snr.append(float("nan") if s is None else s)
    return meas_rows, rsrp, rsrq, snr


def _finish(path: Path, data: bytes, log: DiagLog, columns: dict[str, np.ndarray], record_rows: np.ndarray,
            anchors: list[tuple[float, int]], *, t0: int, start_sfn: int, duration: int, n_rb: int,
            bandwidth_mhz: float, n_antennas: int, cell: int, dci_path: Path | None, dci_kind: str | None,
            mapping: str, path_info: dict[str, Any], coverage_extra: dict[str, Any],
            fit: tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]] | None = None) -> Trace:
    """The common tail: measurements, the channel where the UE was not scheduled (``fit``:
    the rows of its link-adapted blocks, where it had two, and (rows, MCS) of every block it
    got with an MCS; None: the MCS is already the measurements', only marked), other users'
    RBs, coverage, provenance, the trace."""
    stats = log.stats
    versions = {k: v for k, v in stats.decoded.items()}
    own = columns["own_rbs"]
    meas_rows, rsrp, rsrq, snr = _measurements(log, cell, anchors, t0, duration)
    meas = channelfit.Measurements(np.array(meas_rows, dtype=np.int64), {
        "snr_db": np.array(snr, dtype=np.float64), "rsrq_db": _in_range(rsrq, "rsrq_db"),
        "rsrp_dbm": _in_range(rsrp, "rsrp_dbm")})
    if fit is not None:
        fit_rows, two, logged = fit
        columns["mcs"], layers, source, channel = channelfit.fill(
            columns["mcs"], columns.get("layers"), fit_rows, meas, two=two, logged=logged)
        if layers is not None:
            columns["layers"] = layers
    else:
        source, channel = _mark_snr_rule(meas, duration)
    unread = [k for k in stats.unknown_versions if k.startswith("0xB193")]
    if len(meas.rows) == 0 and unread:
        channel["no_fit_reason"] = (f"{channel.get('no_fit_reason', '')}: its 0xB193 packets are of versions this "
                                    f"codec does not read ({', '.join(sorted(unread))})")
    columns["mcs_source"] = source
    measured = np.zeros(duration, dtype=bool)
    held: dict[str, np.ndarray] = {}
    for name, values in (("rsrp_dbm", rsrp), ("rsrq_db", rsrq)):
        spec = COLUMN_BY_NAME[name]
        v = np.array(values, dtype=np.float64)
        r = np.array(meas_rows, dtype=np.int64)
        ok = np.isfinite(v) & (v >= spec.lo) & (v <= float(spec.hi))
        if ok.any():
            col = np.zeros(duration)
            have = np.zeros(duration, dtype=bool)
            col[r[ok]] = v[ok]
            have[r[ok]] = True
            measured |= have
            held[name] = carry_forward(col, have)
            columns[name] = held[name]

    # Other users' RBs.
    room = n_rb - own
    estimated = np.zeros(duration, dtype=np.int64)
    if "rsrq_db" in held:
        load = load_from_rsrq(db_to_linear(held["rsrq_db"]), n_antennas)
        estimated = np.clip(np.round(load * n_rb).astype(np.int64) - own, 0, room)
        estimate_rule = ("estimated from RSRQ by CLAW's load model (clawbed.lte.load_from_rsrq, "
                         "CLAW Eq. 7): round(load × N_rb) − own_rbs, clipped to the RBs left — the "
                         "very model CLAW uses, so CLAW's estimates on this trace are not an "
                         "independent check")
    else:
        estimate_rule = "0: the log has no RSRQ measurement of this cell and no DCI log was given"
    other = estimated
    dci_info: dict[str, Any] = {}
    if dci_path is not None:
        dci = read_dci_log(dci_path, dci_kind)
        d_abs, d_sfn, d_cell = dci.cell_load()
        # Align by SFN: the sniffer and the phone see the same cell's frame numbers, so the
        # clocks need only agree to within half an SFN period.
        row_sfn0 = (start_sfn * 10) % SFN_PERIOD_MS
        coarse = np.round(d_abs - t0).astype(np.int64)
        diff = (d_sfn - (row_sfn0 + coarse)) % SFN_PERIOD_MS
        diff = np.where(diff >= HALF_PERIOD_MS, diff - SFN_PERIOD_MS, diff)
        d_row = coarse + diff
        inside = (d_row >= 0) & (d_row < duration)
        exact = np.zeros(duration, dtype=bool)
        if inside.any():
            lo, hi = int(d_row[inside].min()), int(d_row[inside].max())
            exact[lo:hi + 1] = True  # the DCI log covers these: no row = no assignment
            cell_rbs = np.zeros(duration, dtype=np.int64)
            cell_rbs[d_row[inside]] = np.minimum(d_cell[inside], n_rb)
            other = np.where(exact, np.clip(cell_rbs - own, 0, room), estimated)
            dci_info["short_of_own_subframes"] = int((exact & (cell_rbs < own)).sum())
        dci_info.update({"dci_file": Path(dci_path).name, "dci_kind": dci.kind,
                         "dci_sha256": dci.sha256, "dci_exact_subframes": int(exact.sum()),
                         "dci_rows_outside_trace": int((~inside).sum())})
        other_rule = (f"exact in the {int(exact.sum())} subframes the {dci.kind} log "
                      f"{Path(dci_path).name} covers (its cell RBs − own_rbs, aligned by SFN); "
                      f"elsewhere {estimate_rule}")
    else:
        other_rule = estimate_rule
    columns["other_rbs"] = other

    # Coverage: subframes with a record or a measurement; runs without either are gaps.
    data_rows = record_rows | measured
    idx = np.flatnonzero(data_rows)
    runs = np.diff(np.concatenate(([-1], idx, [duration]))) - 1
    starts = np.concatenate(([-1], idx))[runs >= GAP_MS] + 1
    lengths = runs[runs >= GAP_MS]
    longest = np.argsort(-lengths, kind="stable")[:LISTED_GAPS]
    coverage = {
        "subframes": duration,
        "subframes_with_data": int(data_rows.sum()),
        "subframes_with_record": int(record_rows.sum()),
        "ue_scheduled_subframes": int((own > 0).sum()),
        "measurements": int(len(meas_rows)),
        "gap_threshold_ms": GAP_MS,
        "gaps": int(len(lengths)), "gap_ms_total": int(lengths.sum()),
        "longest_gaps_ms": [[int(starts[i]), int(lengths[i])] for i in longest],
        "versions": versions,
        "unknown_versions": dict(stats.unknown_versions),
        "defects": dict(stats.defects_by_kind),
        "first_defects": [str(d) for d in log.defects[:QUOTED_DEFECTS]],
        **coverage_extra,
        "other_rbs": "exact (DCI log)" if dci_path is not None else
                     "estimated (RSRQ load model)" if "rsrq_db" in held else "none (0)",
    }
    mapping = mapping + other_rule + "."
    est = list(path_info["estimated_columns"])
    if "rsrq_db" in held:
        est.append("other_rbs" if dci_path is None else "other_rbs (outside the DCI log's span)")
    path_info = {**path_info, "estimated_columns": est}
    coverage.update({"path": path_info["path"], "estimated_columns": est})
    provenance: dict[str, Any] = {
        "generator": "clawbed trace import --from mobileinsight",
        "input_file": path.name,
        "input_sha256": hashlib.sha256(data).hexdigest(),
        "input_bytes": len(data),
        "serving_cell": cell,
        "bandwidth_rule": "given or the default (--bandwidth-mhz): the diag log does not carry it",
        **path_info,
        "other_rbs_estimated": dci_path is None and "rsrq_db" in held,
        "mapping": mapping,
        "channel": channel,
        "coverage": coverage,
        **dci_info,
    }
    metadata = new_metadata(bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas,
                            duration_ms=duration, source="mobileinsight", provenance=provenance,
                            start_sfn=start_sfn,
                            description=f"imported from diag log {path.name}")
    return make_trace(metadata, **columns)


def _in_range(values: list[float], column: str) -> np.ndarray:
    """``values`` with those outside the column's range (a placeholder) as NaN."""
    spec = COLUMN_BY_NAME[column]
    v = np.array(values, dtype=np.float64)
    return np.where(np.isfinite(v) & (v >= spec.lo) & (v <= float(spec.hi)), v, np.nan)


def _mark_snr_rule(meas: channelfit.Measurements, duration: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The lossy path's MCS is the SNR rule's everywhere (no logged MCS to fit): rows with an
    SNR measurement near are inferred, the rest held."""
    snr = meas.values["snr_db"]
    source = np.full(duration, channelfit.HELD, dtype=np.int64)
    ok = np.isfinite(snr)
    if ok.any():
        mr = np.sort(meas.rows[ok])
        _, dist = channelfit.nearest(np.arange(duration), mr)
        source[dist <= channelfit.MEAS_NEAR_MS] = channelfit.INFERRED
    starts, lengths = channelfit.runs_of(source == channelfit.HELD)
    longest = np.argsort(-lengths, kind="stable")[:channelfit.LISTED_HELD_SPANS]
    return source, {
        "model": f"the lossy path's fixed rule (⌊FTL SNR + {SNR_BELOW_MCS_DB:g} dB + ½⌋): the log has no MCS to fit",
        "fit": None, "no_fit_reason": "no 0xB173: the log gives no MCS of the UE's own",
        "measurement_near_ms": channelfit.MEAS_NEAR_MS,
        "measured_subframes": 0, "inferred_subframes": int((source == channelfit.INFERRED).sum()),
        "held_subframes": int((source == channelfit.HELD).sum()),
        "inferred_share": round(float(np.mean(source == channelfit.INFERRED)), 4),
        "held_spans": int(len(lengths)),
        "longest_held_spans_ms": [[int(starts[i]), int(lengths[i])] for i in longest],
    }


def _channel_mcs_from_snr(snr_db: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(snr_db + SNR_BELOW_MCS_DB + 0.5), 0, MAX_MCS).astype(np.int64)


def _import_from_mac(path: Path, data: bytes, log: DiagLog, cols: PdschColumns, *, bandwidth_mhz: float,
                     n_rb: int, n_antennas: int, cell: int, dci_path: Path | None, dci_kind: str | None,
                     infer_v48: bool) -> Trace:
    """The lossy path (module doc): the UE's blocks from 0xB063, RBs and MCS estimated."""
    stats = log.stats
    mac = decode_bytes(data, codes={LTE_MAC_DL_TB})
    # (clock ms, SFN ms, C-RNTI?, bytes) of every sample of this cell (v2 samples carry no
    # cell: they are the PCell's).
    clock = SfnClock()
    anchors: list[tuple[float, int]] = []
    placed: list[int] = []
    sfn_of: list[int] = []
    user: list[bool] = []
    size: list[int] = []
    for p in mac.packets:
        at = float(_unix_ms(np.array(p.ticks)))
        for sp in p.message.get("Subpackets", ()):
            for smp in sp.get("Samples", ()):
                if smp.get("Cell Id", 0) != cell:
                    continue
                sfn_ms = smp["SFN"] % 1024 * 10 + smp["Sub-FN"] % 10
                before = clock.offset_ms
                placed.append(clock.place(at, sfn_ms))
                if clock.offset_ms != before:
                    anchors.append((at, int(clock.offset_ms)))  # type: ignore[arg-type]
                sfn_of.append(sfn_ms)
                user.append(smp["RNTI Type"] == "C-RNTI")
                size.append(int(smp["DL TBS (bytes)"]))
    if not any(user):
        cells = sorted(Counter(cols.cell.tolist()).items())
        unknown = {**stats.unknown_versions, **mac.stats.unknown_versions}
        decoded = {**stats.decoded, **mac.stats.decoded}
        hint = (" (0xB173 v48: --infer-b173-v48 reads it with v36's layout, inferred in "
                "docs/diag-log-format.md §2.5)" if "0xB173 v48" in unknown and not infer_v48 else "")
        raise InputError(
            f"{path}: no 0xB173 record of a known version for serving cell {cell} (records per cell: "
            f"{dict(cells) or 'none'}) and no C-RNTI 0xB063 sample to fall back on; decoded: "
            f"{', '.join(f'{k} ×{v}' for k, v in sorted(decoded.items())) or 'nothing'}; unknown versions: "
            f"{', '.join(f'{k} ×{v}' for k, v in sorted(unknown.items())) or 'none'}{hint}; "
            f"{len(log.defects)} defects" + (f", first: {log.defects[0]}" if log.defects else ""))
    t_abs = np.array(placed, dtype=np.int64)
    sfn_ms = np.array(sfn_of, dtype=np.int64)
    is_user = np.array(user, dtype=bool)
    first = int(np.argmin(t_abs))
    t0 = int(t_abs[first]) - int(sfn_ms[first]) % 10
    start_sfn = (int(sfn_ms[first]) // 10) % 1024
    row = t_abs - t0
    duration = int(row.max()) + 1
    if duration > MAX_SPAN_MS:
        raise InputError(f"{path}: samples span {duration / 3.6e6:.1f} h: a timestamp is wrong")
    bits = np.zeros(duration, dtype=np.int64)
    np.add.at(bits, row[is_user], np.array(size, dtype=np.int64)[is_user] * 8)
    record_rows = np.zeros(duration, dtype=bool)
    record_rows[row] = True
    scheduled = bits > 0

    # Channel MCS from the measurements' SNR, held.
    meas_rows, _rsrp, _rsrq, snr = _measurements(log, cell, anchors, t0, duration)
    snr_v = np.array(snr, dtype=np.float64)
    have_snr = np.isfinite(snr_v)
    channel = np.zeros(duration, dtype=np.int64)
    if have_snr.any():
        known = np.zeros(duration, dtype=bool)
        r = np.array(meas_rows, dtype=np.int64)[have_snr]
        channel[r] = _channel_mcs_from_snr(snr_v[have_snr])
        known[r] = True
        channel = carry_forward(channel, known)
        mcs_rule = (f"estimated: ⌊FTL SNR + {SNR_BELOW_MCS_DB:g} dB + ½⌋ (0..{MAX_MCS}) of the last "
                    "measurement (the emulator's SNR rule inverted; on the shared Pixel XL log a "
                    "phone's MCS − SNR has median 3.4 dB, 10–90 % −1.7…9.5 dB), raised where a block "
                    "does not fit N_rb at it to the lowest MCS at which it does")
    else:
        mcs_rule = "estimated: the lowest MCS at which the subframe's block fits N_rb (no SNR in the log), held"

    one = tbs_grid(n_rb, 1)  # (29 MCS, n_rb + 1 RBs)
    two_grid = tbs_grid(n_rb, 2) if n_antennas == 2 else None
    own = np.zeros(duration, dtype=np.int64)
    mcs = channel.copy()
    layers = np.ones(duration, dtype=np.int64)
    fixed = np.zeros(duration, dtype=bool)
    for k in np.flatnonzero(scheduled):
        b = bits[k]
        m = int(channel[k]) if have_snr.any() else None
        n_layers = 1
        grid = one
        if grid[MAX_MCS, n_rb] < b and two_grid is not None:
            n_layers, grid = 2, two_grid
        if m is None or grid[m, n_rb] < b:
            fits = np.flatnonzero(grid[:, n_rb] >= b)
            m = int(fits[0]) if len(fits) else MAX_MCS
        rbs = np.flatnonzero(grid[m, 1:] >= b)
        own[k] = int(rbs[0]) + 1 if len(rbs) else n_rb
        mcs[k] = m
        layers[k] = n_layers
        fixed[k] = True
    if not have_snr.any():
        mcs = carry_forward(mcs, fixed)
    columns: dict[str, np.ndarray] = {"mcs": mcs, "own_rbs": own, "own_tbs_bits": np.minimum(bits, 2**24),
                                      "harq_fail": np.zeros(duration, dtype=np.int64)}
    if n_antennas == 2:
        columns["layers"] = layers
    mapping = (
        f"LOSSY PATH: the log has no 0xB173 record of a known version for serving cell {cell}, so the UE's "
        f"transport blocks come from 0xB063 MAC DL Transport Block samples (C-RNTI only). One row per ms from "
        f"subframe 0 of the first frame with a sample to the last, SFN-exact ({clock.reanchors} re-anchorings). "
        f"own_tbs_bits = Σ DL TBS (bytes) × 8 (exact: the MAC PDU is the TBS without its CRC); mcs: {mcs_rule} "
        f"(mcs_source 1 within {channelfit.MEAS_NEAR_MS} ms of an SNR measurement, else 2: held); "
        f"own_rbs estimated: the fewest RBs carrying the block at that MCS (36.213 TBS); layers = 1, 2 where a "
        f"block fits N_rb only on two; harq_fail unknown (0: 0xB063 logs the blocks MAC received, not CRC "
        f"failures); rsrp_dbm/rsrq_db = 0xB193 values held between measurements; other_rbs: ")
    path_info: dict[str, Any] = {
        "path": "mac-fallback",
        "estimated_columns": ["mcs", "own_rbs", "layers", "harq_fail (unknown: 0)"],
        "mac_samples": int(len(is_user)), "c_rnti_blocks": int(is_user.sum()),
        "crc_failures": None, "first_transmission_failures": None,
    }
    return _finish(path, data, log, columns, record_rows, anchors, t0=t0, start_sfn=start_sfn, duration=duration,
                   n_rb=n_rb, bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas, cell=cell, dci_path=dci_path,
                   dci_kind=dci_kind, mapping=mapping, path_info=path_info,
                   coverage_extra={"timing_reanchors": clock.reanchors,
                                   "versions": {**stats.decoded, **mac.stats.decoded},
                                   "unknown_versions": {**stats.unknown_versions, **mac.stats.unknown_versions}})
