"""The suite bench (orchestrator/bench.py), its pure parts: the subframe lateness over the
loads' spans of a ground-truth file, the CPU of a process tree from /proc and of each role
between two readings, the first-attempt shares and PLTs, the tables at 80 columns; and its
argument errors (a bad part, a suite or scenario that is not there, a budget beyond the suite)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from clawbed.emulator.truth import CHUNK_MAGIC, FILE_MAGIC, FORMAT_VERSION, TruthFormatError
from clawbed.errors import InputError
from clawbed.orchestrator import bench
from clawbed.replay.records import LoadRecord

WIDTH = 80
ORIGIN_S = 1_700_000_000.0


def write_truth(path: Path, columns: dict[str, np.ndarray], origin_unix_s: float = ORIGIN_S,
                chunk_rows: int = 400) -> None:
    """A ground-truth file in the emulator's container (emulator/TRUTH_FORMAT.md), raw blocks."""
    header = json.dumps({"kind": "truth", "format_version": FORMAT_VERSION,
                         "origin_unix_ns": int(origin_unix_s * 1e9)}).encode()
    out = bytearray(struct.pack("<8sHHI", FILE_MAGIC, FORMAT_VERSION, 0, len(header)) + header)
    rows = len(next(iter(columns.values())))
    for index, start in enumerate(range(0, rows, chunk_rows)):
        blocks, described = [], []
        for name, values in columns.items():
            raw = values[start:start + chunk_rows].tobytes()
            dtype = {np.dtype("<f8"): "f64", np.dtype("<u4"): "u32"}[values.dtype]
            described.append({"name": name, "dtype": dtype, "encoding": "raw", "stored_bytes": len(raw),
                              "crc32": zlib.crc32(raw)})
            blocks.append(raw)
        meta = json.dumps({"chunk_index": index, "rows": len(values[start:start + chunk_rows]),
                           "columns": described}).encode()
        out += struct.pack("<4sII", CHUNK_MAGIC, len(meta), zlib.crc32(meta)) + meta + b"".join(blocks)
    path.write_bytes(bytes(out))


def test_lateness_counts_the_loads_subframes_as_a_load_timing_does(tmp_path: Path) -> None:
    t = np.arange(1000, dtype=np.float64)
    late_us = np.zeros(1000)
    queue = np.zeros(1000, dtype=np.uint32)
    queue[100:600] = 1500  # UE 1 holds data: the cell is busy
    late_us[100:600] = 50.0
    late_us[300] = 1_500.0  # a busy slip inside the first load
    late_us[500] = 5_000.0  # a busy slip between the loads: not counted
    late_us[700] = 12_000.0  # an idle subframe: counts only beyond the 10 ms batch, 2 ms
    truth = tmp_path / "truth.cbcol"
    write_truth(truth, {"t_ms": t, "wake_lateness_us": late_us, "ues[0].queue_bytes": np.zeros(1000, np.uint32),
                        "ues[0].demand_rbs": np.zeros(1000, np.uint32), "ues[1].queue_bytes": queue,
                        "ues[1].demand_rbs": np.zeros(1000, np.uint32)})
    # Subframes 100-399 and 650-800 (half a ms of margin: Unix seconds are inexact at the µs).
    spans = [(ORIGIN_S + 0.0995, ORIGIN_S + 0.3995), (ORIGIN_S + 0.6495, ORIGIN_S + 0.8005)]
    got = bench.truth_lateness(truth, 2, spans)
    # 300 + 151 subframes: 299 at 0.05 ms, one at 1.5, 150 at 0, one idle at 2.0 (12 − 10).
    assert got == {"subframes": 451, "p50": 0.05, "p99": 0.05, "max": 2.0, "busy_share_pct": 66.5}
    assert bench.truth_lateness(truth, 2, [])["subframes"] == 0
    write_truth(truth, {"t_ms": t})  # no wake_lateness_us column: the error names the file
    with pytest.raises(TruthFormatError, match="truth.cbcol: .*no wake_lateness_us"):
        bench.truth_lateness(truth, 2, spans)


