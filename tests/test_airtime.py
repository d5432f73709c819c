"""A load's data phase split by what held it up (replay.airtime), on synthetic ground truth whose
split is known by construction, and `clawbed analyze airtime` over a folder of runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from clawbed.errors import InputError
from clawbed.orchestrator.analyze import analyze, run_dirs_under
from clawbed.orchestrator.report import airtime_notes
from clawbed.orchestrator.spec import PaperNumber
from clawbed.orchestrator.store import LoadRow
from clawbed.replay.airtime import load_airtime
from clawbed.replay.records import LoadRecord
from clawbed.replay.run import TRUTH_CSV_COLUMNS
from clawbed.replay.rundir import RunDir, write_csv
from clawbed.replay.sampler import SAMPLE_COLUMNS

T0 = 1_700_000_000.0


def _truth(queued_ms: range) -> list[dict[str, float]]:
    """3 s of 1 ms ground-truth rows; the UE's queue holds data in ``queued_ms``."""
    return [dict.fromkeys(TRUTH_CSV_COLUMNS, 0) | {"t_unix_s": T0 + k / 1000, "n_rb": 50,
                                                    "queue_bytes": 3000 if k in queued_ms else 0}
            for k in range(3000)]


def _sample(t_s: float, **values: int | None) -> dict[str, object]:
    return dict.fromkeys(SAMPLE_COLUMNS) | {"t_unix_s": T0 + t_s, "flow": "10.65.0.1:40000"} | values


def _run(tmp_path: Path, tcp: list[dict[str, object]], columns: tuple[str, ...] = SAMPLE_COLUMNS,
         ok: bool = True) -> tuple[Path, LoadRecord]:
    run = RunDir(tmp_path / "run")
    run.write_manifest(status="complete", config={"page": "set-01", "trace": "/x/busy-cell.cbt"})
    record = LoadRecord(load=0, round=0, scheme="cubic", ok=ok, plt_ms=2100.0 if ok else None,
                        t_start_unix_s=T0 + 0.4, t_first_flow_unix_s=T0 + 0.5, t_end_unix_s=T0 + 2.5,
                        load_dir="loads/000-cubic")
    load_dir = run.load_dir(0, "cubic")
    write_csv(load_dir / "truth.csv", TRUTH_CSV_COLUMNS, _truth(range(500, 1000)))
    write_csv(load_dir / "tcp.csv", columns, [{c: row.get(c) for c in columns} for row in tcp])
    run.append_result(record)
    return run.path, record


def test_each_subframe_of_the_data_phase_in_one_class(tmp_path: Path) -> None:
    # Queue non-empty 0.5–1.0 s; then empty with data held back until 1.6 s; then nothing to send.
    tcp = [_sample(0.0, notsent_bytes=0, unacked_pkts=0, cwnd_pkts=10),
           _sample(0.9995, notsent_bytes=5000, unacked_pkts=3, cwnd_pkts=10),
           _sample(1.5995, notsent_bytes=0, unacked_pkts=10, cwnd_pkts=10)]
    run_dir, record = _run(tmp_path, tcp)
    split = load_airtime(run_dir, record)
    assert split is not None
    # Rows 500..2500 ms are in the data phase (first connection to end): 2,001 subframes.
    assert (split.queued_ms, split.window_ms, split.app_ms) == (500, 600, 901)
    assert split.plt_ms == 2100.0 and split.scheme == "cubic"


def test_runs_without_notsent_fall_back_to_in_flight_against_cwnd(tmp_path: Path) -> None:
    columns = tuple(c for c in SAMPLE_COLUMNS if c != "notsent_bytes")
    tcp = [_sample(0.0, unacked_pkts=2, cwnd_pkts=10),
           _sample(0.9995, unacked_pkts=9, cwnd_pkts=10),  # within one segment of cwnd: limited
           _sample(1.2995, unacked_pkts=4, cwnd_pkts=10)]
    run_dir, record = _run(tmp_path, tcp, columns)
    split = load_airtime(run_dir, record)
    assert split is not None and (split.queued_ms, split.window_ms, split.app_ms) == (500, 300, 1201)


def test_a_malformed_ground_truth_names_the_file_and_line(tmp_path: Path) -> None:
    run_dir, record = _run(tmp_path, [_sample(0.0, notsent_bytes=0)])
    truth = run_dir / record.load_dir / "truth.csv"
    lines = truth.read_text().splitlines()
    fields = lines[3].split(",")
    fields[TRUTH_CSV_COLUMNS.index("queue_bytes")] = "lots"
    lines[3] = ",".join(fields)
    truth.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"truth.csv:4: t_unix_s .* queue_bytes 'lots' is not a number"):
        load_airtime(run_dir, record)


def test_a_failed_load_has_no_split(tmp_path: Path) -> None:
    run_dir, record = _run(tmp_path, [_sample(0.0, notsent_bytes=0)], ok=False)
    assert load_airtime(run_dir, record) is None


