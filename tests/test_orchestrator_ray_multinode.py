"""A real multi-node sweep (root): a Ray cluster of two nodes on this machine — a head and a
second raylet, each offering the ``root`` resource — runs one suite together. Its two scenarios
run side by side, one per node; the worker running one of them is killed (SIGKILL) after its
first load, and its scenario's missing loads run again on the other node. The store gets every
load exactly once, and the cluster (stopped by PID at the end) leaves no process behind."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
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

BIN = Path(sys.executable).parent
CLI = [str(BIN / "clawbed")]
RAY = str(BIN / "ray")
MARK_VAR = "CLAWBED_RAY_TEST_MARK"
REPETITIONS = 3
#: Longest the sweep may take, s.
SWEEP_TIMEOUT_S = 900.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _marked(mark: str, *, title: str | None = None) -> list[int]:
    """PIDs of processes carrying ``MARK_VAR=mark`` (and, if given, whose command line starts with
    ``title``)."""
    needle = f"{MARK_VAR}={mark}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if title is not None and not (entry / "cmdline").read_bytes().startswith(title.encode()):
                continue
        except OSError:
            continue
        pids.append(int(entry.name))
    return pids


def _stop(pids: list[int]) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.2)


def test_two_nodes_run_one_suite_and_a_killed_workers_scenario_runs_again_elsewhere(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, BPF)")
    spec = tmp_path / "multi.yaml"
    spec.write_text(yaml.safe_dump({
        "suite": "multinode", "loader": "h2", "repetitions": REPETITIONS, "load_timeout_s": 30,
        "matrix": {"traces": ["busy-cell", "idle-cell"], "pages": ["set-01"], "schemes": ["claw", "cubic"],
                   "conditions": [{"name": "base", "core_rtt_ms": 50}]}}))
    store, runs = tmp_path / "r.sqlite", tmp_path / "runs"
    mark = uuid.uuid4().hex
    state = Path(tempfile.mkdtemp(prefix="cbm", dir="/tmp"))  # Ray's socket paths must stay short
    port = _free_port()
    env = {**os.environ, MARK_VAR: mark, "CLAWBED_STATE": str(state), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--resources", '{"root": 1}',
              "--disable-usage-stats"]
    address = f"127.0.0.1:{port}"
    try:
        head = subprocess.run([RAY, "start", "--head", "--port", str(port), "--include-dashboard", "false",
                               "--temp-dir", str(state / "ray"), *common],
                              capture_output=True, text=True, timeout=120, env=env)
        assert head.returncode == 0, head.stdout + head.stderr
        second = subprocess.run([RAY, "start", "--address", address, *common],
                                capture_output=True, text=True, timeout=120, env=env)
        assert second.returncode == 0, second.stdout + second.stderr
        assert len(_marked(mark, title="/")) >= 2  # the cluster's processes carry the mark

        sweep = subprocess.Popen([*CLI, "suite", "run", str(spec), "--executor", "ray", "--ray-address", address,
                                  "--sweep", "multi", "--store", str(store), "--runs-dir", str(runs),
                                  "--run-id-prefix", "om"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        # Both scenarios run at once, one per node; after the first recorded load, kill one worker.
        killed = None
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while killed is None and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.5)
            if not store.exists():
                continue
            with sqlite3.connect(store) as db:
                try:
                    first = db.execute("SELECT COUNT(*) FROM loads WHERE sweep='multi'").fetchone()[0]
                except sqlite3.OperationalError:
                    continue
            workers = _marked(mark, title="ray::_run_on_worker")
            if first >= 1 and len(workers) == 2:
                killed = workers[0]
                os.kill(killed, signal.SIGKILL)
        if killed is None:  # say what the sweep did instead (it may have ended, or failed)
            sweep.kill()
            out, err = sweep.communicate(timeout=30)
            pytest.fail(f"the two scenarios never ran side by side (sweep exit {sweep.returncode}, "
                        f"workers seen {_marked(mark, title='ray::_run_on_worker')}):\n{out[-3000:]}\n{err[-3000:]}")
        out, err = sweep.communicate(timeout=SWEEP_TIMEOUT_S)
        assert sweep.returncode == 0, out + err
    finally:
        _stop(_marked(mark))
        leftover = _marked(mark)
        shutil.rmtree(state, ignore_errors=True)
    assert leftover == [], "the cluster left processes behind"

    text = re.sub(r"\s+", " ", err)
    # Every task said where it ran: the two first attempts on two nodes; the lost scenario's
    # second attempt on the other node than its first.
    placed = dict(re.findall(r"(\w{12}-a\d) runs on Ray node (\w+)", text))
    first_nodes = {node for run, node in placed.items() if run.endswith("-a1")}
    assert len(first_nodes) == 2, text
    again = [run for run in placed if run.endswith("-a2")]
    assert len(again) == 1 and "run again in" in text, text
    scenario = again[0][:-3]
    assert placed[f"{scenario}-a2"] != placed[f"{scenario}-a1"]

    db = sqlite3.connect(store)
    keys = db.execute("SELECT scenario_id, scheme, repetition, ok, run_dir FROM loads WHERE sweep='multi'").fetchall()
    assert len(keys) == 2 * 2 * REPETITIONS
    assert len({k[:3] for k in keys}) == len(keys)  # each (scenario, scheme, repetition) once
    assert all(k[3] == 1 for k in keys), keys
    assert {Path(k[4]).name for k in keys if k[0] == scenario} <= {f"{scenario}-a1", f"{scenario}-a2"}
    assert any(Path(k[4]).name == f"{scenario}-a2" for k in keys if k[0] == scenario)
    statuses = dict(db.execute("SELECT scenario_id, status FROM scenarios WHERE sweep='multi'").fetchall())
    assert set(statuses.values()) == {"complete"}, statuses
    # The killed replay's namespaces are gone (its ledger was cleaned up before the re-run).
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not re.search(r"\bcbom", netns), netns
