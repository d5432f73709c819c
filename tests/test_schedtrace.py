"""Scheduler-trace attribution (replay/schedtrace.py): the trace text parsed, made-up events
attributed slip by slip (who ran instead of the cell thread, interrupt and softirq time, its own
work, a late wake-up, a stop), the shares; and, as root, a real replay with --trace-sched whose
SIGSTOP stall is attributed to the stop and which leaves no tracefs instance behind."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from clawbed.replay import schedtrace as st
from clawbed.replay.lateness import Slip
from clawbed.replay.run import Replay, ReplayConfig, ReplayEvent

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "samples"
CELL = 50
ORIGIN_S = 100.0

TRACE_TEXT = """\
# tracer: nop
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
          pytest-19540   [000] d..2.  1360.084443: sched_switch: prev_comm=pytest prev_pid=19540 prev_prio=120 \
prev_state=R ==> next_comm=cb-cell next_pid=19591 next_prio=89
 lto 4jef46eup64-19855   [001] dNh3.  1360.085510: sched_wakeup: comm=cb-cell pid=19591 prio=89 target_cpu=001
         cb-diag-19737   [001] ..s1.  1360.084470: softirq_entry: vec=3 [action=NET_RX]
         cb-diag-19737   [001] d.h1.  1360.084471: irq_handler_entry: irq=11 name=virtio0
         cb-diag-19737   [001] d.h1.  1360.084472: irq_handler_exit: irq=11 ret=handled
          <idle>-0       [001] d.h1.  1360.084473: local_timer_entry: vector=236
         cb-diag-19737   [001] ..s1.  1360.084476: softirq_exit: vec=3 [action=NET_RX]
         cb-cell-19591   [001] .....  1360.084480: sys_enter: NR 202 (7f, 81, 1, 0, 0, 0)
         cb-cell-19591   [001] .....  1360.084490: sys_exit: NR 202 = 1
         cb-cell-19591   [001] d....  1360.084495: page_fault_user: address=0x7f ip=0x55 error_code=0x6
