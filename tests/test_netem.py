"""netem on the wired link: probed once per run, used where the kernel has it; elsewhere a
wired delay moves into the emulator's core delay (said so) and jitter/loss/reordering are
refused with the options named."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from clawbed.errors import InputError
from clawbed.netns import Resources, new_run_id
from clawbed.orchestrator.spec import Condition
from clawbed.paths import REPO_ROOT
from clawbed.replay.network.topology import Impairment, Shaping, Topology, probe_netem
from clawbed.replay.run import ReplayConfig

root = pytest.mark.root
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")
TRACE = REPO_ROOT / "traces" / "samples" / "idle-cell.cbt"


def kernel_has_netem() -> bool:
    """Independent of tc: the netem qdisc's code is in the running kernel (built in or loaded)."""
    with open("/proc/kallsyms") as f:
        return any(line.rstrip().endswith(" netem_enqueue") or " netem_enqueue\t" in line for line in f)


# -- pure logic ----------------------------------------------------------------------------------

def test_impairment_arguments_and_rules() -> None:
    assert Impairment(20, 5, 1.5, 10).netem_args() == ["delay", "20ms", "5ms", "loss", "1.5%", "reorder", "10%"]
    assert Impairment(20).netem_args() == ["delay", "20ms"]
    assert not Impairment().active and Impairment(loss_pct=1).active
    assert Impairment(10, 2, 1).needs_netem_only == ["jitter_ms", "loss_pct"]
    assert Impairment(10).needs_netem_only == []
    with pytest.raises(ValueError, match="jitter_ms: jitter varies a delay"):
        Impairment(jitter_ms=3)
    with pytest.raises(ValueError, match="reorder_pct"):
        Impairment(reorder_pct=3)
    with pytest.raises(ValueError, match=r"loss_pct: 101 is outside 0..100"):
        Impairment(loss_pct=101)


def test_replay_config_names_the_flag() -> None:
    with pytest.raises(InputError, match="--wired-jitter-ms: jitter varies a delay; give --wired-delay-ms too"):
        ReplayConfig(trace=TRACE, page="set-01", schemes=["cubic"], runs=1, wired_jitter_ms=4).check()
    with pytest.raises(InputError, match="--wired-loss: -1"):
        ReplayConfig(trace=TRACE, page="set-01", schemes=["cubic"], runs=1, wired_loss_pct=-1).check()


def test_spec_condition_checks_the_same_rules() -> None:
    assert Condition(wired_delay_ms=10, wired_jitter_ms=2, wired_loss_pct=0.5).wired_loss_pct == 0.5
    with pytest.raises(ValueError, match="wired_jitter_ms varies a delay"):
        Condition(wired_jitter_ms=2)
    with pytest.raises(ValueError, match="wired_loss_pct"):
        Condition(wired_loss_pct=150)


# -- on this kernel ------------------------------------------------------------------------------

@root
@needs_root
def test_the_probe_tells_what_the_kernel_has(tmp_path: Path) -> None:
    with Resources(new_run_id(), tmp_path / "ledger.jsonl") as res:
        ns = res.namespace("p")
        probe = probe_netem(ns)
        assert probe.available == kernel_has_netem(), probe
        # The throwaway qdisc is gone again.
        assert [q["kind"] for q in json.loads(ns.run(["tc", "-j", "qdisc", "show", "dev", "lo"]).stdout)
                if q.get("kind") == "netem"] == []
        if not probe.available:
            assert probe.detail  # tc's own words, for the manifest


def _replay(clawbed_cli: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(clawbed_cli), "replay", "--trace", str(TRACE), "--page", "set-01", "--schemes",
                           "cubic", "--runs", "1", "--loader", "h2", "--runs-dir", str(tmp_path), "--name", "w",
                           *args], capture_output=True, text=True, timeout=300)


@root
@needs_root
def test_without_netem_a_wired_delay_goes_into_the_core_delay(clawbed_cli: Path, tmp_path: Path) -> None:
    if kernel_has_netem():
        pytest.skip("this kernel has netem: the fallback is not taken (test_netem_impairs_the_wired_link runs)")
    proc = _replay(clawbed_cli, tmp_path, "--wired-delay-ms", "20", "--core-rtt-ms", "40")
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())  # the terminal wraps lines at 80 columns
    assert "has no netem" in said and "core RTT 80 ms" in said
    manifest = json.loads((tmp_path / "w" / "manifest.json").read_text())
    wired = manifest["wired_link"]
    assert wired["netem"]["available"] is False and wired["via"] == "emulator core delay"
    assert wired["core_rtt_ms"] == 80
    delays = manifest["emulator"]["config"]["delays"]
    assert delays["core_down_ms"] == delays["core_up_ms"] == 40


@root
@needs_root
@pytest.mark.parametrize("args,named", [
    (["--wired-delay-ms", "20", "--wired-jitter-ms", "5"], "--wired-jitter-ms"),
    (["--wired-loss", "1"], "--wired-loss"),
])
def test_without_netem_what_only_netem_gives_is_refused(clawbed_cli: Path, tmp_path: Path, args: list[str],
                                                       named: str) -> None:
    if kernel_has_netem():
        pytest.skip("this kernel has netem: nothing is refused")
    proc = _replay(clawbed_cli, tmp_path, *args)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"clawbed: error: {named}") and "no netem" in line
    assert "Traceback" not in proc.stderr


@root
@needs_root
def test_netem_impairs_the_wired_link(tmp_path: Path) -> None:
    """Where the kernel has netem (the Vagrant VM's does): the bottleneck's both ends carry
    it under the shaping qdisc, and a ping across it pays the delay twice."""
    if not kernel_has_netem():
        pytest.skip("this kernel has no netem (docs/platform-notes.md); the Vagrant VM's kernel has it")
    with Resources(new_run_id(), tmp_path / "ledger.jsonl") as res:
        topo = Topology(res, n_ues=1)
        server = topo.add_server(Shaping("20mbit"), impairment=Impairment(delay_ms=30, loss_pct=0))
        assert topo.wired is not None
        kinds = [q["kind"] for q in json.loads(topo.wired.gateway.ns.run(
            ["tc", "-j", "qdisc", "show", "dev", topo.wired.bottleneck_device]).stdout)]
        assert kinds[:2] == ["tbf", "netem"]
        ping = server.ns.run(["ping", "-n", "-c", "3", "-i", "0.2", str(topo.wired.core_address)])
        rtts = [float(w.split("=")[1]) for w in ping.stdout.split() if w.startswith("time=")]
        assert min(rtts) >= 60
