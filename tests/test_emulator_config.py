"""The emulator's Python side without namespaces: config validation (checked against the
binary's own ``--check``), rates, diag helpers."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from clawbed.emulator import diag
from clawbed.emulator.config import ConfigError, EmulatorConfig, parse_rate_bps

BASE = {"mode": "rate", "core": {"netns": "cbxcore"}}


def build(tmp_path: Path, **fields: object) -> EmulatorConfig:
    return EmulatorConfig.build(**{"output_dir": tmp_path, **BASE, **fields})


def test_rates_use_the_binary_syntax() -> None:
    assert parse_rate_bps("12mbit") == 12_000_000
    assert parse_rate_bps("1.5Mbit") == 1_500_000
    assert parse_rate_bps("800") == 800
    for bad in ("12mbps", "fast", "0kbit", "12 MB"):
        with pytest.raises(ValueError):
            parse_rate_bps(bad)


@pytest.mark.parametrize("fields, field", [
    ({"ues": [{"netns": "cbxu0"}]}, "ues[0].rate"),
    ({"ues": [{"netns": "cbxu0", "rate": "5mbps"}]}, "ues[0].rate"),
    ({"ues": [{"netns": "cbxu0", "rate": "5mbit", "rat": "1"}]}, "ues[0].rat"),
    ({"ues": [{"netns": "cbxu0", "rate": "5mbit", "cell": {"queue_limit_bytes": 0}}]}, "ues[0].cell.queue_limit_bytes"),
    ({"ues": [{"netns": "a", "rate": "1mbit"}], "cell": {"harq": {"max_tx": 99}}}, "cell.harq.max_tx"),
    ({"ues": [{"netns": "a", "rate": "1mbit"}], "cell": {"scheduler": "fifo"}}, "cell.scheduler"),
    ({"ues": [{"netns": "a", "rate": "1mbit"}], "cell": {"scheduler": {"name": "round-robin"}}}, "cell.scheduler"),
    ({"ues": [{"netns": "a", "rate": "1mbit"}], "cell": {"loss": {"kind": "fixed", "probability": 2}}}, "cell.loss"),
    ({"ues": [{"netns": "a", "rate": "1mbit"}], "cell": {"loss": {"kind": "fixed", "p": 0.1}}}, "cell.loss"),
    ({"ues": [{"netns": "a", "rate": "1mbit", "cell": {"queue": "red"}}]}, "ues[0].cell.queue"),
    ({"ues": [{"netns": "a", "rate": "1mbit"}], "cell": {"n_rb": 51}}, "cell.n_rb"),
    ({"ues": [{"netns": "a", "rate": "1mbit", "tun": "a-name-longer-than-15"}]}, "ues[0].tun"),
    ({"ues": [{"netns": "a", "rate": "1mbit", "routes": ["10.0.0.1/8"]}]}, "ues[0].routes"),
    ({"ues": [{"netns": "a", "rate": "1mbit", "address": "10.1.0.1"},
              {"netns": "b", "rate": "1mbit", "address": "10.1.0.1"}]}, "ues[1].address"),
    ({"ues": [{"netns": "a", "rate": "1mbit", "uplink_rate": "1mbit", "uplink_mahimahi_trace": __file__}]}, "ues[0]"),
    ({"ues": [{"netns": "a", "rate": "1mbit"}], "delays": {"air_ms": -1}}, "delays.air_ms"),
    ({"ues": []}, "ues"),
    ({"ues": [{"netns": "a", "rate": "1mbit"}], "mode": "cell"}, "ues[0].trace"),
])
def test_errors_name_the_field(tmp_path: Path, fields: dict, field: str) -> None:
    with pytest.raises(ConfigError, match="config field `" + re.escape(field)):
        build(tmp_path, **fields)


def test_missing_trace_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ues\[0\]\.trace`: .*nope\.cbt is not a file"):
        build(tmp_path, mode="cell", ues=[{"netns": "a", "trace": tmp_path / "nope.cbt"}])


def test_written_config_has_the_binary_keys(tmp_path: Path) -> None:
    config = build(tmp_path, ues=[{"netns": "a", "rate": "2mbit"}], cell={"rsrq": {"noise_db": 0}})
    data = json.loads(config.write(tmp_path / "emu.json").read_text())
    assert set(data) <= {"mode", "seed", "output_dir", "duration_s", "loop_trace", "background_trace",
                         "realtime_priority", "affinity", "tun_offload", "cpu_latency_qos", "max_packets",
                         "mtu_bytes", "delays", "core", "ues", "diag", "cell", "events"}
    assert data["ues"][0]["rate"] == "2mbit" and data["cell"]["rsrq"]["noise_db"] == 0
    assert Path(data["output_dir"]).is_absolute()
    with pytest.raises(ValueError, match=r"\.json"):
        config.write(tmp_path / "emu.toml")


def _pdsch(sfn: int, sf: int) -> dict:
    return {"type_id": diag.PDSCH_STAT, "timestamp": 0.0,
            "Records": [{"Frame Num": sfn, "Subframe Num": sf, "Num RBs": 0, "Transport Blocks": []}]}


def test_subframe_times_unwrap_the_sfn_cycle() -> None:
    times = [10230, 10238, 10239, 0, 1, 10239, 0]  # wraps twice (the second after one cycle)
    messages = [_pdsch(((t // 10) + 5) % 1024, t % 10) for t in times]
    got = diag.subframe_times_ms(messages, start_sfn=5)
    assert got.tolist() == [10230, 10238, 10239, 10240, 10241, 20479, 20480]
    assert np.all(np.diff(got) > 0)


def test_diag_file_skips_only_a_cut_last_line(tmp_path: Path) -> None:
    path = tmp_path / "diag-ue0.jsonl"
    path.write_text(json.dumps(_pdsch(0, 0)) + "\n" + json.dumps(_pdsch(0, 1)) + "\n" + '{"type_id": "LTE_PH')
    assert len(list(diag.read_diag_file(path))) == 2
    path.write_text("not json\n")
    with pytest.raises(diag.DiagFeedError, match=r"diag-ue0\.jsonl:1"):
        list(diag.read_diag_file(path))


def test_every_key_is_one_the_binary_reads(tmp_path: Path) -> None:
    """The model mirrors the binary's keys: a config setting every section, written by the
    model, passes ``clawbed-emu --check`` (which refuses unknown keys) with the values kept."""
    from clawbed.emulator.process import BINARY
    from clawbed.emulator.scenarios import constant_mahimahi_trace, constant_trace

    trace = constant_trace(tmp_path / "t.cbt", mcs=12, other_rbs=10, seconds=1)
    uplink = constant_mahimahi_trace(tmp_path / "u.up", packets_per_ms=1)
    delay_trace = tmp_path / "delay.csv"
    delay_trace.write_text("t_ms,core_delay_ms\n0,10\n500,20\n")
    config = build(
        tmp_path, mode="cell", seed=7, duration_s=2.5, loop_trace=False, realtime_priority=0, max_packets=4096,
        mtu_bytes=1400, diag={"stats_period_ms": 10, "file": False}, background_trace=trace,
        affinity={"cell": [1], "tx": [1], "io": [0], "diag": [0], "record": [0]}, tun_offload=False,
        cpu_latency_qos=False,
        delays={"core_down_ms": 3, "core_up_ms": 4, "air_ms": 0.5, "sr_period_ms": 5, "grant_delay_ms": 2,
                "core_delay_trace": delay_trace, "ignore_trace_core_delay": True},
        core={"netns": "cbxcore", "tun": "cbxtc", "address": "10.64.0.1", "routes": ["10.99.0.0/16"]},
        cell={"n_rb": 50, "n_antennas": 2, "scheduler": "round-robin", "default_other_users": 3,
              "harq": {"rtt_ms": 8, "max_tx": 3, "bler": 0.2, "retx_bler": 0.3}, "rlc": {"retx_delay_ms": 30, "max_retx": 2},
              "rsrq": {"noise_db": 0.0, "quant_db": 0.5, "hold_ms": 40},
              "rrc": {"enabled": True, "tail_ms": 5000, "promotion_ms": 300}},
        ues=[{"netns": "cbxu0", "tun": "cbxt0", "address": "10.65.0.1", "routes": ["default"], "trace": trace,
              "trace_offset_ms": 100, "uplink_mahimahi_trace": uplink, "diag_port": 0, "uplink_queue_limit_bytes": 50_000,
              "cell": {"queue_limit_bytes": 100_000, "rsrp_dbm": -100}},
             {"netns": "cbxu1", "trace": trace, "uplink_rate": "2mbit"}])
    path = config.write(tmp_path / "emu.json")
    done = subprocess.run([str(BINARY), "--config", str(path), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert resolved["seed"] == 7 and resolved["duration_ms"] == 2500 and resolved["mtu_bytes"] == 1400
    assert resolved["core_up_ns"] == 4_000_000 and resolved["core_tun"] == "cbxtc"
    assert resolved["ues"][0]["downlink"] == {"trace": {"path": str(trace), "offset_ms": 100}}
    assert resolved["ues"][1]["uplink"] == {"rate": {"bps": 2_000_000}}
    assert resolved["realtime_priority"] is None and resolved["background_trace"] == str(trace)
    assert resolved["affinity"] == {"writer_with_cell": True, "cell": [1], "tx": [1], "io": [0], "diag": [0],
                                    "record": [0]}
    assert resolved["tun_offload"] is False and resolved["cpu_latency_qos"] is False and resolved["diag_file"] is False
    assert resolved["ues"][0]["uplink_queue_limit_bytes"] == 50_000
    assert resolved["cell"]["scheduler"] == {"kind": "round-robin"} and resolved["cell"]["harq"]["max_tx"] == 3
    assert resolved["ues"][0]["cell"]["queue"] == {"kind": "drop-tail"}


def test_the_binary_refuses_a_key_the_model_refuses(tmp_path: Path) -> None:
    """And the other way round: a typo the model refuses, the binary refuses too (the two
    agree on what is unknown)."""
    from clawbed.emulator.process import BINARY

    path = tmp_path / "emu.json"
    path.write_text(json.dumps({"output_dir": str(tmp_path), "mode": "rate", "core": {"netns": "cbxcore"},
                                "ues": [{"netns": "cbxu0", "rate": "1mbit", "rat": "1mbit"}]}))
    done = subprocess.run([str(BINARY), "--config", str(path), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "rat" in done.stderr
    with pytest.raises(ConfigError, match=r"ues\[0\]\.rat"):
        EmulatorConfig.build(**json.loads(path.read_text()))


def test_policies_are_the_binarys(tmp_path: Path) -> None:
    """The model's policy names and parameters are the binary's own list, and a policy the
    model accepts (with parameters) the binary accepts too; one it refuses, both refuse."""
    from clawbed.emulator.policies import POLICIES, SCHEDULERS
    from clawbed.emulator.process import BINARY

    listed = subprocess.run([str(BINARY), "--list-policies", "--json"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert {c["category"]: c for c in json.loads(listed.stdout)} == POLICIES
    assert "round-robin" in SCHEDULERS
    config = build(tmp_path, ues=[{"netns": "cbxu0", "rate": "1mbit", "cell": {"queue": "drop-tail"}}],
                   cell={"scheduler": {"kind": "background-first"}, "loss": {"kind": "fixed", "probability": 0.25}})
    path = config.write(tmp_path / "emu.json")
    done = subprocess.run([str(BINARY), "--config", str(path), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    cell = json.loads(done.stdout)["cell"]
    assert cell["scheduler"] == {"kind": "background-first"} and cell["loss"] == {"kind": "fixed", "probability": 0.25}
    data = config.to_json()
    data["cell"]["loss"]["probability"] = 1.5
    path.write_text(json.dumps(data))
    done = subprocess.run([str(BINARY), "--config", str(path), "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "cell.loss.probability" in done.stderr, done.stderr
    with pytest.raises(ConfigError, match=r"cell\.loss`: probability"):
        EmulatorConfig.build(**data)


def test_rrc_and_stall_are_policies_whose_kindless_tables_are_switches() -> None:
    """``cell.rrc`` / ``cell.stall``: a name or ``{kind, params}`` like any policy; a table without
    ``kind`` reads as the former switch and the fidelity suite's keys, as the binary reads it."""
    from clawbed.emulator.config import CellConfig

    assert CellConfig().rrc == {"kind": "lte"} and CellConfig().stall == {"kind": "off"}
    assert CellConfig(rrc={"enabled": False, "tail_ms": 5}).rrc == {"kind": "off"}
    assert CellConfig(rrc={"enabled": True, "promotion_ms": 300}).rrc == {
        "kind": "lte", "promotion_ms": 300, "promotion_p25_ms": 300, "promotion_p75_ms": 300}
    assert CellConfig(rrc={"profile": "3g", "dch_tail_ms": 5000, "hold_downlink": True}).rrc == {
        "kind": "umts", "dch_tail_ms": 5000}
    assert CellConfig(stall={"enabled": True, "mean_interval_s": 10.0, "min_ms": 200, "max_ms": 3000}).stall == {
        "kind": "poisson", "mean_interval_s": 10.0, "min_ms": 200, "max_ms": 3000}
    for bad in ({"profile": "5g"}, {"hold_downlink": False}, {"kind": "lte", "tail_ms": 0}, {"kind": "off", "x": 1}):
        with pytest.raises(ValueError):
            CellConfig(rrc=bad)
