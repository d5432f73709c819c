"""Runs as first-class things: replays recorded in the result store like suites' loads, the
store's replays and sweeps listed (`clawbed runs`) and shown (`clawbed runs show`), run
directories the store lacks imported; a store that cannot be written costs a warning, never a
load. The last test runs a real replay (browser loader) through the CLI."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_replay_report import make_run
from test_terminal_tables import in_terminal, one_word_lines

from clawbed.orchestrator import runs as rs
from clawbed.orchestrator.cli import results
from clawbed.orchestrator.store import LoadRow, Store
from clawbed.paths import REPO_ROOT
from clawbed.replay.rundir import MANIFEST, read_results

CONFIG = {"trace": "/somewhere/busy-cell.cbt", "page": "set-01", "schemes": ["claw", "cubic"], "runs": 4,
          "loader": "browser", "seed": 1}


def replay_dir(folder: Path, name: str, started_unix_s: float = 1_790_000_000.0, status: str = "complete") -> Path:
    """A replay's directory as a finished run leaves it (8 loads, claw's third failed)."""
    path, _ = make_run(folder / f"{name}.tmp")
    manifest = json.loads((path / MANIFEST).read_text())
    manifest.update(config=CONFIG, name=name, started_unix_s=started_unix_s, status=status, loads_done=8)
    (path / MANIFEST).write_text(json.dumps(manifest))
    return path.rename(folder / name)


def suite_sweep(store: Store, run_dir: Path) -> None:
    """A suite's sweep of two scenarios (one of 4 cubic loads, one of 2 claw loads)."""
    for sid, label, page, n, scheme in (("aa11", "busy-cell/set-01/c0/s1", "set-01", 4, "cubic"),
                                        ("bb22", "busy-cell/profile/c0/s1", "profile", 2, "claw")):
        store.ensure_scenario("paper", "main", sid, label, {"trace": "busy-cell.cbt", "page": page})
        store.set_status("paper", "main", sid, "complete", run_dir=str(run_dir / sid))
        for rep in range(n):
            store.record_load(LoadRow("paper", "main", sid, label, scheme, rep, True, 1000.0 + 100 * rep, 5000, "h2",
                                      None, str(run_dir / sid), rep, 1.0, 2.0, 3.0))


def test_a_replay_is_recorded_as_it_goes_and_queried_with_the_suites(tmp_path: Path) -> None:
    run_dir = replay_dir(tmp_path, "r1")
    warnings: list[str] = []
    recorder = rs.ReplayRecorder(tmp_path / "results.sqlite", "r1", rs.replay_settings(CONFIG, run_dir),
                                 warnings.append)
    with Store(tmp_path / "results.sqlite") as store:
        (sc,) = store.scenarios(suite=rs.REPLAY_SUITE)
        assert (sc["sweep"], sc["scenario_id"], sc["status"], sc["label"]) == ("r1", "r1", "running",
                                                                               "set-01 on busy-cell.cbt")
        suite_sweep(store, tmp_path / "suites")
    records = read_results(run_dir)
    for record in records:
        recorder.load_done(record)
    recorder.finish("complete")
    assert warnings == []
    with Store(tmp_path / "results.sqlite") as store:
        loads = store.loads(suite=rs.REPLAY_SUITE, sweep="r1")
        assert [(r.scheme, r.repetition, r.ok, r.plt_ms) for r in loads] == sorted(
            (r.scheme, r.round, r.ok, r.plt_ms) for r in records)
        assert store.scenarios(suite=rs.REPLAY_SUITE)[0]["status"] == "complete"
    # One query, replays and suites alike.
    out = CliRunner().invoke(results, ["query", "--store", str(tmp_path / "results.sqlite"), "--format", "csv"])
    assert out.exit_code == 0, out.output
    suites = [row["suite"] for row in csv.DictReader(io.StringIO(out.output))]
    assert suites.count("replay") == 8 and suites.count("paper") == 6


