"""Mistakes and failures: each gives an error naming the file, field or flag, and leaves
nothing running and nothing behind (no namespace of the run, no emulator process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyroute2 import netns

from clawbed.emulator.config import ConfigError, EmulatorConfig
from clawbed.emulator.process import EmulatedCell, Emulator, EmulatorError
from clawbed.emulator.scenarios import constant_trace
from clawbed.emulator.truth import read_truth
from clawbed.netns import Ledger, Resources, cleanup_from_ledger, new_run_id

pytestmark = pytest.mark.root

#: The venv's ``clawbed`` command (tests run with the venv's Python).
CLAWBED = str(Path(sys.executable).parent / "clawbed")


def run_leftovers(run_id: str) -> list[str]:
    return [n for n in netns.listnetns() if n.startswith(f"cb{run_id}")]


def processes_left(ledger_path: Path) -> list[str]:
    """Processes a run's ledger recorded that are still alive."""
    left = []
    for entry in Ledger(ledger_path).entries():
        if entry["kind"] == "process" and Path(f"/proc/{entry['pid']}").exists():
            left.append(f"{entry['name']} (pid {entry['pid']})")
    return left


def _bad_trace_csv(path: Path) -> Path:
    """A trace whose row 3 has MCS 40 (valid: 0..28)."""
    meta = {"format_version": 1, "cell": {"bandwidth_mhz": 10, "n_rb": 50, "n_antennas": 2}, "duration_ms": 3,
            "start_sfn": 0, "source": "synth", "provenance": {"generator": "test"}}
    path.write_text(f"# clawbed-trace 1\n# {json.dumps(meta)}\nt_ms,mcs,other_rbs\n0,10,0\n1,10,0\n2,40,0\n")
    return path


def test_bad_trace_is_refused_by_the_emulator(tmp_path: Path) -> None:
    run_id = new_run_id()
    bad = _bad_trace_csv(tmp_path / "bad.csv")
    with pytest.raises(EmulatorError) as caught:
        with EmulatedCell(1, tmp_path / "run", ue={"trace": bad}, run_id=run_id):
            pytest.fail("the emulator started with a bad trace")
    message = str(caught.value)
    assert "exit code 2" in message and "bad.csv" in message and "mcs" in message, message
    assert run_leftovers(run_id) == []
    assert processes_left(tmp_path / "run" / "ledger.jsonl") == []


def test_bad_mahimahi_trace_is_refused_with_its_line(tmp_path: Path) -> None:
    run_id = new_run_id()
    bad = tmp_path / "bad.down"
    bad.write_text("1\n2\nfast\n")
    with pytest.raises(EmulatorError, match=r"(?s)exit code 2.*line 3"):
        with EmulatedCell(1, tmp_path / "run", ue={"mahimahi_trace": bad}, mode="mahimahi", run_id=run_id):
            pytest.fail("the emulator started with a bad Mahimahi trace")
    assert run_leftovers(run_id) == []
    assert processes_left(tmp_path / "run" / "ledger.jsonl") == []


def test_a_missing_namespace_is_named(tmp_path: Path) -> None:
    """What only the binary can check (the namespace exists) comes back with its field."""
    run_id = new_run_id()
    ledger = tmp_path / "ledger.jsonl"
    with Resources(run_id, ledger) as res:
        ue = res.namespace("u0")
        config = EmulatorConfig.build(output_dir=tmp_path / "out", mode="rate", core={"netns": f"cb{run_id}nope"},
                                      ues=[{"netns": ue.name, "rate": "1mbit"}])
        with pytest.raises(EmulatorError, match=rf"(?s)exit code 2.*core\.netns.*cb{run_id}nope"):
            Emulator(res, config).start()
    assert run_leftovers(run_id) == []
    assert processes_left(ledger) == []


def test_config_mistakes_are_found_before_anything_is_made(tmp_path: Path) -> None:
    run_id = new_run_id()
    with pytest.raises(ConfigError, match=r"ues\[0\]\.rate.*byte units"):
        with EmulatedCell(1, tmp_path, ue={"rate": "12mbps"}, mode="rate", run_id=run_id):
            pytest.fail("started with a bad rate")
    with pytest.raises(ConfigError, match=r"cell\.harq\.max_tx"):
        with EmulatedCell(1, tmp_path, ue={"rate": "1mbit"}, mode="rate", cell={"harq": {"max_tx": 99}}, run_id=run_id):
            pytest.fail("started with a bad HARQ limit")
    assert run_leftovers(run_id) == []


def test_a_missing_binary_says_how_to_build_it(tmp_path: Path) -> None:
    run_id = new_run_id()
    with pytest.raises(EmulatorError, match="make build"):
        with EmulatedCell(1, tmp_path, ue={"rate": "1mbit"}, mode="rate", run_id=run_id,
                          binary=tmp_path / "no-such-binary"):
            pytest.fail("started without a binary")
    assert run_leftovers(run_id) == []


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CLAWBED_RUNS=str(tmp_path / "runs"))
    return subprocess.run([CLAWBED, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["--rate", "12mbps"], "Invalid value for '--rate'"),
    ([], "mode cell needs --trace"),
    (["--rate", "1mbit", "--mode", "cell"], "--rate is for mode rate"),
    (["--ues", "0", "--rate", "1mbit"], "Invalid value for '--ues'"),
    (["--trace", "/no/such/trace.cbt"], "does not exist"),
    (["--scheduler", "fifo", "--rate", "1mbit"], "Invalid value for '--scheduler'"),
])
def test_cli_bad_flags(tmp_path: Path, args: list[str], message: str) -> None:
    result = _cli(["emu", "run", *args, "--", "true"], tmp_path)
    assert result.returncode == 2
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists(), "a run directory was made for a refused command"


