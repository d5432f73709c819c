"""The radio keys of a suite condition and a replay (``rrc``, ``stall``, ``idle_before_s``):
validation that names the key or flag, scenario ids unchanged for conditions without them, and
their way into the replay's config and the emulator's (pure and fast: nothing runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from clawbed.emulator.config import EmulatorConfig
from clawbed.errors import InputError
from clawbed.orchestrator import runner
from clawbed.orchestrator.spec import Condition, SpecError, load_spec, parse_spec, scenario_settings
from clawbed.paths import REPO_ROOT
from clawbed.replay import settings
from clawbed.replay.cli import replay
from clawbed.replay.run import ReplayConfig, _emulator_fields

TRACE = REPO_ROOT / "traces" / "samples" / "idle-cell.cbt"
#: The condition keys before the radio keys (and the UE keys) existed: what old ids hashed.
OLD_CONDITION_KEYS = {"http", "core_rtt_ms", "bs_buffer", "wireline_rate", "wired_delay_ms", "wired_jitter_ms",
                      "wired_loss_pct", "wired_reorder_pct", "scheduler", "cross_traffic", "other_ues"}
STALL = {"kind": "poisson", "mean_interval_s": 10, "min_ms": 200, "max_ms": 3000}


def _spec(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"suite": "radio", "loader": "h2", "matrix": {"traces": ["idle-cell"], "pages": ["set-01"],
                                                        "schemes": ["cubic"], "conditions": list(conditions)}}


def _ids(tmp_path: Path, *conditions: dict[str, Any]) -> list[str]:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(_spec(*conditions)))
    return [s.id for s in load_spec(path).scenarios()]


def test_radio_keys_are_accepted_in_the_registrys_forms() -> None:
    spec = parse_spec(_spec({"name": "u", "rrc": "umts", "stall": STALL, "idle_before_s": 60},
                            {"name": "l", "rrc": {"kind": "lte", "tail_ms": 5000}, "stall": "off"},
                            {"name": "o", "rrc": {"kind": "off"}}))
    assert spec.matrix is not None
    u, lte, off = spec.matrix.conditions
    assert (u.rrc, u.stall, u.idle_before_s) == ("umts", STALL, 60.0)
    assert lte.rrc == {"kind": "lte", "tail_ms": 5000} and lte.stall == "off"
    assert off.rrc == "off"  # a table of its kind only reads as the name: the same id
    assert Condition().rrc is None and Condition().stall is None and Condition().idle_before_s == 0


BAD = [
    ({"rrc": "5g"}, "<spec>: matrix.conditions[0].rrc: unknown rrc '5g' (one of lte, umts, off)"),
    ({"rrc": {"kind": "umts", "tail_ms": 100}}, "<spec>: matrix.conditions[0].rrc: tail_ms: unknown parameter of rrc "
                                                "'umts'"),
    ({"rrc": {"kind": "umts", "dch_tail_ms": 0}}, "<spec>: matrix.conditions[0].rrc: dch_tail_ms: must be an integer"),
    ({"rrc": 3}, "<spec>: matrix.conditions[0].rrc:"),
    ({"stall": {"kind": "poisson", "min_ms": 0}}, "<spec>: matrix.conditions[0].stall: min_ms: must be an integer in "
                                                  "1..=60000"),
    ({"stall": {"mean_interval_s": 10}}, "<spec>: matrix.conditions[0].stall: must be a policy name, or a table with "
                                         "`kind`"),
    ({"idle_before_s": -1}, "<spec>: matrix.conditions[0].idle_before_s: Input should be greater than or equal to 0"),
    ({"idle_before_s": 4000}, "<spec>: matrix.conditions[0].idle_before_s: Input should be less than or equal to 3600"),
]


@pytest.mark.parametrize("condition,expected", BAD, ids=[str(b[0]) for b in BAD])
def test_a_bad_radio_key_is_named(condition: dict[str, Any], expected: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_spec(condition))
    assert expected in str(err.value), str(err.value)


def test_ids_of_conditions_without_radio_keys_are_unchanged(tmp_path: Path) -> None:
    base = {"name": "b", "core_rtt_ms": 150}
    settings = scenario_settings("idle-cell", "set-01", Condition(**base), 1, "h2", None, 60.0)
    assert set(settings["condition"]) == OLD_CONDITION_KEYS
    # The id of this scenario as the code before the radio keys computed it.
    assert _ids(tmp_path, base) == ["f7fd548737cc"]
    # Explicit defaults are the unset keys; a set key is a new scenario.
    assert _ids(tmp_path, {**base, "idle_before_s": 0}) == _ids(tmp_path, base)
    assert _ids(tmp_path, {**base, "rrc": {"kind": "umts"}}) == _ids(tmp_path, {**base, "rrc": "umts"})
    others = [_ids(tmp_path, {**base, **extra})[0] for extra in
              ({"rrc": "umts"}, {"rrc": "lte"}, {"stall": STALL}, {"idle_before_s": 20}, {"idle_before_s": 60})]
    assert len({*others, *_ids(tmp_path, base)}) == 6


def test_the_orchestrator_hands_the_keys_to_the_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario's condition → the replay's config (the Replay itself faked: nothing runs)."""
    seen: list[ReplayConfig] = []

    class FakeReplay:
        def __init__(self, config: ReplayConfig, on_event: Any = None) -> None:
            config.check()
            seen.append(config)

        def run(self) -> list[Any]:
            return []

    monkeypatch.setattr(runner, "Replay", FakeReplay)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(_spec({"name": "u", "rrc": "umts", "stall": STALL, "idle_before_s": 20},
                                         {"name": "plain"})))
    for sc in load_spec(path).scenarios():
        job = runner.ReplayJob(scenario=sc, plan=((0, "cubic"),), run_dir=tmp_path / sc.condition_name, run_id="t1")
        runner.replay_job(job, lambda record: None)
    radio, plain = seen
    assert (radio.rrc, radio.stall, radio.idle_before_s) == ("umts", STALL, 20.0)
    assert (plain.rrc, plain.stall, plain.idle_before_s) == (None, None, 0.0)


