"""The result store and the resumable runner, with a fake replay function as the unit seam."""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from clawbed.errors import InputError
from clawbed.orchestrator import runner as rn
from clawbed.orchestrator.cli import results
from clawbed.orchestrator.spec import load_spec
from clawbed.orchestrator.store import LoadRow, Store, read_csv_rows
from clawbed.replay.records import LoadRecord

SPEC = {"suite": "unit", "loader": "h2", "repetitions": 3,
        "matrix": {"traces": ["busy-cell", "idle-cell"], "pages": ["set-01"], "schemes": ["claw", "cubic"]}}


class Killed(BaseException):
    """Stands for SIGKILL: not an error the runner catches."""


def fake_replay(calls: list[rn.ReplayJob], kill_after: int | None = None) -> rn.ReplayFn:
    """A replay that reports each planned load with a PLT from (scheme, repetition); it
    'dies' after ``kill_after`` loads in all."""
    count = [0]

    def replay(job: rn.ReplayJob, on_load: Callable[[LoadRecord], None]) -> None:
        calls.append(job)
        for index, (rep, scheme) in enumerate(job.plan):
            if kill_after is not None and count[0] >= kill_after:
                raise Killed()
            count[0] += 1
            on_load(LoadRecord(load=index, round=rep, scheme=scheme, ok=True, plt_ms=500.0 + rep,
                               bytes_total=102400, protocol="h2", t_start_unix_s=time.time(),
                               t_end_unix_s=time.time()))
    return replay


@pytest.fixture
def spec(tmp_path: Path):
    path = tmp_path / "unit.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return load_spec(path)