def test_a_process_trees_cpu_counts_the_launcher_and_its_child(tmp_path: Path) -> None:
    """A real launcher whose child burns 0.5 s of CPU, as a CLAW client's launcher and its
    compiled child: the tree's ticks hold the child's, the launcher's alone do not."""
    done = tmp_path / "burnt"
    child = ("import time, pathlib\n"
             "while time.process_time() < 0.5: pass\n"
             f"pathlib.Path({str(done)!r}).write_text('x')\n"
             "time.sleep(30)\n")
    launcher = subprocess.Popen([sys.executable, "-c",
                                 f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"])
    try:
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done.exists()
        processes = bench.read_processes()
        tree = bench.tree_ticks(launcher.pid, processes)
        alone = processes[launcher.pid][1]
        tck = bench._CLK_TCK
        assert tree >= 0.45 * tck and alone < 0.45 * tck, (tree, alone)
        assert bench.tree_ticks(999_999_999, processes) == 0  # gone: nothing
    finally:
        launcher.kill()
        launcher.wait()


def test_roles_come_from_the_ledger_and_cpu_between_two_readings() -> None:
    entries = [{"kind": "netns", "name": "cbab12ue0"},
               {"kind": "process", "name": "clawbed-emu", "pid": 10, "start_ticks": 5},
               {"kind": "process", "name": "claw-client-ue0", "pid": 11},  # the replay's UE: per load
               {"kind": "process", "name": "claw-client-ue1", "pid": 12, "start_ticks": 7},
               {"kind": "process", "name": "claw-client-ue2", "pid": 13},
               {"kind": "process", "name": "ue1-page-sender", "pid": 14}]
    assert bench.ledger_roles(entries) == {"emulator": (10, 5), "ue1": (12, 7), "ue2": (13, None)}
    stat = "12 (claw client) S 9 12 12 0 -1 4194560 1 0 0 0 30 7 0 0 20 0 3 0 7 1000 100"
    assert bench.parse_stat(stat) == (9, 37, 7)
    a = bench.CpuSample(100.0, {"emulator": 1_000, "ue1": 50, "ue2": 10}, (5_000, 10_000, 10))
    b = bench.CpuSample(110.0, {"emulator": 1_130, "ue1": 59, "ue2": 21, "ue3": 4}, (6_000, 12_000, 12))
    got = bench.cpu_between(a, b, clk_tck=100)
    assert got["emulator_pct"] == 13.0 and got["clients"] == 2  # ue3 appeared meanwhile: not counted
    assert got["per_client_pct"] == {"ue1": 0.9, "ue2": 1.1} and got["clients_total_pct"] == 2.0
    assert got["client_pct"] == {"mean": 1.0, "min": 0.9, "max": 1.1}
    assert got["machine_busy_pct"] == 50.0 and got["steal_pct"] == 0.1 and got["span_s"] == 10.0
    samples = [bench.CpuSample(float(t), {}) for t in (1, 2, 3, 4)]
    assert bench.bound_samples(samples, 2.5, 3.5) == (samples[1], samples[2])
    assert bench.bound_samples(samples, 0.5, 9.0) == (samples[0], samples[3])
    assert bench.bound_samples(samples[:1], 0.5, 9.0) is None


def rec(load: int, scheme: str, plt_ms: float | None, late_ms: float | None, stall_ms: float = 0.0,
        error: str | None = None) -> LoadRecord:
    return LoadRecord(load=load, round=load // 2, scheme=scheme, ok=error is None, plt_ms=plt_ms,
                      subframe_late_max_ms=late_ms, delivery_err_max_ms=0.1 if late_ms is not None else None,
                      subframe_stall_ms=stall_ms, t_start_unix_s=ORIGIN_S + load, t_end_unix_s=ORIGIN_S + load + 0.5,
                      error=error)


RECORDS = [rec(0, "claw", 2_100.0, 0.3), rec(1, "cubic", 2_250.0, 1.4), rec(2, "claw", 2_300.0, 0.2),
           rec(3, "cubic", 2_050.0, 4.6, stall_ms=5.0), rec(4, "claw", None, None, error="load timed out")]


def test_first_attempt_shares_and_plts() -> None:
    measured, share = bench.clean_share(RECORDS)
    # 4 measured: strict allows up to 1 ms (2 clean), evidence 4 ms at once (3 clean).
    assert measured == 4 and share == {"strict": 50.0, "evidence": 75.0}
    plt = bench.plt_by_scheme(RECORDS, ("claw", "cubic"))
    assert plt["claw"] == {"loads": 3, "ok": 2, "mean": 2_200.0, "median": 2_200.0, "min": 2_100.0, "max": 2_300.0}
    assert plt["cubic"]["mean"] == 2_150.0
    assert bench.load_spans(RECORDS)[0] == (ORIGIN_S, ORIGIN_S + 0.5) and len(bench.load_spans(RECORDS)) == 5


def rendered(draw: object, *args: object) -> list[str]:
    console = Console(width=WIDTH, record=True, color_system=None)
    with console.capture() as capture:
        draw(*args, console, "2026-11-29 02:00 UTC")  # type: ignore[operator]
    return capture.get().splitlines()


def assert_fits(lines: list[str]) -> None:
    assert all(len(line) <= WIDTH for line in lines), max(lines, key=len)
    assert not any("…" in line for line in lines), "\n".join(lines)


def test_the_cell_table_fits_80_columns_and_says_the_verdict() -> None:
    result = {"ues": 45, "scenario": "synth:idle-cell/set-06/all-claw/s1", "suite": "paper.yaml", "loads": 5,
              "cpu": {"emulator_pct": 14.2, "clients": 44, "clients_total_pct": 41.3,
                      "client_pct": {"mean": 0.94, "min": 0.71, "max": 1.32}, "machine_busy_pct": 71.0,
                      "steal_pct": 0.4},
              "lateness_ms": {"subframes": 40_512, "p50": 0.012, "p99": 0.061, "max": 2.417, "busy_share_pct": 88.1},
              "first_attempts": 4, "clean_share_pct": {"strict": 50.0, "evidence": 75.0},
              "plt_ms": bench.plt_by_scheme(RECORDS, ("claw", "cubic")), "wall_s": 118.4, "target_p99_ms": 1.0,
              "errors": ["load 4 (claw): load timed out"], "notes": []}
    lines = rendered(bench.render_cell, result)
    assert_fits(lines)
    text = "\n".join(lines)
    for figure in ("14.2", "41.3", "0.94 (0.71–1.32)", "0.012 / 0.061 / 2.417", "40,512 (88.1)",
                   "strict 50.0 %", "evidence 75.0 %", "2,200 / 2,200 (2,100–2,300)",
                   "lateness p99 0.061 ms: below the 1 ms target", "load 4 (claw): load timed out"):
        assert figure in text, figure
    result["lateness_ms"] = {"subframes": 10, "p50": 0.5, "p99": 1.2, "max": 9.0}
    assert "NOT below the 1 ms target" in "\n".join(rendered(bench.render_cell, result))


def test_the_pages_table_gives_each_page_and_all_of_them() -> None:
    spec = bench.load_suite("paper-quick", "--pages")
    scenarios = bench.suite_pages(spec, ["set-01", "profile"])
    assert [s.page for s in scenarios] == ["set-01", "profile"] and scenarios[0].label.startswith("synth:idle-cell/")
    rows = [bench.page_row(scenarios[0], RECORDS[:2]), bench.page_row(scenarios[1], RECORDS[2:], error="x")]
    assert rows[0]["clean_share_pct"] == {"strict": 50.0, "evidence": 100.0} and rows[1]["measured"] == 2
    # Each attempt's figures, to read what failed a rule.
    assert rows[1]["first_attempts"][1]["subframe_late_max_ms"] == 4.6
    assert rows[1]["first_attempts"][1]["timing_ok"] == {"strict": False, "evidence": False}
    overall = bench.overall_row(rows)
    assert overall == {"loads": 5, "measured": 4, "clean_share_pct": {"strict": 50.0, "evidence": 75.0}}
    result = {"suite": "paper-quick.yaml", "loader": "h2", "rounds_per_page": 1, "pages": rows, "overall": overall}
    lines = rendered(bench.render_pages, result)
    assert_fits(lines)
    assert any(line.split()[:4] == ["all", "pages", "4", "50.0"] for line in lines), "\n".join(lines)
    assert any(line.split()[:2] == ["profile:", "x"] for line in lines)


def test_the_scenario_is_the_suites_own() -> None:
    spec = bench.load_suite("paper", "--cell-suite")
    sc = bench.find_scenario(spec, bench.CELL_SCENARIO, "--cell-scenario")
    assert sc.label == "synth:idle-cell/set-06/all-claw/s1" and len(sc.condition.other_ues) == 44
    assert {o.scheme for o in sc.condition.other_ues} == {"claw"} and sc.loader == "browser"
    assert bench.find_scenario(spec, sc.id[:8], "--cell-scenario") == sc
    assert bench.with_loader(sc, "h2").loader == "h2" and bench.with_loader(sc, "h2").id == sc.id
    with pytest.raises(InputError, match="--cell-scenario 'h2': .* scenarios of paper.yaml match .*give a label"):
        bench.find_scenario(spec, "h2", "--cell-scenario")


@pytest.mark.parametrize(("args", "message"), [
    (["--only", "cell,bogus"], "Invalid value for '--only': bogus: the parts are cell, pages"),
    (["--only", ""], "no part: the parts are cell, pages"),
    (["--cell-scenario", "all-clow"], "--cell-scenario 'all-clow': no scenario of paper.yaml has that condition "
                                      "name, label or id (its conditions: h2,"),
    (["--cell-suite", "papr"], "--cell-suite papr: no such suite"),
    (["--cell-runs", "21"], "--cell-runs 21: synth:idle-cell/set-06/all-claw/s1 runs 20 round(s) in its suite"),
    (["--only", "pages", "--pages-only", "set-01,set-99"], "--pages-only set-99: not a page of paper-quick.yaml"),
    (["--only", "pages", "--pages-runs", "3"], "--pages-runs 3: synth:idle-cell/image-2mb/h2/s1 runs 2 round(s)"),
])
def test_argument_errors_name_the_flag_and_run_nothing(args: list[str], message: str) -> None:
    result = CliRunner().invoke(bench.main, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output
