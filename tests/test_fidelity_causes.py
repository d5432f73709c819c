"""Causes the page-load rows read from the kernel's own counters (orchestrator/fidelity/pageloads.py),
on synthetic loads whose counters are known."""

from __future__ import annotations

import json
from pathlib import Path

from clawbed.orchestrator.fidelity.pageloads import protocol_rto_cause
from clawbed.orchestrator.store import LoadRow


def _load(tmp_path: Path, index: int, cond: str, counters: dict[str, int] | None, ok: bool = True) -> LoadRow:
    run = tmp_path / "run"
    load_dir = run / "loads" / f"{index:03d}-cubic"
    load_dir.mkdir(parents=True)
    if counters is not None:
        (load_dir / "netstat.json").write_text(json.dumps(counters))
    return LoadRow(suite="fidelity-SPDY-1", sweep="w", scenario_id="x", label=f"synth:3g/set-02/{cond}/s1",
                   scheme="cubic", repetition=index, ok=ok, plt_ms=9000.0, bytes_total=1, protocol="h2", error=None,
                   run_dir=str(run), load_index=index, t_start_unix_s=None, t_end_unix_s=None, recorded_unix_s=0.0)


def test_h2_without_timeouts_is_named_as_the_cause(tmp_path: Path) -> None:
    loads = [_load(tmp_path, 0, "3g-h2", {"TcpExtTCPTimeouts": 0, "TcpRetransSegs": 2}),
             _load(tmp_path, 1, "3g-h1", {"TcpExtTCPTimeouts": 3, "TcpExtTCPSpuriousRTOs": 1, "TcpRetransSegs": 9}),
             _load(tmp_path, 2, "3g-h2", {"TcpExtTCPTimeouts": 0, "TcpRetransSegs": 1}),
             _load(tmp_path, 3, "wifi-h2", {"TcpExtTCPTimeouts": 5}),  # another profile: not counted
             _load(tmp_path, 4, "3g-h2", {"TcpExtTCPTimeouts": 7}, ok=False)]  # a failed load: not counted
    cause = protocol_rto_cause(loads, "3g")
    assert "H1.1: 3 timeout(s) (1 undone as spurious) and 9 retransmitted segment(s) over 1 load(s)" in cause
    assert "H2: 0 timeout(s) (0 undone as spurious) and 3 retransmitted segment(s) over 2 load(s)" in cause
    assert "H2's one connection never timed out" in cause


def test_h2_timeouts_are_counted_without_the_verdict_and_no_counters_say_nothing(tmp_path: Path) -> None:
    loads = [_load(tmp_path, 0, "3g-h2", {"TcpExtTCPTimeouts": 2, "TcpExtTCPDSACKUndo": 2})]
    cause = protocol_rto_cause(loads, "3g")
    assert "H2: 2 timeout(s) (2 undone as spurious)" in cause and "never timed out" not in cause
    assert protocol_rto_cause([_load(tmp_path / "b", 0, "3g-h2", None)], "3g") == ""


def test_the_cwnd_checks_say_how_the_page_was_spread_over_connections() -> None:
    from clawbed.orchestrator.fidelity.pageloads import _connections_cause

    cause = _connections_cause({"connections_per_load": 1.0, "bytes_per_connection": 1024 * 900.0},
                               {"connections_per_load": 6.0, "bytes_per_connection": 1024 * 150.0})
    assert cause.startswith("HTTP/1.1 carried each page over 6.0 connection(s), 150 KB each, HTTP/2 over 1.0 (900 KB")
    assert "42.6 connections" in cause
    assert _connections_cause({}, {"bytes_per_connection": float("nan")}) == ""


def test_the_estimators_bias_is_split_by_the_windows_speed() -> None:
    from clawbed.orchestrator.fidelity.bulk import estimate_bias_cause

    # Slow windows estimated exactly, fast ones 30 % low: a bias, not scatter.
    rows = [{"saturated": True, "truth_bps": t, "estimate_bps": t * (0.7 if t >= 10e6 else 1.0)}
            for t in (4e6, 5e6, 6e6, 12e6, 14e6, 16e6)]
    rows.append({"saturated": False, "truth_bps": 1e6, "estimate_bps": 9e6})  # not scored
    cause = estimate_bias_cause({"rows": rows, "mean_error": -0.15, "c_bps": 30e6})
    assert cause == ("signed mean error -15.0 % over 6 saturated windows, absolute 15.0 %: a bias (the signed error "
                     "is most of the absolute one); -30.0 % in the faster half (≥ 9.0 Mbit/s), +0.0 % in the slower "
                     "half, so the error sits in the faster windows")
    assert estimate_bias_cause({"rows": rows[:3], "mean_error": 0.0, "c_bps": 30e6}) == ""


def test_cubics_timeouts_and_drops_are_counted_for_the_claw_rows(tmp_path: Path) -> None:
    from clawbed.orchestrator.fidelity.pageloads import timeout_cause

    loads = [_load(tmp_path, 0, "h2", {"TcpExtTCPTimeouts": 0, "TcpRetransSegs": 1}),
             _load(tmp_path, 1, "h2", {"TcpExtTCPTimeouts": 2, "TcpExtTCPSpuriousRTOs": 1, "TcpRetransSegs": 5}),
             _load(tmp_path, 2, "h2", None)]  # no counters: not counted
    cause = timeout_cause(loads)
    assert cause.startswith("server TCP counters: 1 of 2 cubic loads timed out (2 timeout(s), 1 undone as spurious), "
                            "6 retransmitted segment(s); the base station dropped 0 packet(s)")
    assert timeout_cause(loads, "claw") == ""