def test_store_records_once_and_rolls_back(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        store.ensure_scenario("s", "main", "abc", "lbl", {"x": 1})
        row = LoadRow("s", "main", "abc", "lbl", "cubic", 0, True, 512.0, 100, "h2", None, "/r", 0, 1.0, 2.0, 3.0)
        assert store.record_load(row) is True
        assert store.record_load(row) is False  # the same (scenario, scheme, repetition): ignored
        assert store.done_loads("s", "main", "abc") == {("cubic", 0)}
        store.set_status("s", "main", "abc", "running", run_dir="/r")
        assert store.scenarios(suite="s")[0]["status"] == "running"
        with pytest.raises(ValueError):
            store.set_status("s", "main", "abc", "bogus")
        with pytest.raises(RuntimeError):  # a failed transaction leaves nothing behind
            with store._transaction():
                store._db.execute("INSERT INTO loads (suite, sweep, scenario_id, label, scheme, repetition, ok,"
                                  " recorded_unix_s) VALUES ('s','main','abc','lbl','claw',5,1,0)")
                raise RuntimeError("mid-transaction")
    assert sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT COUNT(*) FROM loads").fetchone()[0] == 1


def test_sweep_killed_mid_run_resumes_without_duplicates_or_loss(spec, tmp_path: Path) -> None:
    store_path = tmp_path / "r.sqlite"
    calls: list[rn.ReplayJob] = []
    with Store(store_path) as store, pytest.raises(Killed):
        rn.run_suite(spec, store, executor=rn.LocalExecutor(fake_replay(calls, kill_after=8)),
                     output_root=tmp_path / "runs")
    with Store(store_path) as store:
        assert len(store.loads(suite="unit")) == 8  # everything measured before the kill is kept
        # Without --resume the sweep is refused rather than mixed.
        with pytest.raises(InputError, match="--resume"):
            rn.run_suite(spec, store, executor=rn.LocalExecutor(fake_replay([])), output_root=tmp_path / "runs")
        resumed: list[rn.ReplayJob] = []
        summary = rn.run_suite(spec, store, resume=True, executor=rn.LocalExecutor(fake_replay(resumed)),
                               output_root=tmp_path / "runs")
        assert summary.recorded == 4 and summary.skipped == 8
        # Only the second scenario's missing loads ran, in a new run directory.
        assert len(resumed) == 1 and len(resumed[0].plan) == 4
        assert resumed[0].run_dir.name.endswith("-a2") and resumed[0].run_dir != calls[-1].run_dir
        loads = store.loads(suite="unit")
        keys = [(r.scenario_id, r.scheme, r.repetition) for r in loads]
        assert len(keys) == len(set(keys)) == 12
        assert all(r.status == "complete" for r in [type("R", (), s) for s in store.scenarios(suite="unit")])
        # A third run has nothing to do.
        again: list[rn.ReplayJob] = []
        assert rn.run_suite(spec, store, resume=True, executor=rn.LocalExecutor(fake_replay(again)),
                            output_root=tmp_path / "runs").recorded == 0
        assert again == []


def test_failed_scenario_is_recorded_and_the_sweep_goes_on(spec, tmp_path: Path) -> None:
    def broken(job: rn.ReplayJob, on_load: Callable[[dict], None]) -> None:
        if job.scenario.trace == "busy-cell":
            raise InputError("the emulator died")
        fake_replay([])(job, on_load)

    with Store(tmp_path / "r.sqlite") as store:
        summary = rn.run_suite(spec, store, executor=rn.LocalExecutor(broken), output_root=tmp_path / "runs")
        assert len(summary.failed_scenarios) == 1 and summary.recorded == 6
        status = {s["label"]: (s["status"], s["error"]) for s in store.scenarios(suite="unit")}
        assert status["busy-cell/set-01/c0/s1"] == ("failed", "InputError: the emulator died")


def test_only_selects_by_id_or_label(spec) -> None:
    scenarios = spec.scenarios()
    assert rn.select(scenarios, [scenarios[1].id[:6]]) == [scenarios[1]]
    assert rn.select(scenarios, ["busy-cell/set-01/c0/s1"]) == [scenarios[0]]
    with pytest.raises(InputError, match="--only nope"):
        rn.select(scenarios, ["nope"])


def test_run_ids_and_executor_errors(tmp_path: Path) -> None:
    rid = rn.new_run_id("or")
    assert len(rid) == 4 and rid.startswith("or")
    assert isinstance(rn.make_executor("ray", "127.0.0.1:6379"), rn.RayExecutor)
    with pytest.raises(InputError, match="--ray-address is for --executor ray"):
        rn.make_executor("local", "127.0.0.1:6379")
    with pytest.raises(InputError, match="--executor 'dask': one of local, ray"):
        rn.make_executor("dask")
    # A head that cannot be reached fails at once, naming the flag, before Ray is asked to join it.
    with pytest.raises(InputError, match="--ray-address 'nohost': give HOST:PORT"):
        rn.RayExecutor(address="nohost").run([], lambda j, r: None, lambda j, e: None)
    with socket.socket() as closed:  # a port nothing listens on: bound, never listening
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        with pytest.raises(InputError, match=f"--ray-address {address}: no Ray head answers there"):
            rn.RayExecutor(address=address).run([], lambda j, r: None, lambda j, e: None)
    # A local cluster's session folder must keep Ray's socket paths short; checked before Ray starts.
    long_dir = tmp_path / ("x" * rn.RAY_TEMP_DIR_MAX_CHARS)
    expected = "point CLAWBED_STATE at a shorter path" if os.geteuid() == 0 else "run as root"
    with pytest.raises(InputError, match=expected):
        rn.RayExecutor(temp_dir=long_dir).run([], lambda j, r: None, lambda j, e: None)


def test_results_query_formats(spec, tmp_path: Path) -> None:
    store_path = tmp_path / "r.sqlite"
    with Store(store_path) as store:
        rn.run_suite(spec, store, executor=rn.LocalExecutor(fake_replay([])), output_root=tmp_path / "runs")
    cli = CliRunner()
    out = cli.invoke(results, ["query", str(spec.path), "--store", str(store_path), "--format", "csv"])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert lines[0].startswith("suite,sweep,scenario_id,label,scheme,repetition") and len(lines) == 13
    out = cli.invoke(results, ["query", "--scenario", "idle-cell", "--store", str(store_path), "--format", "json"])
    assert out.exit_code == 0 and len(out.output.strip().splitlines()) == 6
    out = cli.invoke(results, ["query", "unit", "--store", str(store_path), "--format", "table"])
    assert out.exit_code == 0 and "12 load(s)" in out.output
    # Not a terminal: CSV unless a format is asked for.
    out = cli.invoke(results, ["query", "unit", "--store", str(store_path)])
    assert out.exit_code == 0 and out.output.startswith("suite,sweep,scenario_id,") and len(out.output.splitlines()) == 13


def test_a_sweep_exported_and_imported_elsewhere_resumes_there(spec, tmp_path: Path) -> None:
    """Part of a sweep measured on one machine, the rest on another: the second runs only
    what the first did not record, and the export/import round trip keeps every field."""
    here, there = tmp_path / "here.sqlite", tmp_path / "there.sqlite"
    with Store(here) as store:
        with pytest.raises(Killed):
            rn.run_suite(spec, store, executor=rn.LocalExecutor(fake_replay([], kill_after=5)),
                         output_root=tmp_path / "runs")
        first = store.loads(suite="unit")
    assert len(first) == 5
    cli = CliRunner()
    out = cli.invoke(results, ["query", "unit", "--store", str(here), "--format", "csv"])
    assert out.exit_code == 0, out.output
    export = tmp_path / "part.csv"
    export.write_text(out.output)
    out = cli.invoke(results, ["import", str(export), "--store", str(there)])
    assert out.exit_code == 0, out.output
    assert "5 added" in out.output
    out = cli.invoke(results, ["import", str(export), "--store", str(there)])
    assert "0 added" in out.output and "5 recorded already" in out.output
    with Store(there) as store:
        assert store.loads(suite="unit") == first
        calls: list[rn.ReplayJob] = []
        rn.run_suite(spec, store, resume=True, executor=rn.LocalExecutor(fake_replay(calls)),
                     output_root=tmp_path / "runs2")
        assert sum(len(j.plan) for j in calls) == 12 - 5
        assert len(store.loads(suite="unit")) == 12


@pytest.mark.parametrize(("edit", "message"), [
    (lambda lines: [lines[0].replace("plt_ms", "plt_s"), *lines[1:]], r"part\.csv:1: unknown column\(s\) plt_s"),
    (lambda lines: [lines[0], lines[1].replace(",True,", ",maybe,", 1), *lines[2:]],
     r"part\.csv:2: column ok: 'maybe' is not True or False"),
    (lambda lines: [*lines[:2], lines[2].rsplit(",", 3)[0]], r"part\.csv:3: \d+ field\(s\), the header has \d+"),
    (lambda lines: [lines[0].replace("suite,", "", 1), *(line.split(",", 1)[1] for line in lines[1:])],
     r"part\.csv:1: missing column\(s\) suite"),
])
def test_a_bad_export_is_refused_naming_the_line_and_column(spec, tmp_path: Path, edit, message) -> None:
    store_path = tmp_path / "r.sqlite"
    with Store(store_path) as store:
        rn.run_suite(spec, store, executor=rn.LocalExecutor(fake_replay([])), output_root=tmp_path / "runs")
    out = CliRunner().invoke(results, ["query", "unit", "--store", str(store_path), "--format", "csv"])
    bad = tmp_path / "part.csv"
    bad.write_text("\n".join(edit(out.output.strip().splitlines())) + "\n")
    with Store(tmp_path / "other.sqlite") as other, pytest.raises(InputError, match=message):
        other.import_rows(read_csv_rows(bad))


def test_the_paper_report_as_markdown(tmp_path: Path) -> None:
    from clawbed.orchestrator.cli import suite
    from clawbed.tables import markdown_table

    assert markdown_table(["a", "b"], [("x|y", "1\n2")]) == "| a | b |\n|---|---|\n| x\\|y | 1 2 |\n"
    path = tmp_path / "unit.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "paper": [
        {"figure": "Fig X", "match": "idle-cell/set-01/", "metric": "reduction_pct", "scheme": "claw",
         "versus": "cubic", "value": 50, "note": "a|b"}]}))
    spec = load_spec(path)
    store_path = tmp_path / "r.sqlite"
    with Store(store_path) as store:
        rn.run_suite(spec, store, executor=rn.LocalExecutor(fake_replay([])), output_root=tmp_path / "runs")
    out = CliRunner().invoke(suite, ["report", str(path), "--store", str(store_path), "--format", "markdown"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "| figure | scenarios | metric | paper | testbed | n | note |" and lines[1] == "|---" * 7 + "|"
    # fake_replay gives every scheme the same PLTs: no reduction; the note's | is escaped.
    assert lines[2].startswith("| Fig X | `idle-cell/set-01/` |") and "a\\|b" in lines[2] and len(lines) == 3
