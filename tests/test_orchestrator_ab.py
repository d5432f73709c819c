"""A/B regression runs on one machine (orchestrator/ab.py) and the emulator's determinism check
(orchestrator/determinism.py): the pure parts, then the real thing — a base revision built in a
worktree of its own, both sides replaying interleaved on the real cell, a 10 ms slowdown caught,
a cell-model change caught by the ground truth."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clawbed.emulator.truth import Truth
from clawbed.errors import InputError
from clawbed.orchestrator import ab, determinism
from clawbed.orchestrator import regress as rg
from clawbed.orchestrator.spec import load_spec
from clawbed.orchestrator.store import LoadRow, Store
from clawbed.paths import REPO_ROOT

CLAWBED = Path(sys.executable).parent / "clawbed"
#: The smallest A/B a paired check can judge: one scenario, one scheme, the h2 loader, a 100 KiB
#: page. Idle cell: its loads vary least, so a 10 ms slowdown (×1.08-1.10) stands out in 24 pairs.
SPEC = """\
suite: ab-{name}
description: A/B test
loader: h2
repetitions: {reps}
seeds: [1]
load_timeout_s: 30
matrix:
  traces: [idle-cell]
  pages: [set-01]
  schemes: [cubic]
  conditions:
    - name: base
      http: "2"
      core_rtt_ms: 50
"""


def _spec(tmp_path: Path, name: str, reps: int = 6) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, reps=reps))
    return path


# -- pure parts ---------------------------------------------------------------------------------


def test_python_shim_maps_the_trees_package_dirs(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for folder in ("clawbed", "replay", "orchestrator/fidelity"):
        (tree / folder).mkdir(parents=True)
        (tree / folder / "__init__.py").write_text("")
    (tree / "clawbed" / "paths.py").write_text("")
    (tree / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"clawbed" = "clawbed"\n'
                                         '"clawbed.replay" = "replay"\n"clawbed.orchestrator" = "orchestrator"\n')
    ab._python_shim(tree, tmp_path / "py")
    pkg = tmp_path / "py" / "clawbed"
    assert (pkg / "replay").resolve() == tree / "replay"
    assert (pkg / "orchestrator" / "fidelity" / "__init__.py").resolve() == tree / "orchestrator" / "fidelity" / "__init__.py"
    assert (pkg / "paths.py").resolve() == tree / "clawbed" / "paths.py"
    # Built again (a cached tree rebuilt), the same.
    ab._python_shim(tree, tmp_path / "py")
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py", "orchestrator", "paths.py", "replay"]
    (tree / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"clawbed.a.b" = "x"\n')
    with pytest.raises(ab.BuildError, match="package-dir 'clawbed.a.b'"):
        ab._python_shim(tree, tmp_path / "py")
    (tree / "pyproject.toml").write_text("[project]\n")
    with pytest.raises(ab.BuildError, match="pyproject.toml: no \\[tool.setuptools.package-dir\\]"):
        ab._python_shim(tree, tmp_path / "py")


def test_a_sides_children_import_its_own_tree(tmp_path: Path) -> None:
    """The agents and clients a side starts (python -m clawbed.…, in the side's folder and
    environment) import every clawbed package from the side's tree; from the tree's root they
    would not: its bare clawbed/ comes first on their path and the venv's editable finder fills
    in this checkout's parts."""
    tree = tmp_path / "tree"
    parts = ("claw", "emulator", "replay", "orchestrator", "traces", "dashboards")
    for folder in ("clawbed", *parts):
        (tree / folder).mkdir(parents=True)
        (tree / folder / "__init__.py").write_text("")
    (tree / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"clawbed" = "clawbed"\n'
                                         + "".join(f'"clawbed.{p}" = "{p}"\n' for p in parts))
    ab._python_shim(tree, tmp_path / "rev" / "py")
    built = ab.BuiltTree("c" * 40, tree, tmp_path / "rev" / "py")
    assert built.cwd == tmp_path / "rev"
    seen = ab.child_packages(built)
    assert set(seen) == {"clawbed", *(f"clawbed.{p}" for p in parts)}
    assert all(folder.is_relative_to(tree) for folder in seen.values()), seen
    from_root = ab.child_packages(dataclasses.replace(built, python_path=None))  # cwd = the tree's root
    assert not from_root["clawbed.claw"].is_relative_to(tree)