def test_a_store_that_cannot_be_written_is_a_warning_and_the_run_is_recorded_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = replay_dir(tmp_path, "locked")
    store_path = tmp_path / "results.sqlite"
    Store(store_path).close()
    monkeypatch.setattr(rs, "REPLAY_BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(store_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the store
    warnings: list[str] = []
    try:
        recorder = rs.ReplayRecorder(store_path, "locked", rs.replay_settings(CONFIG, run_dir), warnings.append)
        for record in read_results(run_dir):
            recorder.load_done(record)  # must not raise, nor wait a timeout per load
        recorder.finish("complete")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(warnings) == 1 and "could not be written" in warnings[0] and str(store_path) in warnings[0]
    # Listing the runs records the directory the store missed; a second listing adds nothing.
    with Store(store_path) as store:
        assert rs.import_run_dirs(store, tmp_path, warnings.append) == 1
        assert rs.import_run_dirs(store, tmp_path, warnings.append) == 0
        (row,) = rs.run_rows(store)
    assert (row["name"], row["kind"], row["status"], row["loads"], row["loads_ok"]) == ("locked", "replay", "complete",
                                                                                       8, 7)
    assert row["median_plt_ms"] == {"claw": 1200.0, "cubic": 2300.0}
    assert row["trace"] == "busy-cell.cbt" and row["page"] == "set-01" and row["schemes"] == ["claw", "cubic"]


def test_a_partly_recorded_run_is_completed_from_its_directory(tmp_path: Path) -> None:
    run_dir = replay_dir(tmp_path, "part")
    store_path = tmp_path / "results.sqlite"
    recorder = rs.ReplayRecorder(store_path, "part", rs.replay_settings(CONFIG, run_dir), lambda m: None)
    for record in read_results(run_dir)[:3]:
        recorder.load_done(record)  # killed after three loads: the store says running
    with Store(store_path) as store:
        assert rs.import_run_dirs(store, tmp_path, print) == 1
        (row,) = rs.run_rows(store)
        assert (row["status"], row["loads"]) == ("complete", 8)
    # A folder that is not a replay's, or a manifest that cannot be read, is passed over.
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / MANIFEST).write_text("{not json")
    with Store(store_path) as store:
        assert rs.import_run_dirs(store, tmp_path, print) == 0


def test_runs_list_in_an_80_column_terminal_and_piped(clawbed_cli: Path, tmp_path: Path) -> None:
    names = ["2026-11-28T21-05-44", "2026-11-28T23-40-00"]
    for i, name in enumerate(names):
        replay_dir(tmp_path, name, started_unix_s=1_790_000_000.0 + 3600 * i,
                   status="interrupted" if i else "complete")
    with Store(tmp_path / "results.sqlite") as store:
        suite_sweep(store, tmp_path / "suites")
    args = [str(clawbed_cli), "runs", "--runs-dir", str(tmp_path)]
    out, err = in_terminal(args)
    assert "recorded 2 run directories" in err
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    every = [*names, "paper/main"]
    assert not one_word_lines(lines, lambda line: line.split()[:1] in ([n] for n in every))
    for name in every:
        (line,) = [line for line in lines if line.split()[:1] == [name]]
        assert ("interrupted" if name == names[1] else "complete") in line
    first = lines.index(next(line for line in lines if line.startswith(f"  {names[0]}")))
    assert "set-01 on" in lines[first] and "7/8" in lines[first] and "claw 1,200" in lines[first]
    assert "busy-cell" in lines[first + 1] and "cubic 2,300" in lines[first + 1]
    piped = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(piped)))
    assert [r["name"] for r in rows] == every  # oldest first: the suite was recorded now
    assert json.loads(rows[0]["median_plt_ms"]) == {"claw": 1200.0, "cubic": 2300.0}
    assert rows[2]["kind"] == "suite" and rows[2]["page"] == "2 pages" and rows[2]["loads"] == "6"
    last = subprocess.run([*args, "--last", "1", "--format", "json"], capture_output=True, text=True, check=True)
    assert [json.loads(line)["name"] for line in last.stdout.splitlines()] == ["paper/main"]


