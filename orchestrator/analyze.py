"""``clawbed analyze``: analyses of finished runs.

``clawbed analyze airtime TARGET``: each load's data phase split by what held it up, from the
emulator's ground truth (:mod:`clawbed.replay.airtime`), per run and scheme.

``clawbed analyze bandwidth RUN_DIR_OR_PCAP``: LTE13's passive bandwidth estimation
(:mod:`clawbed.traces.bwest`) on a server-side capture, scored against the emulator's ground
truth. The capture is ``server.pcap`` of a run (``clawbed replay --capture-server``, or any
pcap of the server's device); the truth is the run's ``truth.cbcol`` (``emulator/truth.cbcol``
of a replay, or beside the capture).

Ground truth per window (:func:`score`): the IP bytes the emulator delivered to UE 0 in the
window (``delivered_bytes``), over the window — the UE's available bandwidth where the UE's
base-station queue was non-empty throughout (``queue_bytes`` > 0 in ≥ 95 % of its subframes:
the cell then gave the UE all it would give it). Only such windows are scored; the share of
windows scored is reported. The paper's lab check scored against UE-side throughput of a
continuous bulk download in the same way (LTE13 §6.2: mean error 7.9 % at 1.0 s windows).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from clawbed.emulator.truth import read_truth
from clawbed.errors import InputError
from clawbed.replay import airtime
from clawbed.replay.rundir import RESULTS_JSONL
from clawbed.tables import Column, Listing, format_option
from clawbed.traces import bwest

if TYPE_CHECKING:
    from clawbed.orchestrator.store import LoadRow

#: A window counts as saturated when the UE's queue was non-empty in this share of its subframes.
SATURATED_SHARE = 0.95


def locate(target: Path) -> tuple[Path, Path]:
    """(capture, truth) of a run directory or of a capture file."""
    if target.is_dir():
        pcaps = [target / "server.pcap", *sorted(target.glob("*.pcap")), *sorted(target.glob("*/*.pcap"))]
        capture = next((p for p in pcaps if p.is_file()), None)
        if capture is None:
            raise InputError(f"{target}: no server.pcap (or other .pcap) in it; take one with "
                             "`clawbed replay --capture-server`")
        folder = target
    elif target.is_file():
        capture, folder = target, target.parent
    else:
        raise InputError(f"{target}: no such file or directory")
    for candidate in (folder / "truth.cbcol", folder / "emulator" / "truth.cbcol", folder.parent / "truth.cbcol",
                      folder.parent / "emulator" / "truth.cbcol"):
        if candidate.is_file():
            return capture, candidate
    raise InputError(f"{target}: no truth.cbcol beside the capture (nor in emulator/) to score it against")


def uplink_delay_s(truth_path: Path) -> float:
    """The emulator's shortest UE → server delay (core up + air + grant), s; 0 when its config
    is not beside the truth."""
    config = truth_path.parent / "emulator.json"
    try:
        delays = json.loads(config.read_text()).get("delays", {})
    except (OSError, ValueError):
        return 0.0
    return (float(delays.get("core_up_ms", 25.0)) + float(delays.get("air_ms", 1.0))
            + float(delays.get("grant_delay_ms", 8.0))) / 1000


def score(capture: Path, truth_path: Path, *, window_s: float = bwest.WINDOW_S, ue: int = 0,
          c_bps: float = bwest.C_BPS, delta_g_s: float = bwest.DELTA_G_S) -> dict[str, Any]:
    """The estimator on ``capture`` against the truth of UE ``ue``, per ``window_s`` window."""
    if window_s <= 0:
        raise InputError(f"--window {window_s}: must be positive")
    truth = read_truth(truth_path)
    origin = truth.origin_unix_ns
    ues = truth.header.get("ues") or []
    if origin is None or ue >= len(ues) or truth.rows == 0:
        raise InputError(f"{truth_path}: no origin, no UE {ue} or no rows")
    address = ues[ue].get("address")
    est = bwest.estimate(capture, ue_address=address, c_bps=c_bps, delta_g_s=delta_g_s,
                         uplink_delay_s=uplink_delay_s(truth_path))
    t_unix = origin / 1e9 + truth["t_ms"].astype(np.float64) / 1000
    delivered = truth.ue(ue, "delivered_bytes").astype(np.float64)
    queued = truth.ue(ue, "queue_bytes").astype(np.float64) > 0
    # Windows on the truth's grid of whole ms, from the first sample on.
    starts, rate = est.windows(window_s)
    rows: list[dict[str, Any]] = []
    for t0, r in zip(starts, rate):
        sel = (t_unix >= t0) & (t_unix < t0 + window_s)
        n = int(sel.sum())
        if n < 0.9 * window_s * 1000:
            continue
        true_bps = delivered[sel].sum() * 8 / (n / 1000)
        rows.append({"t0_unix_s": round(float(t0), 3), "estimate_bps": None if np.isnan(r) else float(r),
                     "truth_bps": float(true_bps), "saturated": bool(queued[sel].mean() >= SATURATED_SHARE)})
    scored = [r for r in rows if r["saturated"] and r["estimate_bps"] is not None and r["truth_bps"] > 0]
    err = np.array([abs(r["estimate_bps"] - r["truth_bps"]) / r["truth_bps"] for r in scored])
    diff = np.array([r["estimate_bps"] - r["truth_bps"] for r in scored])
    large = est.flows
    return {
        "capture": str(capture), "truth": str(truth_path), "ue_address": address, "window_s": window_s,
        "c_bps": c_bps, "delta_g_s": delta_g_s, "uplink_delay_s": est.uplink_delay_s,
        "flows": len(large), "flows_with_samples": sum(1 for f in large if f.samples),
        "tick_s": [f.tick_s for f in large], "samples": int(len(est.samples)),
        "skipped": {k: sum(f.skipped.get(k, 0) for f in large) for k in {k for f in large for k in f.skipped}},
        "windows": len(rows), "windows_with_estimate": sum(1 for r in rows if r["estimate_bps"] is not None),
        "windows_saturated": sum(1 for r in rows if r["saturated"]), "windows_scored": len(scored),
        "mean_abs_error": float(err.mean()) if len(err) else None,
        "median_abs_error": float(np.median(err)) if len(err) else None,
        "mean_error": float((diff / np.array([r["truth_bps"] for r in scored])).mean()) if len(err) else None,
        "within_1mbit": float((np.abs(diff) <= 1e6).mean()) if len(diff) else None,
        "truth_mean_bps": float(np.mean([r["truth_bps"] for r in scored])) if scored else None,
        "paper_mean_abs_error_1s": bwest.PAPER_MEAN_ERROR,
        "rows": rows,
    }


@click.group("analyze")
def analyze() -> None:
    """Analyses of finished runs."""


@analyze.command("bandwidth")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--window", "window_s", type=float, multiple=True, default=(1.0, 0.1), show_default=True,
              help="evaluation window(s), s (LTE13 §6.2: 1.0 and 0.1)")
@click.option("--c-mbit", "c_mbit", type=float, default=bwest.C_BPS / 1e6, show_default=True,
              help="sending-rate threshold C, Mbit/s (LTE13 §6.1)")
@click.option("--delta-g-s", type=float, default=bwest.DELTA_G_S, show_default=True,
              help="span for inferring the UE's timestamp tick, s (LTE13 §6.1)")
@click.option("--ue", type=int, default=0, show_default=True, help="the UE whose downlink is estimated")
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON (with every window)")
def bandwidth(target: Path, window_s: tuple[float, ...], c_mbit: float, delta_g_s: float, ue: int,
              as_json: bool) -> None:
    """Estimate the UE's available bandwidth from the server-side capture of TARGET (a run
    directory with server.pcap, or a pcap) and score it against the emulator's ground truth."""
    if c_mbit <= 0:
        raise InputError(f"--c-mbit {c_mbit:g}: must be positive")
    if delta_g_s <= 0:
        raise InputError(f"--delta-g-s {delta_g_s:g}: must be positive")
    capture, truth = locate(target)
    results = [score(capture, truth, window_s=w, ue=ue, c_bps=c_mbit * 1e6, delta_g_s=delta_g_s) for w in window_s]
    if as_json:
        click.echo(json.dumps(results if len(results) > 1 else results[0], indent=1))
        return
    first = results[0]
    click.echo(f"capture {first['capture']}; truth {first['truth']} (UE {ue}, {first['ue_address']})")
    click.echo(f"flows > 1 MB: {first['flows']}, with samples: {first['flows_with_samples']}; UE tick "
               f"{', '.join(f'{t * 1e3:.3f} ms' if t else '–' for t in first['tick_s'])}; samples {first['samples']}")
    for r in results:
        mae = "–" if r["mean_abs_error"] is None else f"{r['mean_abs_error'] * 100:.1f} %"
        within = "–" if r["within_1mbit"] is None else f"{r['within_1mbit'] * 100:.0f} %"
        truth_mean = "–" if r["truth_mean_bps"] is None else f"{r['truth_mean_bps'] / 1e6:.2f} Mbit/s"
        click.echo(f"window {r['window_s']:g} s: {r['windows_scored']} of {r['windows']} windows scored "
                   f"({r['windows_with_estimate']} with an estimate, {r['windows_saturated']} saturated); "
                   f"mean |error| {mae} (paper at 1.0 s: {bwest.PAPER_MEAN_ERROR * 100:.1f} %), within ±1 Mbit/s "
                   f"{within}; true mean {truth_mean}")