def _emulator_cell(config: ReplayConfig, tmp_path: Path) -> dict[str, Any]:
    fields = _emulator_fields(config, None)
    built = EmulatorConfig.build(mode="rate", output_dir=tmp_path / "out", core={"netns": "cbtcore"},
                                 ues=[{"netns": "cbtue0", "rate": "10mbit"}], **fields)
    return dict(built.to_json()["cell"])


def test_the_replay_sets_the_emulators_cell_rrc_and_stall(tmp_path: Path) -> None:
    plain = ReplayConfig(trace=TRACE, page="set-01", schemes=["cubic"], runs=1)
    assert set(_emulator_fields(plain, None)["cell"]) == {"scheduler"}  # the emulator's defaults, as before
    cell = _emulator_cell(plain, tmp_path)
    assert cell["rrc"] == {"kind": "lte"} and cell["stall"] == {"kind": "off"}
    radio = ReplayConfig(trace=TRACE, page="set-01", schemes=["cubic"], runs=1, rrc="umts", stall=STALL)
    cell = _emulator_cell(radio, tmp_path)
    assert cell["rrc"] == {"kind": "umts"} and cell["stall"] == STALL
    tuned = ReplayConfig(trace=TRACE, page="set-01", schemes=["cubic"], runs=1,
                         rrc={"kind": "umts", "dch_tail_ms": 3000})
    assert _emulator_cell(tuned, tmp_path)["rrc"] == {"kind": "umts", "dch_tail_ms": 3000}


@pytest.mark.parametrize("fields,flag", [({"rrc": "5g"}, "--rrc: unknown rrc '5g'"),
                                         ({"stall": {"kind": "poisson", "max_ms": 0}}, "--stall: max_ms:"),
                                         ({"idle_before_s": -1.0}, "--idle-before-s -1.0: must be 0..3600"),
                                         ({"keep_connections": True, "loader": "h2"},
                                          "--keep-connections: only the browser loader"),
                                         ({"keep_connections": True, "schemes": ["claw", "cubic"]},
                                          "--keep-connections: give one scheme, not claw,cubic"),
                                         ({"server_sysctls": {"kernel.panic": "1"}},
                                          "--server-sysctls: kernel.panic=1: a net.ipv4.* or net.core.* key")])
def test_a_bad_replay_setting_names_its_flag(fields: dict[str, Any], flag: str) -> None:
    settings = {"trace": TRACE, "page": "set-01", "schemes": ["cubic"], "runs": 1, **fields}
    with pytest.raises(InputError) as err:
        ReplayConfig(**settings).check()
    assert flag in str(err.value)


def test_cli_flags_take_names_and_parameters_from_the_registry() -> None:
    rrc, stall = settings.parse_policy("rrc"), settings.parse_policy("stall")
    assert rrc("umts") == "umts"
    assert rrc("umts:dch_tail_ms=3000,fach_tail_ms=6000") == {"kind": "umts", "dch_tail_ms": 3000, "fach_tail_ms": 6000}
    assert stall("poisson:mean_interval_s=10,min_ms=200,max_ms=3000") == \
        {"kind": "poisson", "mean_interval_s": 10.0, "min_ms": 200, "max_ms": 3000}
    cli = CliRunner()
    for args, message in ((["--rrc", "5g"], "Invalid value for '--rrc': '5g': one of lte, umts, off"),
                          (["--rrc", "umts:tail_ms=5"], "Invalid value for '--rrc': 'tail_ms=5': give KEY=VALUE"),
                          (["--stall", "poisson:min_ms=0"], "Invalid value for '--stall': min_ms: must be an integer"),
                          (["--idle-before-s", "soon"], "Invalid value for '--idle-before-s'"),
                          (["--server-sysctl", "net.ipv4.tcp_frto"],
                           "Invalid value for '--server-sysctls' / '--server-sysctl': 'net.ipv4.tcp_frto': KEY=VALUE")):
        result = cli.invoke(replay, args)
        assert result.exit_code == 2 and message in result.output, result.output
    assert "--rrc [lte|umts|off][:KEY=VALUE,...]" in cli.invoke(replay, ["--help"]).output
