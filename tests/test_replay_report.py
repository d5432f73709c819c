"""The replay's statistics, terminal table and HTML report, from a synthetic run directory."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT
from clawbed.replay.records import LoadRecord
from clawbed.replay.report import PLOTLY_JS, plt_stats, stats_table, write_report
from clawbed.replay.run import TRUTH_CSV_COLUMNS, ReplayConfig
from clawbed.replay.rundir import RESULTS_JSONL, RunDir, read_results, write_csv
from clawbed.replay.sampler import SAMPLE_COLUMNS

#: PLTs (ms) of the synthetic loads; claw's third load failed.
PLTS = {"claw": [1000.0, 1200.0, None, 1400.0], "cubic": [2000.0, 2400.0, 2200.0, 2600.0]}
T0 = 1_700_000_000.0


def _record(index: int, scheme: str, plt: float | None) -> LoadRecord:
    return LoadRecord(load=index, round=index // 2, scheme=scheme, ok=plt is not None,
                      error=None if plt is not None else "TimeoutError: load timed out", plt_ms=plt,
                      bytes_total=1000 if plt else None, page_bytes=1000, protocol="h2" if plt else None,
                      n_objects=3, t_start_unix_s=T0 + 10 * index, t_end_unix_s=T0 + 10 * index + 2,
                      flows=1, retransmits=0, load_dir=f"loads/{index:03d}-{scheme}")


def make_run(tmp_path: Path) -> tuple[Path, list[LoadRecord]]:
    """A run directory with 8 interleaved loads and their series (tcp, truth, estimates)."""
    run = RunDir(tmp_path / "run")
    run.write_manifest(status="complete", config={"page": "set-01", "trace": "busy-cell.cbt"})
    records = []
    for i in range(4):
        for j, scheme in enumerate(("claw", "cubic")):
            index = 2 * i + j
            record = _record(index, scheme, PLTS[scheme][i])
            load_dir = run.load_dir(index, scheme)
            t0 = record.t_start_unix_s
            assert t0 is not None
            tcp = [{c: None for c in SAMPLE_COLUMNS} | {
                "t_unix_s": t0 + k * 0.01, "flow": "10.65.0.1:40000", "cwnd_bytes": 14480 + 1448 * k,
                "srtt_ms": 60.0 + k, "retrans_total": 0,
                "w_claw_bytes": 777777 if scheme == "claw" else None,
                "w_cubic_bytes": 555555 if scheme == "claw" else None} for k in range(50)]
            write_csv(load_dir / "tcp.csv", SAMPLE_COLUMNS, tcp)
            truth = [[t0 + k / 1000, 50, 40, 30, 35, 10, 10, 14, 8000, 1000, 1250, 0, 0] for k in range(2000)]
            assert len(truth[0]) == len(TRUTH_CSV_COLUMNS)
            write_csv(load_dir / "truth.csv", TRUTH_CSV_COLUMNS, truth)
            if scheme == "claw":
                write_csv(load_dir / "estimates.csv", ["t_ms", "unix_s", "active", "load", "w_claw_bytes"],
                          [[k, t0 + k / 1000, 1, 0.6543, 50000] for k in range(2000)])
            run.append_result(record)
            records.append(record)
    return run.path, records


def test_statistics_per_scheme_and_reduction_vs_cubic(tmp_path: Path) -> None:
    run_dir, _ = make_run(tmp_path)
    stats = {s.scheme: s for s in plt_stats(read_results(run_dir))}
    claw, cubic = stats["claw"], stats["cubic"]
    assert (claw.loads, claw.ok, claw.failed) == (4, 3, 1) and (cubic.loads, cubic.ok) == (4, 4)
    assert claw.mean_ms == pytest.approx(1200) and claw.median_ms == pytest.approx(1200)
    assert claw.p95_ms == pytest.approx(1380) and claw.worst_ms == 1400
    assert cubic.mean_ms == pytest.approx(2300) and cubic.median_ms == pytest.approx(2300)
    assert cubic.p95_ms == pytest.approx(2570) and cubic.worst_ms == 2600
    assert claw.mean_reduction_pct == pytest.approx(100 * (2300 - 1200) / 2300)
    assert claw.median_reduction_pct == pytest.approx(100 * (2300 - 1200) / 2300)
    assert cubic.mean_reduction_pct is None


def test_scheme_without_successes_and_run_without_baseline() -> None:
    stats = plt_stats([_record(0, "bbr", None), _record(1, "reno", 900.0)])
    assert [(s.scheme, s.ok, s.mean_ms, s.mean_reduction_pct) for s in stats] == [
        ("bbr", 0, None, None), ("reno", 1, 900.0, None)]


def test_terminal_table(tmp_path: Path) -> None:
    run_dir, _ = make_run(tmp_path)
    console = Console(width=160, record=True)
    console.print(stats_table(plt_stats(read_results(run_dir))))
    text = console.export_text()
    claw_line = next(line for line in text.splitlines() if "claw" in line)
    cubic_line = next(line for line in text.splitlines() if "cubic" in line and "vs" not in line)
    assert re.search(r"3/4 .*1,200 .*1,200 .*1,380 .*1,400 .*\+47\.8 % .*\+47\.8 %", claw_line), claw_line
    assert re.search(r"4/4 .*2,300 .*2,300 .*2,570 .*2,600", cubic_line), cubic_line


def test_results_files_keep_finished_loads_and_skip_a_cut_line(tmp_path: Path) -> None:
    run_dir, records = make_run(tmp_path)
    with (run_dir / RESULTS_JSONL).open("a") as f:
        f.write('{"load": 8, "scheme": "cl')  # an interrupted append
    assert read_results(run_dir) == records
    csv_lines = (run_dir / "results.csv").read_text().splitlines()
    assert csv_lines[0].startswith("load,round,trace_ms,scheme,ok,error,plt_ms") and len(csv_lines) == 1 + len(records)


def test_a_bad_results_line_is_named(tmp_path: Path) -> None:
    run_dir, _ = make_run(tmp_path)
    with (run_dir / RESULTS_JSONL).open("a") as f:
        f.write('{"load": 8, "round": 4, "scheme": "claw", "plt_second": 3}\n')
    with pytest.raises(InputError, match=r"results.jsonl:9: unknown field\(s\) plt_second"):
        read_results(run_dir)


def test_run_dir_is_never_reused(tmp_path: Path) -> None:
    make_run(tmp_path)
    with pytest.raises(InputError, match="already exists and is not empty"):
        RunDir(tmp_path / "run")


def test_html_report_renders_every_view_with_its_data(tmp_path: Path) -> None:
    run_dir, _ = make_run(tmp_path)
    report = write_report(run_dir)
    page = report.read_text()
    js = run_dir / PLOTLY_JS
    assert js.stat().st_size > 1_000_000
    # plotly.js once, by relative path, nothing fetched from the network.
    assert page.count(f'<script src="{PLOTLY_JS}"></script>') == 1
    assert "cdn.plot.ly" not in page and "https://" not in page.replace("https://plot.ly", "")
    for heading in ("Page load time", "Server cwnd vs time, claw", "Server cwnd vs time, cubic",
                    "Cell load: ground truth vs CLAW estimate", "Throughput", "Packet RTT"):
        assert f"<h2>{heading}</h2>" in page
    figures = [json.loads(m) for m in re.findall(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*\{', page, re.S)]
    assert len(figures) == 6
    plt_fig, cwnd_claw, cwnd_cubic, load_fig, tput_fig, rtt_fig = figures
    assert {t["name"]: t["y"] for t in plt_fig} == {"claw": [1000.0, 1200.0, 1400.0],
                                                   "cubic": [2000.0, 2400.0, 2200.0, 2600.0]}
    names = {t["name"] for t in cwnd_claw}
    assert {"cwnd 10.65.0.1:40000", "W_claw 10.65.0.1:40000", "W_cubic 10.65.0.1:40000"} <= names
    assert 777.777 in next(t for t in cwnd_claw if t["name"].startswith("W_claw"))["y"]
    assert not any(t["name"].startswith("W_claw") for t in cwnd_cubic)
    # One load visible at a time; the median-PLT load is shown first.
    assert sum(1 for t in cwnd_cubic if t.get("visible") is True) == 1
    assert 0.6543 in next(t for t in load_fig if t["name"] == "CLAW estimate L")["y"]
    assert 0.8 in next(t for t in load_fig if t["name"].startswith("truth: cell load"))["y"]
    # 1250 bytes per 1 ms subframe = 10 Mbit/s.
    assert 10.0 in tput_fig[0]["y"]
    assert 60.0 in rtt_fig[0]["y"] and rtt_fig[0]["name"] == "srtt 10.65.0.1:40000"


def test_config_refuses_bad_arguments_naming_the_flag(tmp_path: Path) -> None:
    trace = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"

    def check(**changes: object) -> None:
        fields = {"trace": trace, "page": "set-01", "schemes": ["claw", "cubic"], "runs": 2, **changes}
        ReplayConfig(**fields).check()  # type: ignore[arg-type]

    check()
    for changes, message in (({"schemes": ["claw", "westwood"]}, "unknown scheme 'westwood'"),
                             ({"schemes": ["cubic", "cubic"]}, "--schemes cubic,cubic: a scheme is listed twice"),
                             ({"runs": 0}, "--runs 0: must be at least 1"),
                             ({"trace": tmp_path / "none.cbt"}, "--trace .*none.cbt: no such file"),
                             ({"loader": "curl"}, "--loader 'curl'"),
                             ({"core_rtt_ms": -1.0}, "--core-rtt-ms -1.0"),
                             ({"wireline_rate": "20mbps"}, "--wireline-rate: '20mbps'"),
                             ({"name": "../x"}, "--name '../x'")):
        with pytest.raises(InputError, match=message):
            check(**changes)


def _plotly_figures(page: str) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(data, layout) of every Plotly.newPlot call of a report page."""
    decoder = json.JSONDecoder()
    figures = []
    for match in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', page):
        data, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, page.index("{", end))
        figures.append((data, layout))
    return figures


