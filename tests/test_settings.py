"""The one settings vocabulary (replay/settings.py): every door lists every setting under the
same name, and one check judges a value whichever door it came in by."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from clawbed.cli import cli
from clawbed.errors import InputError
from clawbed.orchestrator.spec import Condition, SpecError, load_spec
from clawbed.paths import REPO_ROOT
from clawbed.replay import settings
from clawbed.replay.run import ReplayConfig

TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_door_has_every_setting_under_its_name() -> None:
    replay_fields = {f.name for f in dataclasses.fields(ReplayConfig)}
    replay_help, emu_help = _help("replay"), _help("emu", "run")
    for name, setting in settings.SETTINGS.items():
        assert name in replay_fields, f"ReplayConfig has no field {name}"
        assert name in Condition.model_fields, f"a suite condition has no key {name}"
        assert setting.flag in replay_help, f"clawbed replay --help lacks {setting.flag}"
        # emu run lists every setting: its own as options, a replay's web server's in its epilog.
        assert setting.flag in emu_help, f"clawbed emu run --help lacks {setting.flag}"
        options = emu_help.split("Settings of a replay's own web server")[0]
        assert bool(re.search(re.escape(setting.flag) + r"[ ,/]", options)) == setting.emu, setting.flag


def test_the_reference_is_written_from_the_registry() -> None:
    doc = (REPO_ROOT / "docs" / "settings.md").read_text()
    assert doc == settings.reference_markdown(), \
        "docs/settings.md is stale: python -m clawbed.replay.settings > docs/settings.md"


@pytest.mark.parametrize("key,value,message", [
    ("loss", {"kind": "fixed", "probability": 2}, "loss: probability"),
    ("scheduler", "fifo", "scheduler: unknown scheduler 'fifo'"),
    ("uplink_rate", "5mbps", "uplink_rate:"),
    ("bs_buffer", "3 parsecs", "bs_buffer: '3 parsecs' is not a size"),
    ("server_sysctls", {"kernel.panic": "1"}, "server_sysctls:"),
    ("feed_timing", "late", "feed_timing: 'late': one of phone, ideal"),
])
def test_one_check_for_spec_and_replay(tmp_path: Path, key: str, value: object, message: str) -> None:
    spec = {"suite": "t", "matrix": {"traces": ["busy-cell"], "pages": ["set-01"], "schemes": ["cubic"],
                                     "conditions": [{key: value}]}}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as spec_err:
        load_spec(path)
    assert f"matrix.conditions[0].{message}" in str(spec_err.value)
    with pytest.raises(InputError) as replay_err:
        ReplayConfig(trace=TRACE, page="set-01", schemes=["cubic"], runs=1, **{key: value}).check()
    assert settings.SETTINGS[key].flag in str(replay_err.value)


def test_flags_parse_into_what_a_spec_says() -> None:
    assert settings.parse_policy("loss")("fixed:probability=0.01") == {"kind": "fixed", "probability": 0.01}
    with pytest.raises(ValueError, match="probability='high'"):
        settings.parse_policy("loss")("fixed:probability=high")
    assert settings.check("loss", {"kind": "fixed"}) == "fixed"  # a bare table is its name: one scenario id
    assert settings.parse_key_value("net.ipv4.tcp_sack=0") == ("net.ipv4.tcp_sack", "0")


def test_cell_settings_become_emulator_keys() -> None:
    fields, ue = settings.emulator_fields({"scheduler": "round-robin", "loss": {"kind": "fixed", "probability": 0.1},
                                           "bs_buffer": "1MiB", "uplink_rate": "2mbit", "air_delay_ms": 2.0,
                                           "rsrq_noise_db": 1.0, "queue": "drop-tail", "drwa": True})
    assert fields == {"cell": {"scheduler": "round-robin", "loss": {"kind": "fixed", "probability": 0.1},
                               "rsrq": {"noise_db": 1.0}}, "delays": {"air_ms": 2.0}}
    assert ue == {"cell": {"queue_limit_bytes": 1 << 20, "queue": "drop-tail"}, "uplink_rate": "2mbit"}
    assert settings.emulator_fields({}) == ({}, {})
    assert settings.emulator_fields({"feed_timing": "ideal"}) == ({"diag": {"feed_timing": "ideal"}}, {})


def test_a_setting_added_later_keeps_old_scenario_ids() -> None:
    from clawbed.orchestrator.spec import scenario_settings

    plain = scenario_settings("busy-cell", "set-01", Condition(), 1, "h2", None, 60.0)["condition"]
    assert "loss" not in plain and "uplink_rate" not in plain and "scheduler" in plain
    lossy = scenario_settings("busy-cell", "set-01", Condition(loss="fixed"), 1, "h2", None, 60.0)["condition"]
    assert lossy["loss"] == "fixed"


def test_describe_prints_what_is_set() -> None:
    text = settings.describe({"rrc": "umts", "drwa": True, "server_sysctls": {"net.ipv4.tcp_sack": "0"},
                              "loss": {"kind": "fixed", "probability": 0.01}, "stall": None})
    assert text == "--rrc umts --drwa --server-sysctls net.ipv4.tcp_sack=0 --loss fixed:probability=0.01"


@pytest.mark.root
def test_emu_run_takes_a_replays_settings_and_sets_the_servers_cc(tmp_path: Path, clawbed_cli: Path) -> None:
    """`emu run` with the scheme, the server and UE settings and a cell policy: each shows where it
    acts (the core namespace's default CC and sysctl, the UE's tcp_rmem, the emulator's config)."""
    import json
    import os
    import subprocess

    probe = ("ip netns exec $CLAWBED_CORE_NETNS sysctl -n net.ipv4.tcp_congestion_control net.ipv4.tcp_sack; "
             "sysctl -n net.ipv4.tcp_rmem")
    out = tmp_path / "emu"
    result = subprocess.run([str(clawbed_cli), "emu", "run", "--rate", "12mbit", "--schemes", "reno",
                             "--ue-rmem", "galaxy-s2", "--server-sysctl", "net.ipv4.tcp_sack=0",
                             "--loss", "fixed:probability=0.01", "--bs-buffer", "1MiB", "--out", str(out),
                             "--", "sh", "-c", probe], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CLAWBED_RUNS=str(tmp_path / "runs")))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["reno", "0", "4096", "87380", "110208"], result.stdout
    assert "congestion control reno set as" in result.stderr
    config = json.loads((out / "emulator.json").read_text())
    assert config["cell"]["loss"] == {"kind": "fixed", "probability": 0.01}
    assert config["ues"][0]["cell"]["queue_limit_bytes"] == 1 << 20


@pytest.mark.root
def test_emu_run_never_inherits_the_hosts_congestion_control(tmp_path: Path, clawbed_cli: Path) -> None:
    import os
    import subprocess

    result = subprocess.run([str(clawbed_cli), "emu", "run", "--rate", "12mbit", "--out", str(tmp_path / "emu"),
                             "--", "sh", "-c", "ip netns exec $CLAWBED_CORE_NETNS sysctl -n "
                                               "net.ipv4.tcp_congestion_control"],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CLAWBED_RUNS=str(tmp_path / "runs")))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cubic" and "congestion control cubic set as" in result.stderr