def test_cli_bad_trace_reports_and_cleans_up(tmp_path: Path) -> None:
    bad = _bad_trace_csv(tmp_path / "bad.csv")
    result = _cli(["emu", "run", "--trace", str(bad), "--out", str(tmp_path / "run"), "--", "true"], tmp_path)
    assert result.returncode == 2
    assert "clawbed: error: clawbed-emu rejected its config or trace (exit code 2)" in result.stderr, result.stderr
    ledger = Ledger(tmp_path / "run" / "ledger.jsonl").entries()
    assert ledger, "the run recorded nothing"
    assert not {e["name"] for e in ledger if e["kind"] == "netns"} & set(netns.listnetns())
    assert processes_left(tmp_path / "run" / "ledger.jsonl") == []


def test_cli_runs_the_command_in_the_ue_namespace(tmp_path: Path) -> None:
    trace = constant_trace(tmp_path / "flat.cbt", mcs=20, seconds=5)
    script = "ip -o -4 addr show | grep -q \"$CLAWBED_UE_ADDRESS\" && ping -n -c 2 -i 0.2 \"$CLAWBED_SERVER\" && exit 7"
    result = _cli(["emu", "run", "--trace", str(trace), "--ues", "2", "--out", str(tmp_path / "run"),
                   "--", "sh", "-c", script], tmp_path)
    assert result.returncode == 7, result.stderr
    assert "2 received" in result.stdout
    for name in ("truth.cbcol", "packets.cbcol", "diag-ue0.jsonl", "diag-ue1.jsonl", "counters.json"):
        assert (tmp_path / "run" / name).is_file()
        assert name.split(".")[0].split("-")[0] in result.stderr
    assert processes_left(tmp_path / "run" / "ledger.jsonl") == []


def _ignoring(*signals: signal.Signals) -> Callable[[], None]:
    """A preexec function that starts the child with ``signals`` ignored, as ``nohup`` (SIGHUP)
    or ``&`` in a non-interactive shell (SIGINT) would."""
    def preexec() -> None:
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
    return preexec


def _ignored_signals(pid: int) -> set[int]:
    """The signals process ``pid`` ignores (its SigIgn mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask & (1 << (n - 1))}
    return set()


@pytest.mark.parametrize("started_with_ignored", [(), (signal.SIGHUP,), (signal.SIGINT, signal.SIGHUP)],
                         ids=["foreground", "nohup", "background-in-a-script"])
def test_cli_ctrl_c_stops_everything_and_keeps_the_truth(tmp_path: Path,
                                                         started_with_ignored: tuple[signal.Signals, ...]) -> None:
    """Ctrl-C (SIGINT to the CLI) mid-run: the command and the emulator stop, the namespaces go,
    and the ground truth holds every subframe that ran. Also when the CLI was started with
    SIGINT/SIGHUP ignored: its children then start with the default dispositions."""
    env = dict(os.environ, CLAWBED_RUNS=str(tmp_path / "runs"))
    out = tmp_path / "run"
    proc = subprocess.Popen([CLAWBED, "emu", "run", "--rate", "5mbit", "--out", str(out),
                             "--", "sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_ignoring(*started_with_ignored))
    try:
        deadline = time.monotonic() + 30
        while not (out / "truth.cbcol").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)
        children = [e["pid"] for e in Ledger(out / "ledger.jsonl").entries() if e["kind"] == "process"]
        assert children
        for pid in children:
            assert not _ignored_signals(pid) & {signal.SIGINT, signal.SIGHUP}, (pid, _ignored_signals(pid))
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            if (out / "ledger.jsonl").exists():
                cleanup_from_ledger(out / "ledger.jsonl")  # a failed check must not leave the run behind
    assert proc.returncode == 130, stderr
    assert "interrupted after" in stderr
    counters = json.loads((out / "counters.json").read_text())
    truth = read_truth(out / "truth.cbcol")
    assert truth.rows == counters["emulated_ms"] >= 1000
    assert processes_left(out / "ledger.jsonl") == []
    assert not {e["name"] for e in Ledger(out / "ledger.jsonl").entries() if e["kind"] == "netns"} & set(netns.listnetns())


@pytest.mark.root
def test_a_full_disk_is_counted_and_counters_json_is_never_left_empty(tmp_path: Path) -> None:
    """The run's files on a file system that fills up: the diag file's failed writes are
    counted (as the truth writer's first error is recorded), the emulator says so in its
    counters line, and counters.json is either whole or absent — never empty or cut."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "cbtestfull", str(small)], check=True)
    try:
        run_id = new_run_id()
        cell = EmulatedCell(1, small / "run", ue={"rate": "20mbit"}, mode="rate", run_id=run_id)
        with cell:
            time.sleep(3.0)
            try:
                cell.stop()
            except EmulatorError as e:
                # counters.json could not be written (its error went to the stderr log, on the
                # same full disk): a clean exit 1, never a panic (101) over a lost message.
                assert "exited with code 1" in str(e), e
        counters = cell.emulator.counters
        assert counters is not None, "the counters line is printed whatever the disk"
        assert counters["diag"]["file_write_errors"][0] > 0
        assert counters["diag"]["file_write_error"][0], "the first error's text"
        path = small / "run" / "counters.json"
        if path.exists():
            assert json.loads(path.read_text())["diag"]["file_write_errors"][0] > 0
        assert not list((small / "run").glob(".counters.json.tmp"))
        assert run_leftovers(run_id) == []
    finally:
        subprocess.run(["umount", str(small)], check=False)