def test_revisions_resolve_or_are_refused_by_flag() -> None:
    head = ab.git("rev-parse", "HEAD")
    assert ab.resolve_commit("HEAD") == head and ab.resolve_commit("HEAD~0") == head
    with pytest.raises(InputError, match="--candidate no-such-rev: not a commit"):
        ab.resolve_commit("no-such-rev", flag="--candidate")


def test_side_env_keeps_each_side_on_its_own_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWBED_EMU", "/elsewhere/clawbed-emu")
    monkeypatch.setenv("CLAWBED_BPF_DIR", "/elsewhere/bpf")
    monkeypatch.setenv("CLAWBED_STATE", "/elsewhere/state")
    base = ab.side_env(ab.BuiltTree("a" * 40, tmp_path / "tree", tmp_path / "py"))
    assert base["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "py")
    assert not {"CLAWBED_EMU", "CLAWBED_BPF_DIR", "CLAWBED_STATE"} & set(base)
    here = ab.side_env(ab.BuiltTree("b" * 40, REPO_ROOT, None))
    assert "CLAWBED_EMU" not in here and here["CLAWBED_STATE"] == "/elsewhere/state"


def test_fingerprint_differences_name_what_changed() -> None:
    here = ab.machine_fingerprint()
    assert here["cpus"] == os.cpu_count() and here["kernel"] and "preemption" in here
    assert ab.fingerprint_differences(here, here) == []
    other = {**here, "cpus": 64, "cpu_model": "Some Other CPU"}
    assert ab.fingerprint_differences(other, here) == [f"cpu_model: 'Some Other CPU' → {here['cpu_model']!r}",
                                                       f"cpus: 64 → {here['cpus']!r}"]


def _truth(columns: dict[str, np.ndarray]) -> Truth:
    rows = len(next(iter(columns.values())))
    return Truth(Path("t.cbcol"), {}, {"t_ms": np.arange(rows, dtype=np.uint64), **columns}, 1, rows, 0)


def test_exact_comparison_skips_wall_clock_and_names_the_first_difference() -> None:
    rng = np.random.default_rng(3)
    cols = {"rsrq_db": rng.normal(-10, 1, 500), "ues[0].rrc": np.array(["idle"] * 500, dtype=object),
            "ues[0].mcs": np.where(rng.random(500) < 0.1, np.nan, rng.integers(0, 28, 500))}
    a = _truth({**cols, "wake_lateness_us": rng.random(500)})
    b = _truth({**cols, "wake_lateness_us": rng.random(500)})
    same = determinism.compare_exact(a, b, "idle")
    assert same.ok and "3 column(s) equal over 500 subframes" in same.detail  # NaN equals NaN; lateness skipped
    changed = cols["rsrq_db"].copy()
    changed[321:] += 0.01
    d = determinism.compare_exact(a, _truth({**cols, "rsrq_db": changed}), "idle")
    assert not d.ok and (d.column, d.t_ms) == ("rsrq_db", 321)
    d = determinism.compare_exact(a, _truth({"rsrq_db": cols["rsrq_db"]}), "idle")
    assert not d.ok and "missing from the candidate" in d.detail


def test_schedule_comparison_tolerates_a_percent_not_ten() -> None:
    n = 3000
    base = {"n_rb": np.full(n, 50), "other_demand_rbs": np.zeros(n), "other_users": np.zeros(n),
            "ues[0].mcs": np.full(n, 15.0), "ues[0].layers": np.full(n, 2), "ues[0].queue_bytes": np.full(n, 50_000),
            "ues[0].delivered_bytes": np.full(n, 1000.0), "ues[0].tbs_bits": np.full(n, 8000.0)}
    a = _truth(base)
    assert determinism.compare_schedule(a, _truth({**base, "ues[0].delivered_bytes": np.full(n, 1010.0)}), "flow").ok
    d = determinism.compare_schedule(a, _truth({**base, "ues[0].tbs_bits": np.full(n, 8800.0)}), "flow")
    assert not d.ok and d.schedule_diff == pytest.approx(0.1) and "10.00% apart" in d.detail
    d = determinism.compare_schedule(a, _truth({**base, "ues[0].queue_bytes": np.zeros(n)}), "flow")
    assert not d.ok and "did not fill the queue" in d.detail
    d = determinism.compare_schedule(a, _truth({**base, "ues[0].mcs": np.full(n, 16.0)}), "flow")
    assert not d.ok and d.column == "ues[0].mcs"


def test_baseline_from_another_machine_warns_or_is_refused(tmp_path: Path) -> None:
    spec_path = _spec(tmp_path, "fp")
    sc = load_spec(spec_path).scenarios()[0]
    store_path = tmp_path / "store.sqlite"
    with Store(store_path) as store:
        store.ensure_scenario("ab-fp", "main", sc.id, sc.label, sc.settings())
        for rep in range(6):
            store.record_load(LoadRow("ab-fp", "main", sc.id, sc.label, "cubic", rep, True, 600.0 + rep, 1, "h2", None,
                                      None, rep, None, None, 0.0, trace_ms=rep * 1000, timing_ok=True))
    baseline = tmp_path / "baseline.json"
    args = [str(CLAWBED), "regress", str(spec_path), "--baseline", str(baseline), "--from-store", "--store",
            str(store_path)]
    done = subprocess.run([*args, "--update-baseline"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert rg.baseline_machine(baseline) == ab.machine_fingerprint()
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    doc = json.loads(baseline.read_text())
    doc["machine"]["cpus"] = 96
    baseline.write_text(json.dumps(doc))
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0 and "measured on another machine (cpus: 96 →" in done.stderr, done.stderr
    done = subprocess.run([*args, "--strict-machine"], capture_output=True, text=True)
    assert done.returncode != 0 and "refused (--strict-machine)" in done.stderr, done.stderr
    done = subprocess.run([*args, "--against", "HEAD"], capture_output=True, text=True)
    assert done.returncode == 2 and "two modes" in done.stderr


def test_junit_carries_the_determinism_checks() -> None:
    checks = [("emulator.determinism", "determinism idle", True, "30 column(s) equal"),
              ("emulator.determinism", "determinism flow", False, "ues[0].mcs differs first at t = 5 ms")]
    root = ET.fromstring(rg.junit_xml("ci", [], 1.05, checks))
    assert (root.get("tests"), root.get("failures")) == ("2", "1")
    (failure,) = root.iter("failure")
    assert failure.get("message") == "ues[0].mcs differs first at t = 5 ms"


# -- the real thing -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def head() -> Iterator[str]:
    """HEAD's commit, resolved once (other commits may land while the tests run); its build
    under <state>/ab is removed afterwards unless it was there before (660 MB a tree)."""
    commit = ab.git("rev-parse", "HEAD")
    cached = (ab.ab_root() / commit[:12] / "built.json").is_file()
    yield commit
    if not cached:
        ab.remove_tree(commit)


def _regress(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLAWBED), "regress", *args], capture_output=True, text=True, cwd=cwd, timeout=1800)


@pytest.mark.root
@pytest.mark.slow
def test_ab_unchanged_passes_and_a_10ms_slowdown_fails(tmp_path: Path, head: str) -> None:
    """``--against HEAD --candidate HEAD``: the same code on both sides passes; the candidate's
    loads 10 ms slower in the core (``--inject-delay-ms 10``) fail. 24 rounds each, as the CI suite."""
    spec = _spec(tmp_path, "same", reps=24)
    common = ["--against", head, "--candidate", head, "--no-determinism", "--runs-dir", str(tmp_path / "runs"),
              "--store", str(tmp_path / "store.sqlite")]
    same = _regress(str(spec), *common, "--sweep", "same", "--junit", str(tmp_path / "same.xml"), cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "all 1 check(s) passed" in same.stderr
    result = json.loads((tmp_path / "runs" / "ab-same" / "same" / "ab.json").read_text())
    assert result["base"]["commit"] == result["candidate"]["commit"] == head
    (c,) = result["comparisons"]
    print(f"unchanged: ×{c['ratio']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}], {result['wall_s']} s")
    assert c["method"] == "paired" and c["verdict"] == "ok" and c["n_current"] >= 20, c
    # Both sides met the same trace stretches, round by round, and their code came from the tree.
    with Store(tmp_path / "store.sqlite") as store:
        trace = {side: sorted((r.repetition, r.trace_ms) for r in store.loads(sweep=ab.side_sweep("same", side)))
                 for side in ab.SIDES}
    assert trace["base"] == trace["candidate"] and len({t for _, t in trace["base"]}) == 24
    log = (tmp_path / "runs" / "ab-same" / "same" / "base.log")
    assert log.is_file()

    slow = _regress(str(spec), *common, "--sweep", "slow", "--inject-delay-ms", "10", cwd=tmp_path)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    result = json.loads((tmp_path / "runs" / "ab-same" / "slow" / "ab.json").read_text())
    (c,) = result["comparisons"]
    print(f"+10 ms: ×{c['ratio']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}], {result['wall_s']} s")
    assert c["verdict"] == "regression" and c["ratio"] > 1.05 and result["candidate"]["inject_delay_ms"] == 10, c


def _model_change_commit(tmp_path: Path, head: str) -> str:
    """A commit on ``head`` whose cell model reports RSRQ 0.5 dB higher (a changed constant of the
    cell's Eq. 6), made in a temporary worktree that is removed again; its id."""
    tree = tmp_path / "changed"
    ab.git("worktree", "add", "--detach", str(tree), head)
    try:
        source = tree / "emulator" / "cell" / "src" / "rsrq.rs"
        text = source.read_text()
        line = "lte::rsrq::rsrq_db_from_load(f64::from(total_alloc_rbs) / f64::from(n_rb), n_antennas)"
        assert line in text, f"{source}: the test's model change no longer applies (update the test)"
        source.write_text(text.replace(line, line + ".map(|db| db + 0.5)"))
        ab.git("-c", "user.name=clawbed test", "-c", "user.email=test@clawbed.invalid", "commit", "-q", "-a", "-m",
               "test: RSRQ 0.5 dB higher", repo=tree)
        return ab.git("rev-parse", "HEAD", repo=tree)
    finally:
        ab.git("worktree", "remove", "--force", str(tree))


@pytest.mark.root
@pytest.mark.slow
def test_determinism_same_build_passes_a_cell_model_change_fails(tmp_path: Path, head: str) -> None:
    common = ["--determinism-only", "--against", head, "--runs-dir", str(tmp_path / "runs")]
    same = _regress(*common, "--candidate", head, "--sweep", "same", "--junit", str(tmp_path / "same.xml"), cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "all 2 check(s) passed" in same.stderr
    junit = ET.parse(tmp_path / "same.xml").getroot()
    assert junit.get("tests") == "2" and junit.get("failures") == "0"
    result = json.loads((tmp_path / "runs" / "determinism" / "same" / "ab.json").read_text())["determinism"]
    print("same build:", [d["detail"] for d in result["differences"]], result["wall_s"], "s")
    assert result["ok"] and [d["scenario"] for d in result["differences"]] == ["idle", "flow"]
    assert result["differences"][1]["schedule_diff"] <= determinism.SCHEDULE_TOLERANCE

    changed = _model_change_commit(tmp_path, head)
    try:
        diff = _regress(*common, "--candidate", changed, "--sweep", "changed", "--junit", str(tmp_path / "changed.xml"),
                        cwd=tmp_path)
        assert diff.returncode == 1, diff.stdout + diff.stderr
        (failure,) = ET.parse(tmp_path / "changed.xml").getroot().iter("failure")
        assert failure.get("message", "").startswith("rsrq_db differs first at t = ")
        result = json.loads((tmp_path / "runs" / "determinism" / "changed" / "ab.json").read_text())["determinism"]
        idle = result["differences"][0]
        print("changed:", idle["detail"])
        assert not idle["ok"] and idle["column"] == "rsrq_db", idle
        assert "determinism idle (rsrq_db differs first at t = " in diff.stderr
    finally:
        ab.remove_tree(changed)

