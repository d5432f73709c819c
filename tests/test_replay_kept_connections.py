"""Kept connections (``--keep-connections``) and what a load's record says about them.

- A load the emulator fell behind in is not loaded again on the connections it warmed (a warm
  rerun would stand in for the cold load asked for): it is kept, flagged.
- ``retransmits`` is the load's own: a kept connection's kernel count runs over its whole
  life, so what earlier loads retransmitted on it is taken off.

Unit tests over the rules, and one real replay (root: Chromium, nginx, the emulator).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from clawbed.replay.lateness import LateAction, late_action
from clawbed.replay.records import load_retransmits
from clawbed.replay.run import Replay, ReplayConfig, ReplayEvent, describe_lateness

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "samples"
#: How long the emulator is stopped during the first load: 20 ms late, well past the 1 ms limit.
STALL_S = 0.020


def rows(*samples: tuple[str, int]) -> list[dict[str, object]]:
    return [{"flow": flow, "retrans_total": total} for flow, total in samples]


def test_a_kept_flow_counts_only_what_it_added() -> None:
    # The numbers: one kept connection whose life count runs 7, 9, 10, 11, 13.
    carried: dict[str, int] = {}
    own = []
    for total in (7, 9, 10, 11, 13):
        count, carried = load_retransmits(rows(("10.65.0.1:40000", total - 1), ("10.65.0.1:40000", total)), carried)
        own.append(count)
    assert own == [7, 2, 1, 1, 2]


def test_new_flows_count_whole_and_a_reused_port_is_a_new_connection() -> None:
    count, carried = load_retransmits(rows(("a:1", 3), ("b:2", 4)), {})
    assert count == 7 and carried == {"a:1": 3, "b:2": 4}
    # b:2 below its carried total: a new connection on the same address and port.
    count, carried = load_retransmits(rows(("a:1", 5), ("b:2", 1), ("c:3", 0)), carried)
    assert count == 2 + 1 + 0 and carried == {"a:1": 5, "b:2": 1, "c:3": 0}
    # No samples: nothing measured, and nothing forgotten.
    assert load_retransmits([], carried) == (None, carried)


def test_a_late_load_on_kept_connections_is_flagged_not_rerun() -> None:
    late = dict(rerun_late=True, reruns=0, max_reruns=2)
    assert late_action(False, keep_connections=True, **late) is LateAction.FLAG_KEPT_CONNECTIONS
    assert late_action(False, keep_connections=False, **late) is LateAction.RERUN
    assert late_action(True, keep_connections=True, **late) is LateAction.KEEP
    assert late_action(None, keep_connections=False, **late) is LateAction.KEEP
    assert late_action(False, keep_connections=False, rerun_late=True, reruns=2, max_reruns=2) is LateAction.FLAG
    assert late_action(False, keep_connections=False, rerun_late=False, reruns=0, max_reruns=2) is LateAction.FLAG


@pytest.mark.root
def test_kept_connections_keep_a_late_cold_load_and_count_each_loads_retransmits(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    # A base-station queue of 20 kB (13 packets) overflows in every load's slow start, so the
    # kept connection retransmits in each load; the busy cell keeps the loads short of a timeout.
    config = ReplayConfig(trace=SAMPLES / "busy-cell.cbt", page="set-03", schemes=["cubic"], runs=3,
                          loader="browser", keep_connections=True, bs_buffer=20_000, core_rtt_ms=50,
                          name="kept", output_root=tmp_path, load_timeout_s=60)
    stalls: list[float] = []
    warnings: list[str] = []
    threads: list[threading.Thread] = []
    replay: Replay

    def stall() -> None:
        time.sleep(0.15)  # the loader is starting or fetching: the load's time span
        assert replay.emulator_pid is not None
        os.kill(replay.emulator_pid, signal.SIGSTOP)
        try:
            time.sleep(STALL_S)
        finally:
            os.kill(replay.emulator_pid, signal.SIGCONT)
        stalls.append(time.time())

    def on_event(event: ReplayEvent) -> None:
        if event.kind == "loader-start" and event.load == 0 and not threads:
            threads.append(threading.Thread(target=stall))
            threads[-1].start()
        elif event.kind == "warning" and event.message:
            warnings.append(event.message)

    replay = Replay(config, on_event=on_event)
    records = replay.run()
    for t in threads:
        t.join()
    run_dir = tmp_path / "kept"
    assert len(stalls) == 1 and len(records) == 3
    first = records[0]
    # (a) The cold load the emulator fell behind in is the one kept, flagged; nothing was rerun.
    assert first.timing_ok is False, describe_lateness(first)
    assert first.late_reruns == 0 and first.load_dir == "loads/000-cubic"
    assert not (run_dir / "late-loads.jsonl").exists()
    assert any("kept flagged, not loaded again" in w and w.startswith("load 0") for w in warnings), warnings
    assert replay.late_reruns == 0
    # (b) Each load's retransmits are its own: within the server's own counters over the load.
    print("\nload  retransmits  TcpRetransSegs  life count (the old figure)  PLT ms")
    old_figures = []
    for r in records:
        assert r.measured, r.error
        netstat = json.loads((run_dir / r.load_dir / "netstat.json").read_text())
        life = {}
        with (run_dir / r.load_dir / "tcp.csv").open() as f:
            for row in csv.DictReader(f):
                life[row["flow"]] = int(row["retrans_total"])  # the flow's last sample: its life count
        old_figures.append(sum(life.values()))
        print(f"{r.load:>4}  {r.retransmits:>11}  {netstat.get('TcpRetransSegs', 0):>14}  "
              f"{old_figures[-1]:>27}  {r.plt_ms:,.0f}")
        assert r.retransmits is not None and r.retransmits <= netstat.get("TcpRetransSegs", 0), (r.load, netstat)
    # The scenario is the issue's: a later load rode a connection that had retransmitted before,
    # so its life count is above its own.
    assert records[0].retransmits and any(old > r.retransmits for old, r in zip(old_figures[1:], records[1:])), \
        (old_figures, [r.retransmits for r in records])
