"""Experiment specs: validation errors name the file and the key path; expansion; stable ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clawbed.orchestrator.spec import SpecError, load_spec

GOOD = {
    "suite": "t",
    "loader": "h2",
    "repetitions": 2,
    "seeds": [1, 2],
    "matrix": {
        "traces": ["busy-cell", "synth:idle-cell"],
        "pages": ["set-01"],
        "schemes": ["claw", "cubic"],
        "conditions": [{"name": "base", "core_rtt_ms": 50}, {"name": "slow", "wireline_rate": "5mbit",
                                                             "bs_buffer": "1MiB", "http": 1.1}],
    },
}


def _write(tmp_path: Path, data: object, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def _with(path_keys: list, value: object) -> dict:
    """GOOD with the value at a key path replaced (a copy)."""
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    node = data
    for key in path_keys[:-1]:
        node = node[key]
    node[path_keys[-1]] = value
    return data


BAD = [
    (["matrix", "conditions", 1, "core_rtt_ms"], -5, "suite.yaml: matrix.conditions[1].core_rtt_ms:"),
    (["matrix", "schemes", 1], "vegas", "suite.yaml: matrix.schemes[1]: unknown scheme 'vegas'"),
    (["matrix", "pages", 0], "nosuch", "suite.yaml: matrix.pages[0]: unknown page 'nosuch'"),
    (["matrix", "traces", 1], "synth:moon", "suite.yaml: matrix.traces[1]: 'synth:moon': unknown preset"),
    (["matrix", "conditions", 0, "wireline_rate"], "20mbps", "suite.yaml: matrix.conditions[0].wireline_rate:"),
    (["matrix", "conditions", 0, "bs_buffer"], "lots", "suite.yaml: matrix.conditions[0].bs_buffer:"),
    (["matrix", "conditions", 0, "scheduler"], "fifo", "suite.yaml: matrix.conditions[0].scheduler:"),
    (["matrix", "conditions", 0, "http"], "3", "suite.yaml: matrix.conditions[0].http:"),
    (["repetitions"], 0, "suite.yaml: repetitions: Input should be greater than or equal to 1"),
    (["loader"], "curl", "suite.yaml: loader:"),
    (["seeds"], [1, 1], "suite.yaml: seeds: listed twice: 1"),
    (["matrix", "schemes"], [], "suite.yaml: matrix.schemes: List should have at least 1 item"),
    (["matrix", "conditions", 0, "colour"], "red", "suite.yaml: matrix.conditions[0].colour: unknown key"),
    (["matrix", "conditions", 0, "cross_traffic"], [{"kind": "bulk"}],
     "suite.yaml: matrix.conditions[0]: cross_traffic shares the wireline bottleneck"),
    (["matrix", "conditions", 1, "cross_traffic"], [{"kind": "bulk", "flows": 0}],
     "suite.yaml: matrix.conditions[1].cross_traffic[0].flows:"),
    (["matrix", "conditions", 1, "other_ues"], [{"kind": "page", "scheme": "nope"}],
     "suite.yaml: matrix.conditions[1].other_ues[0].scheme: unknown scheme 'nope'"),
    (["matrix", "conditions", 1, "name"], "base", "suite.yaml: matrix: condition names must be unique"),
    (["suite"], "has space", "suite.yaml: suite: String should match pattern"),
]


@pytest.mark.parametrize("keys,value,expected", BAD, ids=[".".join(map(str, b[0])) for b in BAD])
def test_bad_spec_names_file_and_key(tmp_path: Path, keys: list, value: object, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, _with(keys, value)))
    assert expected in str(err.value), str(err.value)


def test_missing_keys_and_bad_yaml_and_missing_trace_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"suite.yaml: matrix: Field required"):
        load_spec(_write(tmp_path, {"suite": "x"}))
    with pytest.raises(SpecError, match=r"suite.yaml:\d+:\d+: not valid YAML"):
        load_spec(_write(tmp_path, "suite: x\nmatrix: [a, b\n"))
    with pytest.raises(SpecError, match=r"suite.yaml: \(top level\): must be a mapping"):
        load_spec(_write(tmp_path, "- 1\n"))
    with pytest.raises(SpecError, match=r"suite.yaml: matrix.traces\[0\]: 'nofile.cbt' is neither"):
        load_spec(_write(tmp_path, _with(["matrix", "traces"], ["nofile.cbt"])))


def test_expansion_and_stable_ids(tmp_path: Path) -> None:
    scenarios = load_spec(_write(tmp_path, GOOD)).scenarios()
    assert len(scenarios) == 2 * 1 * 2 * 2  # traces × pages × conditions × seeds
    assert len({s.id for s in scenarios}) == len(scenarios)
    assert scenarios[0].label == "busy-cell/set-01/base/s1"
    assert scenarios[0].schemes == ("claw", "cubic") and scenarios[0].repetitions == 2
    slow = next(s for s in scenarios if s.condition_name == "slow")
    assert slow.condition.http == "1.1" and slow.condition.bs_buffer_bytes == 1 << 20
    synth = next(s for s in scenarios if s.trace == "synth:idle-cell" and s.seed == 2)
    assert synth.trace_path.name == "idle-cell-s2-120s.cbt"
    # Same settings → same ids, whatever the order of keys or the suite's schemes/repetitions.
    again = _with(["repetitions"], 7)
    again["matrix"]["schemes"] = ["bbr"]
    again["matrix"]["conditions"][0] = {"core_rtt_ms": 50, "name": "base"}
    ids2 = [s.id for s in load_spec(_write(tmp_path, again, "b.yaml")).scenarios()]
    assert ids2 == [s.id for s in scenarios]
    # A changed setting → a different id, the same label.
    changed = load_spec(_write(tmp_path, _with(["matrix", "conditions", 0, "core_rtt_ms"], 150), "c.yaml")).scenarios()
    assert changed[0].id != scenarios[0].id and changed[0].label == scenarios[0].label


def test_shipped_suites_are_valid() -> None:
    root = Path(__file__).resolve().parents[1] / "orchestrator" / "suites"
    ci = load_spec(root / "ci.yaml")
    assert len(ci.scenarios()) == 2 and ci.spec.loader == "h2" and ci.spec.repetitions == 3
    if (root / "paper.yaml").exists():
        assert load_spec(root / "paper.yaml").spec.paper
