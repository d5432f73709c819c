"""The replay bench's timing steps (replay/bench.py), their pure parts: pairing stalled loads
with unstalled ones, the bound a table suggests, a run's first attempts; the stall injector
on a real process (a sleeping child stopped and continued)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import click
import pytest

from clawbed.replay import bench
from clawbed.replay.records import LoadRecord
from clawbed.replay.run import Replay, ReplayEvent


def rec(load: int, plt_ms: float, late_ms: float | None = 0.2, reruns: int = 0, scheme: str = "cubic") -> LoadRecord:
    return LoadRecord(load=load, round=load, scheme=scheme, ok=True, plt_ms=plt_ms, subframe_late_max_ms=late_ms,
                      delivery_err_max_ms=0.1, subframe_stall_ms=0.0, late_reruns=reruns)


def test_a_row_pairs_each_stalled_load_with_its_unstalled_one() -> None:
    pairs = [(rec(0, 1_020.0, 10.3), rec(0, 1_000.0)), (rec(1, 2_000.0, 9.8), rec(1, 2_050.0)),
             (rec(2, 1_530.0, 10.1), rec(2, 1_500.0))]
    row = bench.pair_row("profile", "cubic", 10.0, pairs)
    assert row["pairs"] == 3 and row["recorded_late_ms"] == 10.1 and row["plt_ms"] == 1_500.0
    assert row["delta_ms_median"] == 20.0 and row["excess_ms_median"] == 10.0
    assert row["abs_err_pct_median"] == 2.0  # |Δ| of 2.0 %, 2.44 % and 2.0 %
    assert bench.pair_row("profile", "cubic", 10.0, []) == {"page": "profile", "scheme": "cubic", "stall_ms": 10.0,
                                                            "pairs": 0}


def row(page: str, scheme: str, stall: float, median: float, p90: float) -> dict[str, Any]:
    return {"page": page, "scheme": scheme, "stall_ms": stall, "abs_err_pct_median": median, "abs_err_pct_p90": p90}


def test_the_bound_is_the_largest_stall_within_the_noise_everywhere() -> None:
    rows = [row(p, s, 0, 1.0, 3.0) for p in ("set-01", "profile") for s in ("claw", "cubic")]
    rows += [row(p, s, st, m, m) for p in ("set-01", "profile") for s in ("claw", "cubic")
             for st, m in ((1, 0.8), (2, 1.5), (5, 2.9), (10, 6.0), (20, 9.0))]
    assert bench.suggest_bound(rows)["max_stall_ms"] == 5
    rows.append(row("set-01", "claw", 2, 3.5, 3.5))  # one page and scheme beyond at 2 ms: the bound is 1
    assert bench.suggest_bound(rows)["max_stall_ms"] == 1


def test_first_attempts_come_from_the_late_file_where_a_load_was_rerun(tmp_path: Path) -> None:
    (tmp_path / "late-loads.jsonl").write_text(json.dumps(rec(1, 900.0, 3.0).to_json()) + "\n"
                                               + json.dumps(rec(1, 910.0, 2.5, reruns=1).to_json()) + "\n")
    replay = cast(Replay, SimpleNamespace(run_dir=SimpleNamespace(path=tmp_path)))
    firsts = bench.first_attempts(replay, [rec(0, 800.0), rec(1, 950.0, 0.3, reruns=2)])
    assert [(r.load, r.plt_ms) for r in firsts] == [(0, 800.0), (1, 900.0)]


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_the_staller_stops_and_continues_the_process_once_per_load() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        staller = bench.Staller(300.0, {(0, "cubic"): 100.0}, seed=1)
        staller.replay = cast(Replay, SimpleNamespace(emulator_pid=child.pid))
        staller.on_event(ReplayEvent("loader-start", 1, load=0, scheme="cubic"))
        staller.on_event(ReplayEvent("loader-start", 1, load=5, scheme="cubic"))  # no baseline: no stall
        assert len(staller.injected) == 1 and 5.0 <= staller.injected[0][1] <= 80.0
        time.sleep(0.2)
        assert _state(child.pid) == "T"  # stopped within the 5-80 ms window, for 300 ms
        deadline = time.monotonic() + 5
        while _state(child.pid) == "T" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _state(child.pid) in ("S", "R")
    finally:
        child.kill()
        child.wait()



def test_the_stalls_flag_takes_increasing_positive_ms_and_names_what_is_wrong() -> None:
    assert bench._stalls_option("2,3,4.5") == (2.0, 3.0, 4.5)
    for bad, why in (("2,x", "not a comma-separated list"), ("3,2", "positive and increasing"),
                     ("0,1", "positive and increasing"), ("2,2", "positive and increasing")):
        with pytest.raises(click.BadParameter, match=why):
            bench._stalls_option(bad)
    done = subprocess.run([sys.executable, "-m", "clawbed.replay.bench", "--stalls-ms", "5,1"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--stalls-ms" in done.stderr and "'5,1'" in done.stderr, done.stderr


def test_the_doctor_line_names_what_was_not_ok_and_the_wake_ups() -> None:
    from clawbed import doctor

    facts = doctor.Facts(cpus_online=2, cpus_allowed=[0, 1], preempt_model="none", fifo_allowed=True,
                         rt_runtime_us=950000, sample_s=1.0, steal_pct=0.0, others_cpu_pct=0.0, wakeups=1000,
                         wakeup_late_p99_ms=0.06, wakeup_late_max_ms=1.2, wakeup_policy="SCHED_FIFO 1")
    line = bench.doctor_line(doctor.judge(facts).summary())
    assert line.startswith("machine before the runs: clawbed doctor warn (CPUs, preemption, timer wake-ups not ok)")
    assert line.endswith("timer wake-ups late p99 0.06, max 1.2 ms")
    facts.wakeups = 0  # no sample: nothing said of wake-ups
    assert "wake-ups" not in bench.doctor_line(doctor.judge(facts).summary())
