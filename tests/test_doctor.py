"""``clawbed doctor``: the judging over made-up readings, and one run of the real command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clawbed.doctor import (
    Facts,
    WakeupProbe,
    busy_processes,
    judge,
    parse_cpu_list,
    preempt_from_cmdline,
    preempt_from_config,
    preempt_from_debugfs,
    preempt_from_uname,
    process_ticks,
    render,
    run_warning,
    steal_pct_between,
)

CLAWBED = Path(sys.executable).parent / "clawbed"


def good_machine(**changes: object) -> Facts:
    """A machine that holds real time: 8 CPUs, a fully preemptible kernel, SCHED_FIFO allowed,
    performance governor, no steal, nothing else busy."""
    facts = Facts(cpus_online=8, cpus_allowed=list(range(8)), preempt_model="full", preempt_source="test",
                  fifo_allowed=True, rlimit_rtprio=(0, 0), is_root=True, rt_runtime_us=950000,
                  rt_period_us=1000000, governors={i: "performance" for i in range(8)}, sample_s=1.0,
                  steal_pct=0.0, top_processes=[(10, "sshd", 0.5)], others_cpu_pct=0.5, loadavg_1m=0.1)
    for key, value in changes.items():
        setattr(facts, key, value)
    return facts


def statuses(facts: Facts) -> dict[str, str]:
    return {c.name: c.status for c in judge(facts).checks}


def test_a_good_machine_is_ok() -> None:
    report = judge(good_machine())
    assert report.verdict == "ok" and report.reasons == []
    assert all(c.advice == "" for c in report.checks)


@pytest.mark.parametrize("changes, check, status", [
    ({"cpus_allowed": [0]}, "CPUs", "bad"),
    ({"cpus_allowed": [0, 1]}, "CPUs", "warn"),
    ({"preempt_model": "none"}, "preemption", "warn"),
    ({"preempt_model": "voluntary"}, "preemption", "warn"),
    ({"preempt_model": "rt"}, "preemption", "ok"),
    ({"preempt_model": None}, "preemption", "warn"),
    ({"fifo_allowed": False, "fifo_error": "EPERM (Operation not permitted)", "is_root": False}, "SCHED_FIFO", "bad"),
    ({"rt_runtime_us": 0}, "SCHED_FIFO", "bad"),
    ({"governors": {0: "powersave", 1: "performance"}}, "frequency scaling", "warn"),
    ({"governors": {}}, "frequency scaling", "ok"),
    ({"wakeups": 1000, "wakeup_late_p99_ms": 0.05, "wakeup_late_max_ms": 0.3}, "timer wake-ups", "ok"),
    ({"wakeups": 1000, "wakeup_late_p99_ms": 0.05, "wakeup_late_max_ms": 1.3}, "timer wake-ups", "warn"),
    ({"wakeups": 1000, "wakeup_late_p99_ms": 1.1, "wakeup_late_max_ms": 4.0}, "timer wake-ups", "bad"),
    ({"steal_pct": 2.5}, "steal", "warn"),
    ({"steal_pct": 12.0}, "steal", "bad"),
    ({"top_processes": [(99, "rustc", 95.0)], "others_cpu_pct": 95.0}, "other processes", "warn"),
    ({"top_processes": [(99, "rustc", 99.0), (98, "rustc", 98.0)], "others_cpu_pct": 400.0}, "other processes",
     "bad"),
])
def test_each_check_judges_its_reading(changes: dict, check: str, status: str) -> None:
    facts = good_machine(**changes)
    assert statuses(facts)[check] == status
    report = judge(facts)
    assert report.verdict == status  # everything else is ok: the verdict is this check's
    if status != "ok":
        assert any(r.startswith(check) for r in report.reasons)
        assert next(c for c in report.checks if c.name == check).advice


def test_a_run_says_what_was_sampled_now_or_everything_when_bad() -> None:
    # A 2-vCPU machine on a non-preemptive kernel: lasting traits, left to `clawbed doctor`.
    assert run_warning(judge(good_machine(cpus_allowed=[0, 1], preempt_model="none"))) is None
    busy = run_warning(judge(good_machine(cpus_allowed=[0, 1], top_processes=[(99, "rustc", 95.0)],
                                          others_cpu_pct=95.0)))
    assert busy is not None and busy.startswith("clawbed doctor: warn: other processes:") and "rustc (99)" in busy
    assert "CPUs" not in busy
    bad = run_warning(judge(good_machine(cpus_allowed=[0], steal_pct=2.5)))
    assert bad is not None and "CPUs: 1 allowed" in bad and "steal: 2.5 %" in bad
    assert run_warning(judge(good_machine())) is None


def test_the_wake_up_probe_sleeps_to_1_ms_deadlines_and_counts_a_late_one_once() -> None:
    started = time.monotonic()
    with WakeupProbe() as probe:
        time.sleep(0.2)
    elapsed_ms = (time.monotonic() - started) * 1000
    wakeups, p99, worst = probe.summary()
    # At most one wake-up a ms: a late one skips the deadlines it passed.
    assert 20 <= wakeups <= elapsed_ms + 1 and p99 is not None and worst is not None and 0 <= p99 <= worst
    assert all(v >= 0 for v in probe.late_ms)
    assert probe.policy in ("SCHED_FIFO 1", "normal")
    assert WakeupProbe().summary() == (0, None, None)
    # No probe without a sample: no check.
    assert "timer wake-ups" not in statuses(good_machine(wakeups=0))


def test_preemption_advice_depends_on_a_dynamic_kernel() -> None:
    dynamic = judge(good_machine(preempt_model="none", preempt_dynamic=True))
    fixed = judge(good_machine(preempt_model="none", preempt_dynamic=False))
    assert "preempt=full" in next(c.advice for c in dynamic.checks if c.name == "preemption")
    assert "built with PREEMPT" in next(c.advice for c in fixed.checks if c.name == "preemption")


def test_without_a_sample_the_load_average_stands_in() -> None:
    unsampled = good_machine(steal_pct=None, top_processes=[], others_cpu_pct=None, sample_s=0.0)
    for load, status in ((0.5, "ok"), (5.0, "warn"), (9.0, "bad")):
        unsampled.loadavg_1m = load
        checks = statuses(unsampled)
        assert "steal" not in checks and "other processes" not in checks
        assert checks["load"] == status, load


def test_preemption_model_readings() -> None:
    assert preempt_from_debugfs("none (voluntary) full lazy\n") == "voluntary"
    assert preempt_from_debugfs("none voluntary full\n") is None
    assert preempt_from_cmdline("console=ttyS0 preempt=full quiet") == "full"
    assert preempt_from_cmdline("console=ttyS0 quiet -- preempt=full") is None  # init's argument
    assert preempt_from_cmdline("preempt=bogus") is None
    config = "CONFIG_PREEMPT_NONE=y\n# CONFIG_PREEMPT is not set\nCONFIG_PREEMPT_DYNAMIC=y\nCONFIG_PREEMPTION=y\n"
    assert preempt_from_config(config) == ("none", True)
    assert preempt_from_config("CONFIG_PREEMPT_RT=y\nCONFIG_PREEMPT_NONE=y\n") == ("rt", False)
    assert preempt_from_config("CONFIG_PREEMPT=y\n") == ("full", False)
    assert preempt_from_uname("#1 SMP PREEMPT_DYNAMIC @0") == (None, True)
    assert preempt_from_uname("#1 SMP PREEMPT_RT Thu Jan 1") == ("rt", False)
    assert preempt_from_uname("#1 SMP PREEMPT Thu Jan 1") == ("full", False)
    assert preempt_from_uname("#1 SMP Debian 6.1.0") == ("none", False)


def test_cpu_list_steal_and_process_readings() -> None:
    assert parse_cpu_list("0-3,6\n") == [0, 1, 2, 3, 6]
    before = "cpu  100 0 50 1000 0 0 0 10 0 0\ncpu0 1 2 3\n"
    after = "cpu  200 0 100 1800 0 0 0 60 0 0\ncpu0 1 2 3\n"  # 1,000 ticks more, 50 of them stolen
    assert steal_pct_between(before, after) == 5.0
    assert steal_pct_between(before, before) is None
    assert steal_pct_between("intr 1 2 3\n", after) is None
    stat = "4242 (Web Content) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 1 0 777 0 0"
    assert process_ticks(stat) == ("Web Content", 200)
    assert process_ticks("garbage") is None


def test_busy_processes_leave_out_this_one_and_new_ones() -> None:
    before = {1: ("init", 10), 2: ("rustc", 0), 3: ("doctor", 0), 4: ("old", 5)}
    after = {1: ("init", 10), 2: ("rustc", 90), 3: ("doctor", 100), 4: ("reused", 50), 5: ("new", 70)}
    top, total = busy_processes(before, after, seconds=1.0, clk_tck=100, exclude={3})
    # pid 4 changed its name (a reused PID), pid 5 is new: neither has a reading over the sample.
    assert top == [(2, "rustc", 90.0)] and total == 90.0


def test_the_text_fits_80_columns() -> None:
    facts = good_machine(cpus_allowed=[0, 1], preempt_model="none", preempt_dynamic=True, steal_pct=7.0,
                         top_processes=[(12345, "a-process-with-a-long-name", 99.9)] * 3, others_cpu_pct=300.0)
    text = render(judge(facts))
    assert text.startswith("clawbed doctor: bad")
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_real_command() -> None:
    run = subprocess.run([CLAWBED, "doctor", "--format", "json", "--sample-s", "0.5"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode in (0, 1), run.stderr
    report = json.loads(run.stdout)
    assert report["verdict"] in ("ok", "warn", "bad")
    assert (run.returncode == 1) == (report["verdict"] == "bad")
    names = {c["name"] for c in report["checks"]}
    assert {"CPUs", "preemption", "SCHED_FIFO", "frequency scaling", "steal", "other processes"} <= names
    facts = report["facts"]
    assert facts["cpus_allowed"] and facts["fifo_allowed"] in (True, False)
    assert 0.4 <= facts["sample_s"] <= 30
    text = subprocess.run([CLAWBED, "doctor", "--sample-s", "0"], capture_output=True, text=True, timeout=60)
    assert text.returncode in (0, 1), text.stderr
    assert text.stdout.startswith("clawbed doctor: ")
    assert max(len(line) for line in text.stdout.splitlines()) <= 80
