"""The Ray executor end to end (root): a two-scenario suite through a real local Ray cluster
(started and stopped by the sweep) records exactly the loads a local sweep records, in the same
shape, and leaves no Ray process behind."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.root

CLI = [str(Path(sys.executable).parent / "clawbed")]
#: An environment variable every process of the sweep inherits (the driver, and through it
#: the cluster's GCS, raylet, agents and workers): how the test finds what the sweep left.
MARK_VAR = "CLAWBED_RAY_TEST_MARK"
#: How long Ray's processes may take to exit after the driver has, s (a bound, not a measure).
EXIT_WAIT_S = 30.0


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "ray.yaml"
    path.write_text(yaml.safe_dump({
        "suite": "raysweep", "loader": "h2", "repetitions": 1, "load_timeout_s": 30,
        "matrix": {"traces": ["busy-cell", "idle-cell"], "pages": ["set-01"], "schemes": ["claw", "cubic"],
                   "conditions": [{"name": "base", "core_rtt_ms": 50}]}}))
    return path


def _marked_pids(mark: str) -> list[int]:
    """Processes whose environment carries ``MARK_VAR=mark``."""
    needle = f"{MARK_VAR}={mark}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:  # gone meanwhile, or a kernel thread
                continue
    return pids


def _loads(store: Path, sweep: str) -> list[sqlite3.Row]:
    db = sqlite3.connect(store)
    db.row_factory = sqlite3.Row
    return db.execute("SELECT * FROM loads WHERE sweep=? ORDER BY scenario_id, scheme, repetition", (sweep,)).fetchall()


def test_ray_sweep_records_what_a_local_sweep_does_and_leaves_no_process(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, BPF)")
    spec, store, runs = _spec(tmp_path), tmp_path / "r.sqlite", tmp_path / "runs"
    mark = uuid.uuid4().hex
    # A short state folder of its own: Ray's socket paths must stay short, and the project's
    # .state/ keeps no test sessions.
    state = Path(tempfile.mkdtemp(prefix="cbr", dir="/tmp"))
    env = {**os.environ, MARK_VAR: mark, "CLAWBED_STATE": str(state)}
    env.pop("RAY_ADDRESS", None)
    try:
        common = ["--store", str(store), "--runs-dir", str(runs), "--run-id-prefix", "or"]
        ray_run = subprocess.run([*CLI, "suite", "run", str(spec), "--executor", "ray", "--sweep", "ray", *common],
                                 capture_output=True, text=True, timeout=600, env=env)
        assert ray_run.returncode == 0, ray_run.stdout + ray_run.stderr
        # Ray's processes are gone (the driver's ray.shutdown() stopped the ones it started).
        deadline = time.monotonic() + EXIT_WAIT_S
        while _marked_pids(mark) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _marked_pids(mark) == [], "the Ray sweep left processes behind"
        sessions = list((state / "ray").glob("session_2*"))
        assert len(sessions) == 1 and (sessions[0] / "logs").is_dir()  # the cluster's files under the state folder

        local_run = subprocess.run([*CLI, "suite", "run", str(spec), "--sweep", "local", *common],
                                   capture_output=True, text=True, timeout=600, env=env)
        assert local_run.returncode == 0, local_run.stdout + local_run.stderr
    finally:
        for pid in _marked_pids(mark):  # only if an assertion above failed: stop them by PID
            os.kill(pid, signal.SIGTERM)
        shutil.rmtree(state, ignore_errors=True)

    on_ray, local = _loads(store, "ray"), _loads(store, "local")
    def key(r: sqlite3.Row) -> tuple:
        return (r["scenario_id"], r["label"], r["scheme"], r["repetition"])

    assert len(on_ray) == 4 and len({key(r) for r in on_ray}) == 4  # 2 scenarios × 2 schemes × 1, each once
    assert [key(r) for r in on_ray] == [key(r) for r in local]
    for row in on_ray:
        assert row["ok"] == 1, dict(row)
        assert row["plt_ms"] > 0 and row["bytes_total"] > 0 and row["protocol"] == "h2" and row["error"] is None
        # The run directory the worker wrote: the replay's files, as a local sweep writes them.
        run_dir = Path(row["run_dir"])
        assert run_dir.parent == runs / "raysweep" / "ray"
        assert (run_dir / "manifest.json").is_file() and (run_dir / "results.jsonl").is_file()
    def shape(rows: list[sqlite3.Row]) -> list[dict[str, bool]]:
        return [{k: (row[k] is None) for k in row.keys()} for row in rows]

    assert shape(on_ray) == shape(local)
    statuses = sqlite3.connect(store).execute("SELECT sweep, status FROM scenarios ORDER BY sweep").fetchall()
    assert statuses == [("local", "complete")] * 2 + [("ray", "complete")] * 2
