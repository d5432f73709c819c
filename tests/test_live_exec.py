"""Runs say what they made, and ``clawbed exec RUN ROLE -- CMD`` runs a command in a live run's
namespace: the record's reading (unit, over a made-up run directory) and a real replay whose
UE pings its server through the emulator while it runs (root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clawbed.errors import InputError
from clawbed.live import exec_argv, find_run, read_run
from clawbed.netns import Ledger
from clawbed.paths import runs_dir
from clawbed.replay.run import Replay, ReplayConfig, ReplayEvent
from clawbed.replay.rundir import describe_made, resources_made

CLAWBED = Path(sys.executable).parent / "clawbed"
SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "samples"


def made_up_run(tmp_path: Path, *, emulator_pid: int, status: str | None = "running",
                wired: bool = False) -> Path:
    """A run directory whose ledger records run id ``ab12``'s namespaces and an emulator."""
    run = tmp_path / "run"
    ledger = Ledger(run / "ledger.jsonl")
    for name in ("cbab12core", "cbab12u0", "cbab12u1", *(["cbab12gw", "cbab12srv"] if wired else [])):
        ledger.record("netns", name)
    ledger.record("link", "cbab12v0", netns="cbab12gw")
    ledger.record("process", "clawbed-emu", pid=emulator_pid, argv=["clawbed-emu", "--config", "x"],
                  start_ticks=None)
    ledger.record("process", "nginx-10.64.0.1-443", pid=4242,
                  argv=["ip", "netns", "exec", "cbab12core", "nginx", "-c", "conf"])
    if status is not None:
        (run / "manifest.json").write_text(json.dumps({"status": status, "run_id": "ab12"}))
    return run


def test_roles_come_from_the_record(tmp_path: Path) -> None:
    live = read_run(made_up_run(tmp_path, emulator_pid=1))
    assert live.run_id == "ab12"
    assert live.namespace("ue") == "cbab12u0" and live.namespace("ue1") == "cbab12u1"
    assert live.namespace("core") == "cbab12core"
    assert live.namespace("server") == "cbab12core"  # no wired side: the server runs in the core's
    wired = read_run(made_up_run(tmp_path / "w", emulator_pid=1, wired=True))
    assert wired.namespace("server") == "cbab12srv"
    with pytest.raises(InputError, match="one of ue, server, core"):
        live.namespace("gateway")
    with pytest.raises(InputError, match="no ue7 namespace"):
        live.namespace("ue7")


def test_a_run_that_is_not_live_is_refused(tmp_path: Path) -> None:
    finished = made_up_run(tmp_path / "a", emulator_pid=os.getpid(), status="complete")
    with pytest.raises(InputError, match="not live .*complete"):
        exec_argv(str(finished), "ue", ["ip", "addr"])
    # Killed without a word (the manifest still says running): its emulator is gone.
    killed = made_up_run(tmp_path / "b", emulator_pid=2**22 + 12345)
    with pytest.raises(InputError, match="emulator, PID .* has ended"):
        exec_argv(str(killed), "ue", ["ip", "addr"])
    with pytest.raises(InputError, match="give the command"):
        exec_argv(str(killed), "ue", [])
    with pytest.raises(InputError, match="no such run directory"):
        find_run(str(tmp_path / "nothing"))


def test_made_names_roles_links_and_pids(tmp_path: Path) -> None:
    run = made_up_run(tmp_path, emulator_pid=77)
    made = resources_made(run / "ledger.jsonl", "ab12", {"namespaces": {"ue0": "cbab12u0", "server": "cbab12core"},
                                                         "tuns": {"ue0": "cbab12t0"}})
    assert made["prefix"] == "cbab12" and made["namespaces"]["ue0"] == "cbab12u0"
    assert made["all_namespaces"] == ["cbab12core", "cbab12u0", "cbab12u1"]
    assert made["links"] == [{"name": "cbab12v0", "netns": "cbab12gw"}]
    assert {"name": "nginx-10.64.0.1-443", "pid": 4242, "netns": "cbab12core"} in made["processes"]
    line = describe_made(made, tmp_path / "my-run")
    assert "run id ab12" in line and "ue0 cbab12u0" in line and "clawbed-emu 77" in line
    assert f"clawbed exec {tmp_path / 'my-run'} ue -- CMD" in line  # outside the runs folder: its path
    assert "clawbed exec my-run ue -- CMD" in describe_made(made, runs_dir().resolve() / "my-run")


