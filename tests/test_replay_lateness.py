"""Timing integrity per load: the lateness measures (unit), and an emulator stalled with
SIGSTOP for 20 ms during a load is flagged, kept aside and the load run again (root)."""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from clawbed.replay import lateness
from clawbed.replay.records import CSV_COLUMNS, LATE_LIMIT_MS, LoadRecord
from clawbed.replay.run import Replay, ReplayConfig, ReplayEvent, describe_lateness

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "samples"
STALL_S = 0.020


def test_idle_batches_count_only_beyond_the_batch() -> None:
    late_us = np.array([50.0, 9_000.0, 12_500.0, 1_500.0, 30.0])
    busy = np.array([True, False, False, True, True])
    assert lateness.effective_subframe_lateness_ms(late_us, busy).tolist() == [0.05, 0.0, 2.5, 1.5, 0.03]


def test_judge_flags_more_than_the_limit_and_leaves_unmeasured_alone() -> None:
    record = LoadRecord(load=0, round=0, scheme="cubic")
    lateness.judge(record, lateness.Lateness(0.2, 0.1, LATE_LIMIT_MS, 0.5))
    assert record.timing_ok is True and record.delivery_err_max_ms == LATE_LIMIT_MS
    lateness.judge(record, lateness.Lateness(0.2, 0.1, 14.7, 14.7))
    assert record.timing_ok is False and "fell behind" in describe_lateness(record)
    lateness.judge(record, lateness.Lateness(None, None, None, None))
    assert record.timing_ok is None


def test_steal_and_pressure_readings(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 20 0 0\ncpu0 1 2 3\n")
    before = lateness.cpu_ticks(stat)
    stat.write_text("cpu  150 0 60 900 10 0 5 30 0 0\n")
    after = lateness.cpu_ticks(stat)
    assert before == (20, 985) and after == (30, 1155)
    steal_ms, steal_pct = lateness.steal_between(before, after)
    assert steal_ms == pytest.approx(10 * 1000 / lateness._CLK_TCK) and steal_pct == pytest.approx(100 * 10 / 170, abs=0.01)
    assert lateness.steal_between(None, after) == (None, None)
    psi = tmp_path / "cpu"
    psi.write_text("some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\nfull avg10=0 avg60=0 avg300=0 total=0\n")
    assert lateness.cpu_pressure_us(psi) == 2_500_000
    assert lateness.pressure_between(1_000_000, 2_500_000, 3.0) == 50.0
    assert lateness.cpu_pressure_us(tmp_path / "absent") is None


def test_results_csv_has_the_lateness_columns() -> None:
    for column in ("timing_ok", "late_reruns", "subframe_late_max_ms", "subframe_late_p999_ms",
                   "delivery_err_max_ms", "delivery_err_p999_ms", "steal_ms", "steal_pct", "cpu_wait_pct"):
        assert column in CSV_COLUMNS


@pytest.mark.root
def test_a_stalled_emulator_is_flagged_and_the_load_run_again(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    config = ReplayConfig(trace=SAMPLES / "idle-cell.cbt", page="set-01", schemes=["cubic"], runs=1, loader="h2",
                          core_rtt_ms=50, name="stall", output_root=tmp_path, load_timeout_s=30)
    stalls: list[float] = []
    replay: Replay

    def stall() -> None:
        time.sleep(0.15)  # the loader is starting or fetching: the load's time span
        assert replay.emulator_pid is not None
        os.kill(replay.emulator_pid, signal.SIGSTOP)
        try:
            time.sleep(STALL_S)
        finally:
            os.kill(replay.emulator_pid, signal.SIGCONT)
        stalls.append(time.time())

    def on_event(event: ReplayEvent) -> None:
        if event.kind == "loader-start" and not stalls and not threads:
            threads.append(threading.Thread(target=stall))
            threads[-1].start()

    threads: list[threading.Thread] = []
    replay = Replay(config, on_event=on_event)
    records = replay.run()
    for t in threads:
        t.join()
    assert len(stalls) == 1
    run_dir = tmp_path / "stall"
    late = [LoadRecord.from_json(json.loads(line), "late-loads.jsonl")
            for line in (run_dir / "late-loads.jsonl").read_text().splitlines()]
    stalled = late[0]
    assert stalled.timing_ok is False, describe_lateness(stalled)
    assert stalled.t_start_unix_s is not None and stalled.t_end_unix_s is not None
    assert stalled.t_start_unix_s <= stalls[0] <= stalled.t_end_unix_s + STALL_S
    # The stall shows as ~20 ms: in the subframes (an idle batch counts beyond its 10 ms) or in
    # the packets due during it.
    worst = max(v or 0.0 for v in (stalled.subframe_late_max_ms, stalled.delivery_err_max_ms))
    assert worst >= 8.0, describe_lateness(stalled)
    assert stalled.load_dir.endswith(".late1") and (run_dir / stalled.load_dir).is_dir()
    # The load was run again: the kept record says so, and was not stalled.
    assert len(records) == 1 and records[0].late_reruns >= 1 and records[0].measured
    assert (records[0].subframe_late_max_ms or 0.0) < worst and (records[0].delivery_err_max_ms or 0.0) < worst
    with (run_dir / "results.csv").open() as f:
        row = next(csv.DictReader(f))
    assert int(row["late_reruns"]) >= 1 and row["subframe_late_max_ms"] != ""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["late_reruns"] >= 1
