"""The runner's re-run of a scenario whose (Ray) worker was lost mid-scenario, with a stand-in
executor that loses a job as Ray reports a dead worker: the missing loads run again in a new
run directory, the store gets every load once, the scenario ends complete; timing-integrity
fields of each load reach the store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from clawbed.orchestrator import runner as rn
from clawbed.orchestrator.spec import load_spec
from clawbed.orchestrator.store import Store
from clawbed.replay.records import LoadRecord

SPEC = {"suite": "unit", "loader": "h2", "repetitions": 3,
        "matrix": {"traces": ["busy-cell", "idle-cell"], "pages": ["set-01"], "schemes": ["claw", "cubic"]}}


def _record(index: int, rep: int, scheme: str) -> LoadRecord:
    return LoadRecord(load=index, round=rep, scheme=scheme, ok=True, plt_ms=500.0 + rep, bytes_total=102400,
                      protocol="h2", t_start_unix_s=time.time(), t_end_unix_s=time.time(), trace_ms=rep * 1000,
                      timing_ok=rep != 2, late_reruns=1 if rep == 1 else 0, subframe_late_max_ms=0.2,
                      delivery_err_max_ms=3.0 if rep == 2 else 0.1, steal_pct=0.5, cpu_wait_pct=40.0)


class LosingExecutor:
    """Runs jobs in turn; the first job's worker 'dies' after two loads (``rerun`` is asked for
    a new job, as the Ray executor does on a WorkerCrashedError)."""

    reruns_lost_jobs = True

    def __init__(self) -> None:
        self.jobs: list[rn.ReplayJob] = []
        self.nodes: list[tuple[str, str]] = []

    def run(self, jobs: Iterable[rn.ReplayJob], on_load: Callable[[rn.ReplayJob, LoadRecord], None],
            on_done: Callable[[rn.ReplayJob, BaseException | None], None],
            rerun: Callable[[rn.ReplayJob, str], rn.ReplayJob | None] | None = None,
            on_node: Callable[[rn.ReplayJob, str], None] | None = None) -> None:
        queue = list(jobs)
        while queue:
            job = queue.pop(0)
            self.jobs.append(job)
            node = "node-b" if len(self.jobs) > 1 and self.jobs[0].scenario.id == job.scenario.id else "node-a"
            if on_node is not None:
                on_node(job, node)
            lose = len(self.jobs) == 1
            for index, (rep, scheme) in enumerate(job.plan):
                if lose and index == 2:
                    break
                on_load(job, _record(index, rep, scheme))
            if lose:
                assert rerun is not None
                again = rerun(job, "Ray task lost: WorkerCrashedError")
                assert again is not None
                queue.insert(0, again)
            else:
                on_done(job, None)


def test_a_lost_workers_scenario_runs_its_missing_loads_again(tmp_path: Path) -> None:
    path = tmp_path / "unit.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    spec = load_spec(path)
    executor = LosingExecutor()
    with Store(tmp_path / "r.sqlite") as store:
        summary = rn.run_suite(spec, store, executor=executor, output_root=tmp_path / "runs")  # type: ignore[arg-type]
        loads = store.loads(suite="unit")
        scenarios = {row["scenario_id"]: row for row in store.scenarios(suite="unit")}
    lost, again = executor.jobs[0], executor.jobs[1]
    assert again.scenario.id == lost.scenario.id and again.run_dir != lost.run_dir
    assert again.run_dir.name.endswith("-a2") and len(again.plan) == len(lost.plan) - 2
    assert len(loads) == 2 * 2 * 3 and len({(r.scenario_id, r.scheme, r.repetition) for r in loads}) == 12
    assert {r.run_dir for r in loads if r.scenario_id == lost.scenario.id} == {str(lost.run_dir), str(again.run_dir)}
    assert all(row["status"] == "complete" for row in scenarios.values())
    assert scenarios[lost.scenario.id]["run_dirs"] == [str(lost.run_dir), str(again.run_dir)]
    assert summary.lost_workers == 1 and summary.recorded == 12 and not summary.failed_scenarios
    # Timing integrity reached the store and the summary.
    assert summary.timing_flagged == 4 and summary.late_reruns == 4
    flagged = [r for r in loads if r.timing_ok is False]
    assert len(flagged) == 4 and all(r.repetition == 2 and r.delivery_err_max_ms == 3.0 for r in flagged)
    assert all(r.trace_ms == r.repetition * 1000 and r.cpu_wait_pct == 40.0 for r in loads)


def test_an_older_store_gains_the_new_columns(tmp_path: Path) -> None:
    import sqlite3

    db = sqlite3.connect(tmp_path / "old.sqlite")
    db.executescript("""CREATE TABLE loads (suite TEXT NOT NULL, sweep TEXT NOT NULL, scenario_id TEXT NOT NULL,
        label TEXT NOT NULL, scheme TEXT NOT NULL, repetition INTEGER NOT NULL, ok INTEGER NOT NULL, plt_ms REAL,
        bytes_total INTEGER, protocol TEXT, error TEXT, run_dir TEXT, load_index INTEGER, t_start_unix_s REAL,
        t_end_unix_s REAL, recorded_unix_s REAL NOT NULL, UNIQUE (suite, sweep, scenario_id, scheme, repetition));
        INSERT INTO loads VALUES ('s','main','id','lbl','claw',0,1,500.0,1,'h2',NULL,NULL,0,NULL,NULL,0.0);""")
    db.commit()
    db.close()
    with Store(tmp_path / "old.sqlite") as store:
        (row,) = store.loads()
    assert row.plt_ms == 500.0 and row.timing_ok is None and row.late_reruns == 0 and row.trace_ms is None