@pytest.mark.root
def test_exec_runs_in_a_live_replays_ue(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    config = ReplayConfig(trace=SAMPLES / "idle-cell.cbt", page="set-01", schemes=["cubic"], runs=1, loader="h2",
                          core_rtt_ms=50, name="live", output_root=tmp_path, load_timeout_s=30)
    run_dir = tmp_path / "live"
    seen: dict[str, object] = {}

    def clawbed_exec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLAWBED, "exec", *args], capture_output=True, text=True, timeout=60)

    def on_event(event: ReplayEvent) -> None:
        if event.kind != "ready":
            return
        seen["ready"] = event.message
        seen["addr"] = clawbed_exec(str(run_dir), "ue", "--", "ip", "-o", "-4", "addr")
        # By name under the runs folder works too; the ping crosses the emulated cell.
        seen["ping"] = subprocess.run([CLAWBED, "exec", "live", "ue", "--", "ping", "-c", "2", "-W", "5", "10.64.0.1"],
                                      capture_output=True, text=True, timeout=60,
                                      env={**os.environ, "CLAWBED_RUNS": str(tmp_path)})
        seen["server"] = clawbed_exec(str(run_dir), "server", "--", "ip", "-o", "-4", "addr")

    replay = Replay(config, on_event=on_event)
    records = replay.run()
    assert records and records[0].measured, records[0].error if records else "no load"
    rid = replay.run_id
    ready = str(seen["ready"])
    print(f"\nstart line: {ready}")
    assert f"run id {rid}" in ready and f"cb{rid}u0" in ready and "clawbed-emu" in ready and "nginx" in ready
    addr, ping, server = (seen[k] for k in ("addr", "ping", "server"))
    assert isinstance(addr, subprocess.CompletedProcess) and addr.returncode == 0, addr
    assert f"cb{rid}t0" in addr.stdout and "10.65.0.1" in addr.stdout, addr.stdout
    assert isinstance(ping, subprocess.CompletedProcess) and ping.returncode == 0, (ping.stdout, ping.stderr)
    print(ping.stdout.strip().splitlines()[-1])
    assert "2 received" in ping.stdout
    assert isinstance(server, subprocess.CompletedProcess) and "10.64.0.1" in server.stdout, server
    # The manifest names what the run made, by role, with the PIDs it started.
    made = json.loads((run_dir / "manifest.json").read_text())["made"]
    assert made["run_id"] == rid and made["namespaces"]["ue0"] == f"cb{rid}u0"
    assert made["namespaces"]["server"] == f"cb{rid}core" and made["tuns"]["ue0"] == f"cb{rid}t0"
    names = {p["name"] for p in made["processes"]}
    assert "clawbed-emu" in names and any(n.startswith("nginx") for n in names)
    assert any(n.startswith("loader-") for n in names)
    assert {"name": "clawbed-emu", "pid": replay.emulator_pid, "netns": None} in made["processes"]
    # The doctor's verdict is recorded with the run, steal and other processes sampled before it.
    verdict = json.loads((run_dir / "manifest.json").read_text())["doctor"]
    assert verdict["verdict"] in ("ok", "warn", "bad") and verdict["sample_s"] >= 0.4
    assert verdict["steal_pct"] is not None and verdict["others_cpu_pct"] is not None
    assert isinstance(verdict["top_processes"], list)
    # Once the run has ended, exec refuses, saying why.
    after = clawbed_exec(str(run_dir), "ue", "--", "ip", "addr")
    assert after.returncode == 2 and "not live" in after.stderr, after.stderr


@pytest.mark.root
def test_exec_runs_in_a_live_emu_run(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    out = tmp_path / "emu"
    shell = subprocess.Popen([CLAWBED, "emu", "run", "--rate", "12mbit", "--out", str(out), "--", "sleep", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ping = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the cell is up: the UE has its TUN
            ping = subprocess.run([CLAWBED, "exec", str(out), "ue", "--", "ping", "-c", "1", "-W", "5", "10.64.0.1"],
                                  capture_output=True, text=True, timeout=60)
            if ping.returncode == 0:
                break
            time.sleep(0.5)
        assert ping is not None and ping.returncode == 0, (ping.stdout, ping.stderr) if ping else None
        assert "1 received" in ping.stdout
    finally:
        shell.send_signal(signal.SIGINT)  # the emulator shell stops everything on Ctrl-C
        shell.communicate(timeout=60)
    after = subprocess.run([CLAWBED, "exec", str(out), "ue", "--", "true"], capture_output=True, text=True, timeout=60)
    assert after.returncode == 2 and "not live" in after.stderr, after.stderr