AIRTIME_KEYS = ("plt_ms", "queued_ms", "window_ms", "app_ms")


def mean_airtime(loads: Iterable[LoadRow], scheme: str, keep: Callable[[str], bool]) -> dict[str, float] | None:
    """Mean airtime split (:mod:`clawbed.replay.airtime`) of the store's finished loads of
    ``scheme`` whose label ``keep`` accepts: as stored with each load, else read from its run
    directory; None without any (a run directory gone, or without series, gives no split)."""
    runs: dict[str, dict[int, airtime.Airtime]] = {}
    splits = [s for r in loads if r.scheme == scheme and keep(r.label) and (s := load_split(r, runs)) is not None]
    if not splits:
        return None
    return {k: float(np.mean([getattr(s, k) for s in splits])) for k in AIRTIME_KEYS}


def load_split(row: LoadRow, runs: dict[str, dict[int, airtime.Airtime]]) -> airtime.Airtime | None:
    """One recorded load's airtime split: the store's, else its run directory's (each run read
    once into ``runs``, the caller's cache), else None."""
    stored = row.airtime()
    if not row.ok or stored is not None or row.run_dir is None or row.load_index is None:
        return stored if row.ok else None
    if row.run_dir not in runs:
        try:
            runs[row.run_dir] = airtime.run_airtime(Path(row.run_dir))
        except (InputError, OSError, ValueError):
            runs[row.run_dir] = {}
    return runs[row.run_dir].get(row.load_index)