def test_every_load_menu_names_the_load_its_chart_shows_and_titles_say_what_is_drawn(tmp_path: Path) -> None:
    """The menus of the per-load charts open on the load shown (the median-PLT one, not load 0),
    and a chart's title names only the series it has: Cubic's has no W_claw or W_cubic."""
    run_dir, _ = make_run(tmp_path)
    page = write_report(run_dir).read_text()
    figures = _plotly_figures(page)
    assert len(figures) == 6
    shown_loads = []
    for data, layout in figures[1:]:
        (menu,) = layout["updatemenus"]
        active = menu["active"]
        button = menu["buttons"][active]
        # The traces visible are the active button's, and the title names that button's load.
        assert [t.get("visible") is True for t in data] == button["args"][0]["visible"]
        assert layout["title"]["text"].endswith(button["label"])
        shown = re.match(r"load (\d+) ", button["label"])
        assert shown is not None
        shown_loads.append(int(shown.group(1)))
    # claw's median-PLT load is load 2 (1,200 ms), cubic's load 5 (2,200 ms): neither is load 0.
    assert shown_loads[:2] == [2, 5]
    cwnd_claw, cwnd_cubic = figures[1][1]["title"]["text"], figures[2][1]["title"]["text"]
    assert cwnd_claw.startswith("claw: server cwnd, W_claw, W_cubic — ")
    assert cwnd_cubic.startswith("cubic: server cwnd — ") and "W_c" not in cwnd_cubic
    assert all("W_claw" not in b["args"][1]["title.text"] for b in figures[2][1]["updatemenus"][0]["buttons"])
