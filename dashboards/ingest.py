"""A run directory → InfluxDB points, tagged ``run``, ``scenario``, ``scheme``, ``trace``.

Two layouts are read (see ``dashboards/README.md``):

- a replay's run directory (:mod:`clawbed.replay.rundir`): ``manifest.json``,
  ``results.jsonl``, ``emulator/`` (whole-run ``truth.cbcol`` and ``diag-ue<N>.jsonl.zst``) and
  ``loads/NNN-<scheme>/`` (``tcp.csv``, ``estimates.csv``);
- an emulator output directory (``truth.cbcol``, ``diag-ue<N>.jsonl[.zst]``, ``emulator.json``),
  with optionally ``tcp.csv`` (the sampler's columns) and a CLAW client's
  ``<scheme>-client-ue<N>.csv`` beside them.

Measurements (times are Unix ns; per-subframe series are binned, default 10 ms, and the
full resolution stays in the run directory):

==============  =====================================================================  ==========
measurement     fields                                                                 extra tags
==============  =====================================================================  ==========
``cell``        truth per bin, means: ``n_rb``, ``other_demand_rbs``,                  —
                ``other_alloc_rbs``, ``total_alloc_rbs``, ``load`` (A_k / N_rb),
                ``rsrq_db``
``ue``          truth per bin: means ``alloc_rbs``, ``demand_rbs``, ``mcs``,           ``ue``
                ``layers``, ``tbs_bits``, ``queue_bytes``; max ``queue_bytes_max``;
                sums ``delivered_bytes``, ``delivered_packets``, ``overflow_drops``,
                ``overflow_drop_bytes``, ``rlc_loss_drops``, ``rlc_loss_drop_bytes``,
                ``harq_retx``; ``throughput_bps`` (delivered bits / bin)
``diag``        diag feed per bin, means: ``rsrq_db``, ``own_rbs``, ``mcs``,           ``ue``
                ``tb_bytes`` (PDSCH TB sizes per subframe)
``claw``        CLAW client estimates per bin, means: ``load``, ``n_f_rbs``,           ``ue``
                ``n_s_rbs``, ``w_claw_bytes``, ``mean_mcs``, ``n_prb``, ``saturated``,
                ``degraded``, ``cellular`` (1 while the detector says the cellular link
                is the bottleneck); sums ``verdicts``, ``loss_events``
``claw_verdict``  one point per verdict: ``verdict``, ``bottleneck`` (strings)         ``ue``
``tcp``         server TCP samples (~10 ms, as sampled): ``cwnd_bytes``, ``srtt_ms``,  ``flow``,
                ``delivered_pkts``, ``retrans_total``, ``lost_pkts``, ``w_claw_bytes``,   ``cc``
                ``w_cubic_bytes``, ... (every numeric column of ``tcp.csv``),
                ``claw_mode`` (string)
``plt``         one point per load at its end: ``plt_ms``, ``ok`` (0/1),              ``protocol``
                ``bytes_total``, ``n_objects``, ``flows``, ``retransmits``, ``load``;
                timing integrity: ``timing_ok`` (0/1, when measured), ``late_reruns``,
                ``subframe_late_max_ms``, ``delivery_err_max_ms``, ``steal_pct``,
                ``cpu_wait_pct``
==============  =====================================================================  ==========

Numbers are written as floats throughout, so a field never changes type between runs (InfluxDB
refuses a batch whose field type differs from the stored one). Whole-run series (``cell``,
``ue``, ``diag``) take the ``scheme`` of the load running at that time (from
``results.jsonl``), or the default scheme outside loads.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.claw.client.estimates import read_estimates
from clawbed.dashboards import DEFAULT_BIN_MS
from clawbed.dashboards.metrics import MetricsWriter, Point
from clawbed.emulator.diag import PDSCH_STAT, SERV_CELL_MEASUREMENT, read_diag_file
from clawbed.emulator.truth import read_truth
from clawbed.errors import InputError
from clawbed.replay.records import LoadRecord
from clawbed.replay.rundir import MANIFEST, RESULTS_JSONL, read_csv, read_results, read_zstd_lines

#: Tag value when a run says nothing about its scheme, scenario or trace.
UNKNOWN = "none"
#: Cell-wide truth columns averaged per bin.
CELL_MEANS = ("n_rb", "other_demand_rbs", "other_alloc_rbs", "total_alloc_rbs", "rsrq_db")
#: Per-UE truth columns averaged per bin (gauges) and summed per bin (per-subframe counts).
UE_MEANS = ("alloc_rbs", "demand_rbs", "mcs", "layers", "tbs_bits", "queue_bytes")
UE_SUMS = ("delivered_bytes", "delivered_packets", "overflow_drops", "overflow_drop_bytes", "rlc_loss_drops",
           "rlc_loss_drop_bytes", "harq_retx")
CLAW_MEANS = ("load", "n_f_rbs", "n_s_rbs", "w_claw_bytes", "mean_mcs", "n_prb", "saturated", "degraded")
#: Text columns of ``tcp.csv``; the other columns are numbers (``t_unix_s`` is the time).
TCP_TEXT = ("flow", "cc", "claw_mode")
_LOAD_DIR = re.compile(r"^\d+-(?P<scheme>.+)$")
_CLIENT_LOG = re.compile(r"^(?P<scheme>[a-z0-9_]+)-client-ue(?P<ue>\d+)\.csv$")
_DIAG_FILE = re.compile(r"^diag-ue(?P<ue>\d+)\.jsonl(\.zst)?$")


@dataclass(frozen=True)
class RunTags:
    """The tags every point of a run carries."""

    run: str
    scenario: str
    trace: str

    def with_scheme(self, scheme: str, **extra: str) -> dict[str, str]:
        return {"run": self.run, "scenario": self.scenario, "trace": self.trace, "scheme": scheme, **extra}


@dataclass
class Timeline:
    """Which scheme ran when: loads as [start, end] Unix ns; ``default`` outside them."""

    default: str
    starts_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ends_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    schemes: list[str] = field(default_factory=list)

    def scheme_at(self, t_ns: np.ndarray) -> list[str]:
        """The scheme of each time in ``t_ns``."""
        out = [self.default] * len(t_ns)
        if not self.schemes:
            return out
        # Loads do not overlap: the candidate is the last load starting at or before t.
        i = np.searchsorted(self.starts_ns, t_ns, side="right") - 1
        inside = (i >= 0) & (t_ns <= self.ends_ns[np.clip(i, 0, None)])
        for k in np.flatnonzero(inside):
            out[k] = self.schemes[i[k]]
        return out


@dataclass
class IngestReport:
    """Points written (or spooled) per measurement."""

    points: dict[str, int] = field(default_factory=dict)

    def count(self, measurement: str, added: bool) -> None:
        if added:
            self.points[measurement] = self.points.get(measurement, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.points.values())


# -- binning --------------------------------------------------------------------------------


def _floats(values: np.ndarray) -> np.ndarray:
    """A column as float64; ``None`` and non-numbers (a ``json`` column) become NaN."""
    if values.dtype != object:
        return values.astype(np.float64)
    # bool is an int: true/false become 1/0.
    return np.array([float(v) if isinstance(v, (int, float)) else math.nan for v in values], dtype=np.float64)


@dataclass(frozen=True)
class Bins:
    """Rows grouped into bins of ``bin_ns``: each bin's start time and first row."""

    start_ns: np.ndarray
    first_row: np.ndarray
    bin_s: float

    @classmethod
    def of(cls, t_ns: np.ndarray, bin_ns: int) -> Bins:
        """Bins of time-ordered rows (a step back in time starts a new bin too)."""
        index = t_ns // bin_ns
        first = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
        return cls(index[first] * bin_ns, first, bin_ns / 1e9)

    def mean(self, values: np.ndarray) -> np.ndarray:
        """Mean per bin ignoring NaN (NaN where a bin has no value)."""
        present = ~np.isnan(values)
        sums = np.add.reduceat(np.where(present, values, 0.0), self.first_row)
        counts = np.add.reduceat(present.astype(np.int64), self.first_row)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(np.nan_to_num(values), self.first_row)

    def max(self, values: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(np.nan_to_num(values), self.first_row)


def _points(measurement: str, bins: Bins, tags: list[dict[str, str]], fields: dict[str, np.ndarray]) -> Iterator[Point]:
    """One point per bin with every field's value of that bin."""
    names = list(fields)
    for k, t in enumerate(bins.start_ns.tolist()):
        yield Point(measurement, tags[k], {n: float(fields[n][k]) for n in names}, int(t))


# -- the sources ----------------------------------------------------------------------------


def truth_points(path: Path, run: RunTags, timeline: Timeline, bin_ms: int) -> Iterator[Point]:
    """``cell`` and ``ue`` points of a ``truth.cbcol`` file."""
    truth = read_truth(path)
    if truth.rows == 0:
        return
    t_ns = int(truth.header["origin_unix_ns"]) + truth["t_ms"].astype(np.int64) * 1_000_000
    bins = Bins.of(t_ns, bin_ms * 1_000_000)
    schemes = timeline.scheme_at(bins.start_ns)
    n_rb = _floats(truth["n_rb"])
    cell = {name: bins.mean(_floats(truth[name])) for name in CELL_MEANS}
    cell["load"] = bins.mean(_floats(truth["total_alloc_rbs"]) / n_rb)
    yield from _points("cell", bins, [run.with_scheme(s) for s in schemes], cell)
    for ue in range(truth.n_ues):
        fields = {name: bins.mean(_floats(truth.ue(ue, name))) for name in UE_MEANS}
        fields["queue_bytes_max"] = bins.max(_floats(truth.ue(ue, "queue_bytes")))
        fields |= {name: bins.sum(_floats(truth.ue(ue, name))) for name in UE_SUMS}
        fields["throughput_bps"] = fields["delivered_bytes"] * 8 / bins.bin_s
        yield from _points("ue", bins, [run.with_scheme(s, ue=str(ue)) for s in schemes], fields)


def read_diag(path: Path) -> Iterator[dict[str, Any]]:
    """The messages of a diag feed file, plain (``diag-ue<N>.jsonl``, as the emulator writes
    it) or compressed (``.jsonl.zst``, as a replay keeps it); a last line cut short is skipped."""
    if path.suffix != ".zst":
        yield from read_diag_file(path)
        return
    for number, line in enumerate(read_zstd_lines(path), start=1):
        if not line.endswith(b"\n"):
            return
        try:
            yield json.loads(line)
        except ValueError as e:
            raise InputError(f"{path}:{number}: not a JSON line ({e})") from e


def diag_points(path: Path, ue: int, run: RunTags, timeline: Timeline, bin_ms: int) -> Iterator[Point]:
    """``diag`` points of UE ``ue``'s diag feed file: RSRQ from the serving-cell
    measurements, own RBs, MCS and TB bytes from the PDSCH statistics."""
    times: list[float] = []
    columns: dict[str, list[float]] = {"rsrq_db": [], "own_rbs": [], "mcs": [], "tb_bytes": []}
    for message in read_diag(path):
        kind = message["type_id"]
        row = dict.fromkeys(columns, math.nan)
        if kind == PDSCH_STAT:
            record = message["Records"][0]
            blocks = record.get("Transport Blocks") or []
            row["own_rbs"] = float(record["Num RBs"])
            row["tb_bytes"] = float(sum(b["TB Size"] for b in blocks))
            if blocks:
                row["mcs"] = float(np.mean([b["MCS"] for b in blocks]))
        elif kind == SERV_CELL_MEASUREMENT:
            rsrq = message["Subpackets"][0].get("RSRQ")
            if rsrq is None:
                continue
            row["rsrq_db"] = float(rsrq)
        else:
            continue
        times.append(message["timestamp"])
        for name, value in row.items():
            columns[name].append(value)
    if not times:
        return
    t_ns = np.round(np.array(times) * 1e9).astype(np.int64)
    bins = Bins.of(t_ns, bin_ms * 1_000_000)
    fields = {name: bins.mean(np.array(values)) for name, values in columns.items()}
    yield from _points("diag", bins, [run.with_scheme(s, ue=str(ue)) for s in timeline.scheme_at(bins.start_ns)],
                       fields)


def estimate_points(path: Path, ue: int, scheme: str, run: RunTags, bin_ms: int) -> Iterator[Point]:
    """``claw`` points (binned) and ``claw_verdict`` points (one per verdict) of a CLAW
    client's estimates log; rows without a Unix time (before the feed started) are skipped."""
    log = read_estimates(path)
    keep = ~np.isnan(log["unix_s"])
    if not keep.any():
        return
    log = {name: values[keep] for name, values in log.items()}
    t_ns = np.round(log["unix_s"] * 1e9).astype(np.int64)
    order = np.argsort(t_ns, kind="stable")
    log = {name: values[order] for name, values in log.items()}
    t_ns = t_ns[order]
    bins = Bins.of(t_ns, bin_ms * 1_000_000)
    fields = {name: bins.mean(log[name]) for name in CLAW_MEANS}
    fields["cellular"] = bins.mean((log["bottleneck"] == "cellular").astype(np.float64))
    fields["verdicts"] = bins.sum((log["verdict"] != "").astype(np.float64))
    fields["loss_events"] = bins.sum(np.array([_event_count(e) for e in log["events"]], dtype=np.float64))
    tags = run.with_scheme(scheme, ue=str(ue))
    yield from _points("claw", bins, [tags] * len(bins.start_ns), fields)
    for k in np.flatnonzero(log["verdict"] != ""):
        yield Point("claw_verdict", tags, {"verdict": str(log["verdict"][k]), "bottleneck": str(log["bottleneck"][k])},
                    int(t_ns[k]))


def _event_count(events: str) -> int:
    """Loss events of a row's ``events`` text (``rlc-loss:2;overflow:1`` → 3)."""
    return sum(int(item.rsplit(":", 1)[1]) for item in events.split(";") if item)


def tcp_points(path: Path, scheme: str, run: RunTags) -> Iterator[Point]:
    """``tcp`` points of a sampler's ``tcp.csv`` (one per sample and flow)."""
    columns = read_csv(path)
    if not columns or "t_unix_s" not in columns:
        return
    numeric = [name for name in columns if name not in TCP_TEXT and name != "t_unix_s"]
    text = {name: columns.get(name) or [""] * len(columns["t_unix_s"]) for name in TCP_TEXT}
    for i, t in enumerate(columns["t_unix_s"]):
        fields: dict[str, float | str] = {name: float(columns[name][i]) for name in numeric if columns[name][i] != ""}
        if text["claw_mode"][i]:
            fields["claw_mode"] = text["claw_mode"][i]
        tags = run.with_scheme(scheme, flow=text["flow"][i], cc=text["cc"][i])
        yield Point("tcp", tags, fields, round(float(t) * 1e9))


def plt_points(records: list[LoadRecord], run: RunTags) -> Iterator[Point]:
    """``plt`` points: one per load record of ``results.jsonl``, at the load's end."""
    for r in records:
        t = r.t_end_unix_s or r.t_start_unix_s
        if t is None:
            continue
        values = {"plt_ms": r.plt_ms, "bytes_total": r.bytes_total, "n_objects": r.n_objects, "flows": r.flows,
                  "retransmits": r.retransmits, "load": r.load, "late_reruns": r.late_reruns,
                  "subframe_late_max_ms": r.subframe_late_max_ms, "delivery_err_max_ms": r.delivery_err_max_ms,
                  "steal_pct": r.steal_pct, "cpu_wait_pct": r.cpu_wait_pct,
                  "timing_ok": None if r.timing_ok is None else int(r.timing_ok)}
        fields = {name: float(v) for name, v in values.items() if v is not None}
        fields["ok"] = 1.0 if r.ok else 0.0
        yield Point("plt", run.with_scheme(r.scheme, protocol=r.protocol or ""), fields, round(float(t) * 1e9))


# -- the run directory ----------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({e})") from e


def run_tags(run_dir: Path, *, scenario: str | None = None, trace: str | None = None) -> RunTags:
    """The run's tags: its directory name; the scenario and trace given, else from the
    manifest (the trace's synthesis preset, the trace file's name) or the emulator's config."""
    manifest = _read_json(run_dir / MANIFEST)
    trace_path = (manifest.get("trace") or {}).get("path")
    preset = ((manifest.get("trace") or {}).get("provenance") or {}).get("preset")
    if trace_path is None:
        for emulator_dir in (run_dir / "emulator", run_dir):
            ues = _read_json(emulator_dir / "emulator.json").get("ues") or []
            if ues and ues[0].get("trace"):
                trace_path = ues[0]["trace"]
                break
    trace_name = trace or (Path(trace_path).stem if trace_path else UNKNOWN)
    return RunTags(run=str(manifest.get("name") or run_dir.name), scenario=scenario or preset or trace_name,
                   trace=trace_name)


def _series_dirs(run_dir: Path, default_scheme: str) -> list[tuple[Path, str]]:
    """(folder, scheme) of every folder with per-load series: ``loads/NNN-<scheme>/``, and the
    run directory itself (the default scheme)."""
    found = [(run_dir, default_scheme)]
    loads = run_dir / "loads"
    if loads.is_dir():
        for sub in sorted(loads.iterdir()):
            if sub.is_dir() and (m := _LOAD_DIR.match(sub.name)):
                found.append((sub, m["scheme"]))
    return found


def _estimate_logs(folder: Path) -> list[tuple[Path, int]]:
    """(file, UE) of the CLAW estimates in ``folder``: the load's slice ``estimates.csv``
    (UE 0) when there is one, else the client's own ``<scheme>-client-ue<N>.csv`` logs."""
    if (folder / "estimates.csv").is_file():
        return [(folder / "estimates.csv", 0)]
    return [(p, int(m["ue"])) for p in sorted(folder.glob("*-client-ue*.csv")) if (m := _CLIENT_LOG.match(p.name))]


def ingest_run(run_dir: Path, writer: MetricsWriter, *, bin_ms: int = DEFAULT_BIN_MS, scheme: str | None = None,
               scenario: str | None = None, trace: str | None = None) -> IngestReport:
    """Write every series of ``run_dir`` through ``writer``; ``scheme`` names what ran
    outside the loads of ``results.jsonl`` (default ``none``). Returns the points per
    measurement. Re-ingesting a run rewrites the same points (same tags and times)."""
    run_dir = run_dir.resolve()
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory")
    if bin_ms < 1:
        raise InputError(f"--bin-ms {bin_ms}: must be at least 1")
    tags = run_tags(run_dir, scenario=scenario, trace=trace)
    default_scheme = scheme or UNKNOWN
    records = read_results(run_dir) if (run_dir / RESULTS_JSONL).is_file() else []
    timeline = _timeline(records, default_scheme)
    report = IngestReport()

    def add(points: Iterator[Point]) -> None:
        for point in points:
            report.count(point.measurement, writer.add(point))

    emulator_dir = next((d for d in (run_dir / "emulator", run_dir) if (d / "truth.cbcol").is_file()), None)
    if emulator_dir is not None:
        add(truth_points(emulator_dir / "truth.cbcol", tags, timeline, bin_ms))
        for path in sorted(emulator_dir.glob("diag-ue*.jsonl*")):
            if m := _DIAG_FILE.match(path.name):
                add(diag_points(path, int(m["ue"]), tags, timeline, bin_ms))
    for folder, folder_scheme in _series_dirs(run_dir, default_scheme):
        for path, ue in _estimate_logs(folder):
            add(estimate_points(path, ue, folder_scheme, tags, bin_ms))
        if (folder / "tcp.csv").is_file():
            add(tcp_points(folder / "tcp.csv", folder_scheme, tags))
    add(plt_points(records, tags))
    writer.send()
    if report.total == 0:
        raise InputError(f"{run_dir}: nothing to ingest (no truth.cbcol, diag, estimates, tcp.csv or results.jsonl)")
    return report


def _timeline(records: list[LoadRecord], default: str) -> Timeline:
    loads = sorted((r.t_start_unix_s, r.t_end_unix_s, r.scheme) for r in records
                   if r.t_start_unix_s is not None and r.t_end_unix_s is not None)
    return Timeline(default, np.array([round(a * 1e9) for a, _, _ in loads], dtype=np.int64),
                    np.array([round(b * 1e9) for _, b, _ in loads], dtype=np.int64), [s for _, _, s in loads])