CPU:1 [LOST 12 EVENTS]
"""


def test_the_trace_text_is_read() -> None:
    events = list(st.parse_trace(TRACE_TEXT.splitlines()))
    assert [e.kind for e in events] == ["switch", "wakeup", "softirq_entry", "irq_entry", "irq_exit", "irq_entry",
                                        "softirq_exit", "sys_enter", "sys_exit", "fault"]
    assert events[7].label == "futex"
    switch, wakeup = events[0], events[1]
    assert (switch.ts, switch.cpu, switch.prev_comm, switch.prev_state, switch.next_comm, switch.next_pid) == \
        (1360.084443, 0, "pytest", "R", "cb-cell", 19591)
    assert (wakeup.cpu, wakeup.next_pid) == (1, 19591)  # the CPU it is woken onto
    assert events[2].label == "NET_RX" and events[3].label == "irq 11 virtio0" and events[5].label == "local_timer"


def test_a_known_event_that_does_not_read_names_its_line() -> None:
    bad = TRACE_TEXT.splitlines()[:2] + ["   x-1   [000] d..2.  1.000001: sched_switch: prev_comm=x garbled"]
    with pytest.raises(st.SchedTraceError, match=r"trace:3: a sched_switch whose fields do not read"):
        list(st.parse_trace(bad))


def switch(ts: float, cpu: int, prev: tuple[str, int], state: str, nxt: tuple[str, int]) -> st.Event:
    return st.Event(ts, cpu, "switch", prev_comm=prev[0], prev_pid=prev[1], prev_state=state, next_comm=nxt[0],
                    next_pid=nxt[1])


def at(ms: float) -> float:
    """Monotonic s of emulated ``ms``."""
    return ORIGIN_S + ms / 1000.0


CELL_T = ("cb-cell", CELL)
CHROME = ("chromium", 70)
NGINX = ("nginx", 80)
IDLE = ("swapper/1", 0)


def made_up_events() -> list[st.Event]:
    """Four slips' worth of a 2-CPU trace, the cell thread on CPU 1.

    * 1000 ms: asleep at the boundary; its timer fires 0.2 ms late, then chromium keeps the CPU
      (in the kernel) until 1002 ms, with a 0.3 ms NET_RX softirq inside: 2.0 ms late.
    * 1011 ms: still running the last subframe's work until 1012.5 ms, 0.6 ms of it in a futex
      call with a 0.1 ms local timer interrupt inside, then a page fault: 1.5 ms late.
    * 1021 ms: stopped (SIGSTOP) from 1020 ms to 1026 ms: 5 ms late.
    * 1030 ms: woken on time, nginx then a kworker hold CPU 1 for 0.6 and 0.4 ms.
    """
    return [
        switch(at(990), 0, IDLE, "R", NGINX),
        switch(at(999.5), 1, CELL_T, "S", CHROME),
        st.Event(at(1000.2), 1, "wakeup", next_comm="cb-cell", next_pid=CELL),
        st.Event(at(1001.0), 1, "softirq_entry", label="NET_RX"),
        st.Event(at(1001.3), 1, "softirq_exit", label="NET_RX"),
        switch(at(1002.0), 1, CHROME, "R+", CELL_T),
        switch(at(1002.1), 1, CELL_T, "S", CHROME),
        st.Event(at(1010.0), 1, "wakeup", next_comm="cb-cell", next_pid=CELL),
        switch(at(1010.0), 1, CHROME, "R+", CELL_T),
        st.Event(at(1011.2), 1, "sys_enter", label="futex"),
        st.Event(at(1011.5), 1, "irq_entry", label="local_timer"),
        st.Event(at(1011.6), 1, "irq_exit", label="local_timer"),
        st.Event(at(1011.8), 1, "sys_exit", label="futex"),
        st.Event(at(1012.0), 1, "fault", label="page_fault_user"),
        switch(at(1012.5), 1, CELL_T, "S", CHROME),
        st.Event(at(1019.9), 1, "wakeup", next_comm="cb-cell", next_pid=CELL),
        switch(at(1019.9), 1, CHROME, "R+", CELL_T),
        switch(at(1020.0), 1, CELL_T, "T", CHROME),
        st.Event(at(1026.0), 1, "wakeup", next_comm="cb-cell", next_pid=CELL),
        switch(at(1026.0), 1, CHROME, "R+", CELL_T),
        switch(at(1026.5), 1, CELL_T, "S", NGINX),
        st.Event(at(1030.0), 1, "wakeup", next_comm="cb-cell", next_pid=CELL),
        switch(at(1030.6), 1, NGINX, "R+", ("kworker/1:2", 90)),
        switch(at(1031.0), 1, ("kworker/1:2", 90), "I", CELL_T),
        switch(at(1040.0), 0, NGINX, "S", IDLE),
    ]


SLIPS = [Slip(1000.0, 2.0, 3, True), Slip(1011.0, 1.5, 2, True), Slip(1021.0, 5.0, 6, True),
         Slip(1030.0, 1.0, 2, True), Slip(5000.0, 3.0, 4, True)]


def causes(result: st.SlipCauses) -> dict[str, float]:
    return {k: round(v, 3) for k, v in st.by_cause(result.pieces).items()}


def test_each_slip_goes_to_who_held_the_cpu() -> None:
    timeline = st.Timeline(made_up_events(), CELL)
    woken_late, own, stopped, held, untraced = st.attribute(timeline, SLIPS, ORIGIN_S)
    assert woken_late.state == "asleep" and woken_late.cpu == 1
    assert causes(woken_late) == {"wake-up late": 0.2, "chromium": 1.5, "softirq:NET_RX": 0.3}
    assert woken_late.switch_in_error_ms == 0.0  # the trace's switch-in is where the truth put the run
    assert {p.comm for p in woken_late.pieces if p.cause == "chromium"} == {"chromium"}
    assert {p.pid for p in woken_late.pieces if p.cause == "chromium"} == {70}
    assert own.state == "running" and own.page_faults == 1
    assert causes(own) == {"cb-cell own work": 0.9, "cb-cell own work: futex": 0.5, "irq:local_timer": 0.1}
    assert stopped.state == "stopped" and causes(stopped) == {"stopped (SIGSTOP)": 5.0}
    assert causes(held) == {"nginx": 0.6, "kworker": 0.4} and held.main_cause() == "nginx"
    assert causes(untraced) == {"not traced": 3.0}  # after the trace's last event


def test_shares_sum_the_late_time_by_cause() -> None:
    attributed = st.attribute(st.Timeline(made_up_events(), CELL), SLIPS, ORIGIN_S)
    rows = st.shares(attributed)
    assert [r["cause"] for r in rows][:2] == ["stopped (SIGSTOP)", "not traced"]
    assert sum(r["ms"] for r in rows) == pytest.approx(12.5)
    assert sum(r["share_pct"] for r in rows) == pytest.approx(100.0, abs=0.2)
    nginx = next(r for r in rows if r["cause"] == "nginx")
    assert nginx["slips_led"] == 1 and nginx["tasks"] == [{"task": "nginx:80", "ms": 0.6}]
    lines = st.render_lines(rows, "title")
    assert all(len(line) <= 78 for line in lines) and "stopped (SIGSTOP)" in lines[2]
    assert st.one_line(rows, 2).startswith("stopped (SIGSTOP) 40 %, not traced 24 %")


def test_own_work_while_a_producer_sat_preempted_is_the_wait_for_it() -> None:
    """The cell thread ran 10 ms past its boundary without a system call while cb-io (a thread
    whose pushes its pops wait for) sat preempted on the other CPU for nearly all of it."""
    io = ("cb-io", 60)
    events = [*made_up_events()[:-1],
              switch(at(1049.0), 1, CHROME, "R+", CELL_T),
              switch(at(1049.2), 0, NGINX, "S", io),
              switch(at(1049.5), 0, io, "R+", CHROME),
              switch(at(1059.8), 0, CHROME, "R+", io),
              switch(at(1060.0), 1, CELL_T, "S", CHROME),
              switch(at(1070.0), 0, io, "S", IDLE)]
    slip = Slip(1050.0, 10.0, 10, True)
    with_peers = st.attribute(st.Timeline(events, CELL, peers={60: "cb-io"}), [slip], ORIGIN_S)[0]
    assert causes(with_peers) == {"cb-cell waiting on a preempted cb-io": 10.0}
    assert {(p.comm, p.pid) for p in with_peers.pieces} == {("cb-io", 60)}
    # Without knowing the emulator's threads it is the thread's own work.
    alone = st.attribute(st.Timeline(events, CELL), [slip], ORIGIN_S)[0]
    assert causes(alone) == {"cb-cell own work": 10.0}


def test_tasks_are_grouped_by_comm() -> None:
    assert st.group_of("cb-cell") == "cb-cell" and st.group_of("cb-tx") == "cb-tx"
    assert st.group_of("ThreadPoolForeg") == "chromium" and st.group_of("Chrome_ChildIOT") == "chromium"
    assert st.group_of("clawbed-claw-cl") == "CLAW client" and st.group_of("ksoftirqd/1") == "ksoftirqd"
    assert st.group_of("kworker/u4:2") == "kworker" and st.group_of("python") == "python (replay, loader, agents)"
    assert st.group_of("something") == "other:something"


@pytest.mark.root
def test_a_replay_with_trace_sched_attributes_its_stall_and_leaves_no_instance(tmp_path: Path) -> None:
    mounted_before = st.tracefs_mounted()
    config = ReplayConfig(trace=SAMPLES / "idle-cell.cbt", page="set-01", schemes=["cubic"], runs=1, loader="h2",
                          core_rtt_ms=50, name="sched", output_root=tmp_path, load_timeout_s=30, trace_sched=True,
                          rerun_late=False)
    notes: list[str] = []
    replay: Replay

    def on_event(event: ReplayEvent) -> None:
        if event.kind == "note" and event.message:
            notes.append(event.message)
        if event.kind == "loader-start":
            threading.Thread(target=stall, daemon=True).start()

    def stall() -> None:
        time.sleep(0.1)  # the page is loading
        assert replay.emulator_pid is not None
        os.kill(replay.emulator_pid, signal.SIGSTOP)
        try:
            time.sleep(0.02)
        finally:
            os.kill(replay.emulator_pid, signal.SIGCONT)

    replay = Replay(config, on_event=on_event)
    instance = Path("/sys/kernel/tracing/instances") / f"cb{replay.run_id}"
    records = replay.run()
    assert not instance.exists(), "the run's trace instance outlived it"
    assert st.tracefs_mounted() == mounted_before, "tracefs was left mounted (or unmounted) by the run"
    assert records[0].measured and records[0].timing_ok is False, records[0]
    load = json.loads((replay.run_dir.path / records[0].load_dir / "sched.json").read_text())
    assert load["events"] > 0 and load["slips"] >= 1, load
    worst = max(load["slip_causes"], key=lambda s: s["late_ms"])
    assert worst["late_ms"] >= 5, worst  # 20 ms stopped, less an idle batch of up to 10 ms
    by = {p["cause"]: 0.0 for p in worst["pieces"]}
    for p in worst["pieces"]:
        by[p["cause"]] += p["ms"]
    # The stop holds most of it (the rest: the wake-up after SIGCONT, what ran before the thread).
    assert by.get("stopped (SIGSTOP)", 0.0) >= 0.5 * worst["late_ms"], worst
    assert worst["switch_in_error_ms"] is not None and abs(worst["switch_in_error_ms"]) < 1.0, worst
    run = json.loads((replay.run_dir.path / "sched-causes.json").read_text())
    assert run["causes"][0]["cause"] == "stopped (SIGSTOP)", run["causes"]
    assert any(n.startswith("load 0 sched:") for n in notes) and any("who held the cell clock" in n for n in notes)
    ledger = [json.loads(line) for line in replay.run_dir.ledger_path.read_text().splitlines()]
    assert {"kind": "trace-instance", "name": instance.name, "path": str(instance)} in ledger
    print(f"attributed: {load['slips']} slip(s), worst {worst['late_ms']} ms: "
          + ", ".join(f"{k} {v:.2f} ms" for k, v in by.items()) + f"; events {load['events']}")


def test_cleanup_removes_a_killed_runs_trace_instance(tmp_path: Path) -> None:
    from clawbed.netns import Ledger, cleanup_from_ledger
    instance = tmp_path / "instances" / "cbabcd"
    instance.mkdir(parents=True)
    ledger = Ledger(tmp_path / "ledger.jsonl")
    # Not a tracefs there: the mount entry is left alone; the instance directory goes.
    ledger.record("tracefs", str(tmp_path), path=str(tmp_path))
    ledger.record("trace-instance", instance.name, path=str(instance))
    assert cleanup_from_ledger(ledger.path) == [f"trace instance {instance}"]
    assert not instance.exists() and tmp_path.exists()
    assert cleanup_from_ledger(ledger.path) == []  # a second time: nothing left


@pytest.mark.root
def test_an_interrupted_run_removes_its_instance_and_only_the_mount_it_made(tmp_path: Path) -> None:
    from clawbed.netns import Resources
    mounted_before = st.tracefs_mounted()
    instance: Path | None = None
    with pytest.raises(KeyboardInterrupt):
        with Resources("zz9k", tmp_path / "ledger.jsonl") as res:
            trace = st.SchedTrace(res, os.getpid(), buffer_kb=1024).open()
            instance = trace.path
            trace.start()
            assert (instance / "tracing_on").read_text().strip() == "1"
            raise KeyboardInterrupt  # Ctrl-C while recording
    assert instance is not None and not instance.exists()
    assert st.tracefs_mounted() == mounted_before
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert kinds == (["trace-instance"] if mounted_before else ["tracefs", "trace-instance"])