def test_runs_show_prints_the_table_and_the_report(clawbed_cli: Path, tmp_path: Path) -> None:
    run_dir = replay_dir(tmp_path, "shown")
    (run_dir / "report.html").write_text("<html></html>")
    with Store(tmp_path / "results.sqlite") as store:
        suite_sweep(store, tmp_path / "suites")
    out, err = in_terminal([str(clawbed_cli), "runs", "show", "shown", "--runs-dir", str(tmp_path)])
    assert all(len(line) <= 80 for line in out.splitlines())
    claw = next(line for line in out.splitlines() if line.split()[:1] == ["claw"])
    assert "3/4" in claw and "1,200" in claw and "+47.8 %" in claw
    assert f"report: {run_dir / 'report.html'}" in err
    piped = subprocess.run([str(clawbed_cli), "runs", "show", "paper", "--runs-dir", str(tmp_path), "--format", "json"],
                           capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in piped.stdout.splitlines()]
    assert {(r["scenario"], r["scheme"], r["loads"], r["median_ms"]) for r in rows} == {
        ("busy-cell/set-01/c0/s1", "cubic", 4, 1150.0), ("busy-cell/profile/c0/s1", "claw", 2, 1050.0)}
    bad = subprocess.run([str(clawbed_cli), "runs", "show", "nope", "--runs-dir", str(tmp_path)], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "NAME 'nope': no such run" in bad.stderr and "shown" in bad.stderr


def test_trace_convert_takes_dash_o_and_the_old_form_with_a_note(clawbed_cli: Path, tmp_path: Path) -> None:
    source = REPO_ROOT / "traces" / "samples" / "idle-cell.cbt"
    new = subprocess.run([str(clawbed_cli), "trace", "convert", str(source), "-o", str(tmp_path / "a.csv")],
                         capture_output=True, text=True)
    assert new.returncode == 0 and new.stderr == "" and (tmp_path / "a.csv").read_text().startswith("#")
    old = subprocess.run([str(clawbed_cli), "trace", "convert", str(source), str(tmp_path / "b.csv")],
                         capture_output=True, text=True)
    assert old.returncode == 0 and "deprecated" in old.stderr and f"-o {tmp_path / 'b.csv'}" in old.stderr
    assert (tmp_path / "b.csv").read_bytes() == (tmp_path / "a.csv").read_bytes()
    both = subprocess.run([str(clawbed_cli), "trace", "convert", str(source), str(tmp_path / "c.csv"), "-o",
                           str(tmp_path / "d.csv")], capture_output=True, text=True)
    assert both.returncode == 2 and "OUTPUT given twice" in both.stderr and not (tmp_path / "c.csv").exists()
    none = subprocess.run([str(clawbed_cli), "trace", "convert", str(source)], capture_output=True, text=True)
    assert none.returncode == 2 and "-o/--output" in none.stderr


@pytest.mark.root
def test_a_real_replay_is_in_the_store_and_the_listing(clawbed_cli: Path, tmp_path: Path) -> None:
    """Two browser loads over the emulated cell: each progress line names the loader and the
    protocol the load used, each load is in the runs folder's store when the run ends, and
    `clawbed runs` lists the run with its median PLT."""
    proc = subprocess.run([str(clawbed_cli), "replay", "--trace", str(REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"),
                           "--page", "set-01", "--schemes", "cubic", "--runs", "2", "--loader", "browser",
                           "--runs-dir", str(tmp_path), "--name", "listed"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.lstrip().startswith("load ") and " PLT " in line]
    assert len(lines) == 2 and all(line.rstrip().endswith("browser loader over h2") for line in lines), lines
    with Store(tmp_path / "results.sqlite") as store:
        loads = store.loads(suite=rs.REPLAY_SUITE, sweep="listed")
        (scenario,) = store.scenarios(suite=rs.REPLAY_SUITE)
    assert [(r.scheme, r.repetition, r.ok, r.protocol) for r in loads] == [("cubic", 0, True, "h2"),
                                                                          ("cubic", 1, True, "h2")]
    assert scenario["status"] == "complete" and scenario["settings"]["loader"] == "browser"
    listed = subprocess.run([str(clawbed_cli), "runs", "--runs-dir", str(tmp_path), "--format", "json"],
                            capture_output=True, text=True, check=True)
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["name"] == "listed" and row["loads"] == 2 and row["status"] == "complete"
    plts = sorted(r.plt_ms for r in loads if r.plt_ms is not None)
    assert row["median_plt_ms"]["cubic"] == pytest.approx(sum(plts) / 2, abs=0.1)
    print(f"PLTs {plts} ms; median {row['median_plt_ms']['cubic']} ms", file=sys.stderr)