def test_cli_over_a_folder_of_runs(tmp_path: Path) -> None:
    _run(tmp_path, [_sample(0.0, notsent_bytes=0), _sample(0.9995, notsent_bytes=1)])
    result = CliRunner().invoke(analyze, ["airtime", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["label"] == "busy-cell/set-01 (run)" and row["loads"] == 1
    assert (row["queued_ms"], row["window_ms"], row["app_ms"]) == (500, 1501, 0)
    with pytest.raises(InputError, match="no replay run directory"):
        run_dirs_under(tmp_path / "run" / "loads")


def _two_schemes(tmp_path: Path) -> list[LoadRow]:
    """A cubic load that holds data back 0.5–1.0 s after its queue empties, a claw load that never does."""
    cubic_dir, _ = _run(tmp_path / "cubic", [_sample(0.0, notsent_bytes=0), _sample(0.9995, notsent_bytes=9),
                                             _sample(1.4995, notsent_bytes=0)])
    claw_dir, _ = _run(tmp_path / "claw", [_sample(0.0, notsent_bytes=0)])

    def row(run_dir: Path, scheme: str) -> LoadRow:
        return LoadRow(suite="s", sweep="w", scenario_id="x", label="idle-cell/set-01/h2/s1", scheme=scheme,
                       repetition=0, ok=True, plt_ms=2100.0, bytes_total=1, protocol="h2", error=None,
                       run_dir=str(run_dir), load_index=0, t_start_unix_s=None, t_end_unix_s=None, recorded_unix_s=0.0)

    return [row(cubic_dir, "cubic"), row(claw_dir, "claw")]


def test_a_fidelity_rows_gain_cause_reads_the_split_of_each_scheme(tmp_path: Path) -> None:
    from clawbed.orchestrator.fidelity.pageloads import gain_cause

    rows = _two_schemes(tmp_path)
    cause = gain_cause(rows)
    assert "cubic held data back with the UE's base-station queue empty for 500 ms of its 2100 ms PLT (24 %" in cause
    assert "claw: held back 0 ms, queued 500 ms, nothing to send 1501 ms" in cause
    assert gain_cause(rows[1:]) == ""  # no cubic loads: nothing to say


def test_the_paper_report_sets_each_comparison_beside_its_ground_truth(tmp_path: Path) -> None:
    rows = _two_schemes(tmp_path)
    numbers = [PaperNumber(figure="F", match="idle-cell/", metric="reduction_pct", scheme="claw", versus="cubic",
                           value=50, note="n"),
               PaperNumber(figure="F", match="idle-cell/", metric="rank", scheme="claw", value=1, note="n"),
               PaperNumber(figure="F", match="busy-cell/", metric="rank", scheme="claw", value=1, note="n"),
               PaperNumber(figure="F", match="idle-cell/", metric="rank", scheme="claw", value=1, note="n",
                           not_emulated="phone hardware")]
    notes = airtime_notes(numbers, rows)
    assert notes[0] == ("cubic (2.10 s): queued at the BS 24%, held back 24%, nothing to send 48%; "
                        "claw held back 0%")
    assert notes[1] == "claw (2.10 s): queued at the BS 24%, held back 0%, nothing to send 71%"
    assert notes[2:] == ["", ""]  # no loads there; not emulated


def test_a_split_exported_with_its_load_reports_without_the_run(tmp_path: Path) -> None:
    import shutil

    from clawbed.orchestrator.analyze import with_airtime
    from clawbed.orchestrator.store import Store, iter_csv_rows, read_csv_rows

    rows = _two_schemes(tmp_path)
    numbers = [PaperNumber(figure="F", match="idle-cell/", metric="reduction_pct", scheme="claw", versus="cubic",
                           value=50, note="n")]
    expected = airtime_notes(numbers, rows)
    exported = with_airtime(rows)
    assert [(r.airtime_queued_ms, r.airtime_window_ms) for r in exported] == [(500, 500), (500, 0)]
    csv_path = tmp_path / "export.csv"
    with csv_path.open("w", newline="") as f:
        csv.writer(f).writerows(iter_csv_rows(exported))
    shutil.rmtree(tmp_path / "cubic")
    shutil.rmtree(tmp_path / "claw")
    # Another machine: no run directories, the split comes from the store.
    with Store(tmp_path / "other.sqlite") as store:
        assert store.import_rows(read_csv_rows(csv_path)) == 2
        imported = store.loads(suite="s")
    assert airtime_notes(numbers, imported) == expected


def test_cli_table_fits_80_columns_and_csv_when_piped(tmp_path: Path) -> None:
    _run(tmp_path, [_sample(0.0, notsent_bytes=0), _sample(0.9995, notsent_bytes=1)])
    table = CliRunner().invoke(analyze, ["airtime", str(tmp_path), "--format", "table"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert max(len(line) for line in table.output.splitlines()) <= 80 and "busy-cell" in table.output
    piped = CliRunner().invoke(analyze, ["airtime", str(tmp_path)])
    assert piped.output.splitlines()[0] == "run,label,scheme,loads,plt_ms,queued_ms,window_ms,app_ms"