def with_airtime(rows: list[LoadRow]) -> list[LoadRow]:
    """The rows with their airtime columns filled from their run directories where the store
    has none (an export then carries the split to a machine without the runs)."""
    runs: dict[str, dict[int, airtime.Airtime]] = {}
    out = []
    for r in rows:
        split = None if r.airtime() is not None else load_split(r, runs)
        out.append(dataclasses.replace(r, airtime_queued_ms=split.queued_ms, airtime_window_ms=split.window_ms,
                                       airtime_app_ms=split.app_ms) if split else r)
    return out


def run_dirs_under(target: Path) -> list[Path]:
    """Every replay run directory at or below ``target`` (a run, a sweep, a suite, runs/)."""
    if not target.exists():
        raise InputError(f"{target}: no such file or directory")
    found = sorted({p.parent for p in target.rglob(RESULTS_JSONL)})
    if (target / RESULTS_JSONL).is_file():
        found = sorted({target, *found})
    if not found:
        raise InputError(f"{target}: no replay run directory in it (no {RESULTS_JSONL} at or below it)")
    return found


def airtime_summary(run_dir: Path) -> list[dict[str, Any]]:
    """Per scheme of one run: its loads' mean PLT and mean airtime split (:mod:`clawbed.replay.airtime`)."""
    manifest = json.loads((run_dir / "manifest.json").read_text()) if (run_dir / "manifest.json").is_file() else {}
    config = manifest.get("config", {})
    label = (f"{Path(config['trace']).stem}/{config.get('page')} ({run_dir.name})" if config.get("trace")
             else run_dir.name)
    per: dict[str, list[airtime.Airtime]] = {}
    for split in airtime.run_airtime(run_dir).values():
        per.setdefault(split.scheme, []).append(split)
    rows = []
    for scheme, splits in per.items():
        mean = {k: float(np.mean([getattr(s, k) for s in splits])) for k in AIRTIME_KEYS}
        rows.append({"run": str(run_dir), "label": label, "scheme": scheme, "loads": len(splits),
                     **{k: round(v, 1) for k, v in mean.items()}})
    return rows


def _ms(value: float) -> str:
    return f"{value:,.0f}"


@analyze.command("airtime")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON (one document; --format json: a line each)")
@format_option
def airtime_command(target: Path, as_json: bool, fmt: str | None) -> None:
    """Split each load's time by what held it up, from the ground truth: the UE's base-station
    queue held data (the air set the pace), the queue was empty while the sender held data back
    (its window, pacing or the receiver stopped it: the room a faster sender can take), or it
    was empty with nothing to send (requests, parsing, handshakes). TARGET: a run directory or any folder of them. Means
    per run and scheme, ms."""
    rows = [row for run in run_dirs_under(target) for row in airtime_summary(run)]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    Listing("airtime of the loads' data phase (mean ms per load)", (
        Column("run", in_table=False), Column("label", "scenario", fit="wrap", min_width=20),
        Column("scheme"), Column("loads", justify="right"), Column("plt_ms", "PLT", justify="right", show=_ms),
        Column("queued_ms", "queued at the BS", fit="wrap", min_width=7, justify="right", show=_ms),
        Column("window_ms", "held back by the sender", fit="wrap", min_width=7, justify="right", show=_ms),
        Column("app_ms", "nothing to send", fit="wrap", min_width=7, justify="right", show=_ms),
    ), [[r[k] for k in ("run", "label", "scheme", "loads", "plt_ms", "queued_ms", "window_ms", "app_ms")]
        for r in rows]).render(fmt)
