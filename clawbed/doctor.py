"""``clawbed doctor``: can this machine hold the emulator's 1 ms subframe clock in real time?

A replay's loads are only the model's when the cell thread runs each subframe on time
(``replay/lateness.py`` flags a load whose subframes ran more than 1 ms late). What decides
that is the machine, before any run: how many CPUs the run may use, whether the kernel can
preempt kernel work for a real-time thread, whether SCHED_FIFO is allowed at all, frequency
scaling, CPU time the hypervisor steals, and other busy processes.

Two halves: :func:`collect` reads the machine (``/proc``, ``/sys``, a probe thread, and, with
``sample_s`` > 0, two readings of ``/proc/stat`` and every process's CPU time that far apart);
:func:`judge` turns those :class:`Facts` into :class:`Check` s and a verdict (``ok``, ``warn``,
``bad``) with what to change. The judging is pure: tests feed it made-up readings. A replay
records ``collect(sample_s=0)``'s verdict (no sampling: the load average stands in for the
busy-process and steal samples) in its manifest.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import platform
import resource
import textwrap
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Verdicts, worst last.
VERDICTS = ("ok", "warn", "bad")
#: Steal over the sample, % of the machine's CPU time, from which the clock is at risk / lost.
STEAL_WARN_PCT = 1.0
STEAL_BAD_PCT = 5.0
#: Another process using this much of one CPU over the sample is worth naming, %.
BUSY_PROCESS_WARN_PCT = 20.0
#: Other processes together using this share of the allowed CPUs, %: the run will queue for them.
BUSY_TOTAL_BAD_PCT = 50.0
#: 1-minute load average per allowed CPU above which the machine counts as busy (no sample).
LOADAVG_WARN_PER_CPU = 0.5
LOADAVG_BAD_PER_CPU = 1.0
#: Processes listed as the top CPU users.
TOP_PROCESSES = 5
#: The default sample of ``clawbed doctor``, s.
DEFAULT_SAMPLE_S = 1.0
#: A probe thread's wake-ups from 1 ms sleeps, ms late: a wake-up this late is a slip the
#: strict rule flags; with the 99th percentile this late most loads would have them.
WAKEUP_LATE_MS = 1.0
#: The probe's period, ns: the cell thread's subframe.
WAKEUP_PERIOD_NS = 1_000_000
#: Preemption models by how well a real-time thread gets the CPU back from kernel work.
PREEMPT_MODELS = ("none", "voluntary", "lazy", "full", "rt")


@dataclass
class Facts:
    """What :func:`collect` read (None: could not be read / not sampled)."""

    cpus_online: int | None = None
    cpus_allowed: list[int] = field(default_factory=list)
    #: ``none``, ``voluntary``, ``lazy``, ``full``, ``rt`` or None; and where it was read.
    preempt_model: str | None = None
    preempt_source: str | None = None
    #: Whether the kernel may switch preemption models at boot (PREEMPT_DYNAMIC).
    preempt_dynamic: bool = False
    #: The probe thread got SCHED_FIFO; else the errno's text.
    fifo_allowed: bool | None = None
    fifo_error: str | None = None
    rlimit_rtprio: tuple[int, int] | None = None
    is_root: bool = False
    #: ``/proc/sys/kernel/sched_rt_runtime_us`` and ``sched_rt_period_us``.
    rt_runtime_us: int | None = None
    rt_period_us: int | None = None
    #: The frequency governor of each CPU that has cpufreq (empty: none visible, as in most VMs).
    governors: dict[int, str] = field(default_factory=dict)
    #: Over the sample: steal, % of the machine's CPU time.
    sample_s: float = 0.0
    steal_pct: float | None = None
    #: Over the sample: the busiest other processes, (pid, name, % of one CPU), busiest first,
    #: and all other processes together, % of one CPU.
    top_processes: list[tuple[int, str, float]] = field(default_factory=list)
    others_cpu_pct: float | None = None
    #: ``/proc/loadavg``'s 1-minute figure.
    loadavg_1m: float | None = None
    #: Over the sample: how late a probe thread woke from sleeps to 1 ms deadlines, as the cell
    #: thread does (SCHED_FIFO priority 1 when allowed): its wake-ups, their lateness p99 and
    #: max, ms (Python's own wake-up path adds ~0.05-0.1 ms), and its policy.
    wakeups: int = 0
    wakeup_late_p99_ms: float | None = None
    wakeup_late_max_ms: float | None = None
    wakeup_policy: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Check:
    """One thing judged: its status, what was read, and what to change (empty when ok)."""

    name: str
    status: str
    reading: str
    advice: str = ""


@dataclass
class Report:
    verdict: str
    checks: list[Check]
    facts: Facts

    @property
    def reasons(self) -> list[str]:
        """The checks that were not ok, as ``name: reading``."""
        return [f"{c.name}: {c.reading}" for c in self.checks if c.status != "ok"]

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": self.reasons, "checks": [asdict(c) for c in self.checks],
                "facts": self.facts.to_json()}

    def summary(self) -> dict[str, Any]:
        """What a run records: the verdict, its reasons and the key readings (the 3 busiest other
        processes of the sample)."""
        f = self.facts
        return {"verdict": self.verdict, "reasons": self.reasons, "cpus_allowed": f.cpus_allowed,
                "preempt_model": f.preempt_model, "fifo_allowed": f.fifo_allowed, "steal_pct": f.steal_pct,
                "loadavg_1m": f.loadavg_1m, "sample_s": f.sample_s, "others_cpu_pct": f.others_cpu_pct,
                "wakeups": f.wakeups, "wakeup_late_p99_ms": f.wakeup_late_p99_ms,
                "wakeup_late_max_ms": f.wakeup_late_max_ms,
                "top_processes": [{"pid": pid, "name": name, "cpu_pct": pct} for pid, name, pct in f.top_processes[:3]]}


# -- parsing (pure) ------------------------------------------------------------------------------


def parse_cpu_list(text: str) -> list[int]:
    """``0-3,6`` (the kernel's CPU list format) → [0, 1, 2, 3, 6]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def preempt_from_debugfs(text: str) -> str | None:
    """The current model of ``/sys/kernel/debug/sched/preempt`` (``none (voluntary) full``: the
    one in parentheses)."""
    for word in text.split():
        if word.startswith("(") and word.endswith(")"):
            return word[1:-1]
    return None


def preempt_from_cmdline(text: str) -> str | None:
    """A ``preempt=`` on the kernel command line (a PREEMPT_DYNAMIC kernel's boot choice)."""
    for word in text.split():
        if word == "--":
            break  # what follows is init's, not the kernel's
        if word.startswith("preempt="):
            value = word.split("=", 1)[1]
            return value if value in PREEMPT_MODELS else None
    return None


def preempt_from_config(text: str) -> tuple[str | None, bool]:
    """(the build's default model, PREEMPT_DYNAMIC) from a kernel config's text."""
    on = {line.split("=", 1)[0] for line in text.splitlines() if line.endswith("=y")}
    dynamic = "CONFIG_PREEMPT_DYNAMIC" in on
    for option, model in (("CONFIG_PREEMPT_RT", "rt"), ("CONFIG_PREEMPT", "full"), ("CONFIG_PREEMPT_LAZY", "lazy"),
                          ("CONFIG_PREEMPT_VOLUNTARY", "voluntary"), ("CONFIG_PREEMPT_NONE", "none")):
        if option in on:
            return model, dynamic
    return None, dynamic


def preempt_from_uname(version: str) -> tuple[str | None, bool]:
    """(model, dynamic) from ``uname -v`` (``#1 SMP PREEMPT_DYNAMIC …``): PREEMPT_RT and a bare
    PREEMPT say the model; PREEMPT_DYNAMIC says only that it is chosen at boot."""
    words = version.split()
    if "PREEMPT_RT" in words:
        return "rt", False
    if "PREEMPT_DYNAMIC" in words:
        return None, True
    if "PREEMPT" in words:
        return "full", False
    return "none", False


def cpu_ticks(stat_text: str) -> tuple[int, int] | None:
    """(steal, total) ticks of the ``cpu`` line of ``/proc/stat``'s text."""
    first = stat_text.split("\n", 1)[0].split()
    if len(first) < 9 or first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:9]]  # guest time is inside user and nice already
    return values[7], sum(values)


def steal_pct_between(before: str, after: str) -> float | None:
    """Steal, % of all CPU time, between two ``/proc/stat`` texts."""
    a, b = cpu_ticks(before), cpu_ticks(after)
    if a is None or b is None or b[1] <= a[1]:
        return None
    return round(100.0 * (b[0] - a[0]) / (b[1] - a[1]), 2)


def process_ticks(stat_text: str) -> tuple[str, int] | None:
    """(name, utime + stime ticks) of a ``/proc/PID/stat`` text."""
    try:
        name = stat_text[stat_text.index("(") + 1:stat_text.rindex(")")]
        rest = stat_text[stat_text.rindex(")") + 2:].split()
        return name, int(rest[11]) + int(rest[12])  # fields 14 and 15: utime, stime
    except (ValueError, IndexError):
        return None


def busy_processes(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], seconds: float,
                   clk_tck: int, exclude: set[int]) -> tuple[list[tuple[int, str, float]], float]:
    """(the busiest processes as (pid, name, % of one CPU), busiest first; all of them
    together, %) between two readings of every process's ticks, leaving out ``exclude``."""
    usage = []
    for pid, (name, ticks) in after.items():
        if pid in exclude or pid not in before or before[pid][0] != name:
            continue
        pct = 100.0 * (ticks - before[pid][1]) / clk_tck / seconds
        if pct > 0:
            usage.append((pid, name, round(pct, 1)))
    usage.sort(key=lambda u: -u[2])
    return usage[:TOP_PROCESSES], round(sum(u[2] for u in usage), 1)


# -- judging (pure) ------------------------------------------------------------------------------


def judge(f: Facts) -> Report:
    """The checks of ``f`` and the verdict: the worst of them."""
    checks = [_cpus(f), _preemption(f), _fifo(f), _governor(f), *_wakeup_checks(f), *_load(f)]
    worst = max(VERDICTS.index(c.status) for c in checks)
    return Report(VERDICTS[worst], checks, f)


def _cpus(f: Facts) -> Check:
    n = len(f.cpus_allowed)
    reading = f"{n} allowed ({_cpu_list_text(f.cpus_allowed)}) of {f.cpus_online or '?'} online"
    if n < 2:
        return Check("CPUs", "bad", reading, "the cell clock, the browser, nginx and the scheme's agents share one "
                     "CPU: give the run two or more (taskset, the container's or VM's CPU count)")
    if n < 4:
        return Check("CPUs", "warn", reading, "with fewer than 4 the emulator gets no CPU of its own "
                     "(replay/cpus.py; --reserve-cpu forces one at the rest's cost) and some loads run late")
    return Check("CPUs", "ok", reading)


def _cpu_list_text(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus) if len(cpus) <= 8 else f"{cpus[0]}-{cpus[-1]}"


def _preemption(f: Facts) -> Check:
    model = f.preempt_model
    where = f" ({f.preempt_source})" if f.preempt_source else ""
    if model is None:
        return Check("preemption", "warn", "unknown" + where,
                     "could not read the kernel's preemption model; a PREEMPT_NONE kernel delays the cell clock "
                     "behind kernel work")
    reading = model + where
    if model in ("full", "rt", "lazy"):
        return Check("preemption", "ok", reading)
    fix = ("boot with preempt=full on the kernel command line (this kernel is PREEMPT_DYNAMIC)"
           if f.preempt_dynamic else "use a kernel built with PREEMPT (or PREEMPT_DYNAMIC and preempt=full)")
    return Check("preemption", "warn", reading, f"the cell thread waits for kernel work on its CPU to reach a "
                 f"preemption point (1-3 ms during page loads): {fix}")


def _fifo(f: Facts) -> Check:
    rt = f"sched_rt_runtime_us {f.rt_runtime_us}" if f.rt_runtime_us is not None else "sched_rt_runtime_us ?"
    rlimit = f"RLIMIT_RTPRIO {f.rlimit_rtprio[0]}" if f.rlimit_rtprio else "RLIMIT_RTPRIO ?"
    if f.rt_runtime_us == 0:
        return Check("SCHED_FIFO", "bad", f"real-time threads get no CPU time ({rt})",
                     "set /proc/sys/kernel/sched_rt_runtime_us to 950000 (the default) or -1")
    if f.fifo_allowed is False:
        who = "root" if f.is_root else "not root"
        return Check("SCHED_FIFO", "bad", f"refused ({f.fifo_error}; {who}, {rlimit}, {rt})",
                     "the emulator's cell thread then runs at normal priority (lateness p99 ~6 ms on 2 CPUs): run "
                     "as root, raise RLIMIT_RTPRIO (ulimit -r 99) or grant CAP_SYS_NICE; in a cgroup with RT group "
                     "scheduling give it cpu.rt_runtime_us")
    if f.fifo_allowed is None:
        return Check("SCHED_FIFO", "warn", f"not probed ({rlimit}, {rt})", "")
    return Check("SCHED_FIFO", "ok", f"allowed ({rt})")


def _governor(f: Facts) -> Check:
    if not f.governors:
        return Check("frequency scaling", "ok", "no cpufreq (a VM's host or the firmware decides)")
    kinds = sorted(set(f.governors.values()))
    reading = ", ".join(f"{g} on {sum(1 for v in f.governors.values() if v == g)} CPU(s)" for g in kinds)
    if kinds == ["performance"]:
        return Check("frequency scaling", "ok", reading)
    return Check("frequency scaling", "warn", reading,
                 "a CPU that clocks down wakes the cell thread late: echo performance into "
                 "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor for the run")


def _wakeup_checks(f: Facts) -> list[Check]:
    """How late the probe woke over the sample (none without one)."""
    if not f.wakeups or f.wakeup_late_p99_ms is None or f.wakeup_late_max_ms is None:
        return []
    reading = (f"{f.wakeups:,} sleeps to 1 ms deadlines ({f.wakeup_policy}): late p99 "
               f"{f.wakeup_late_p99_ms:.2f} ms, max {f.wakeup_late_max_ms:.2f} ms")
    if f.wakeup_late_p99_ms >= WAKEUP_LATE_MS:
        return [Check("timer wake-ups", "bad", reading, "most loads will run late: a quieter machine, or a VM "
                      "with dedicated vCPUs")]
    if f.wakeup_late_max_ms >= WAKEUP_LATE_MS:
        return [Check("timer wake-ups", "warn", reading, "some wake-ups come more than 1 ms late (the other "
                      "checks may say why; on a VM, the host): loads will have slips the strict rule flags")]
    return [Check("timer wake-ups", "ok", reading)]


def _load(f: Facts) -> list[Check]:
    """Steal and other busy processes over the sample; without one, the load average."""
    n = max(len(f.cpus_allowed), 1)
    checks = []
    if f.steal_pct is not None:
        reading = f"{f.steal_pct:g} % over {f.sample_s:g} s"
        if f.steal_pct >= STEAL_BAD_PCT:
            checks.append(Check("steal", "bad", reading, "the hypervisor takes the CPUs away for whole ms: a VM "
                                "with dedicated vCPUs, or a quieter host"))
        elif f.steal_pct >= STEAL_WARN_PCT:
            checks.append(Check("steal", "warn", reading, "the host is shared and busy; expect late loads"))
        else:
            checks.append(Check("steal", "ok", reading))
    if f.others_cpu_pct is not None:
        top = ", ".join(f"{name} ({pid}) {pct:g} %" for pid, name, pct in f.top_processes[:3]) or "none"
        reading = f"{f.others_cpu_pct:g} % of one CPU over {f.sample_s:g} s; top: {top}"
        if f.others_cpu_pct >= BUSY_TOTAL_BAD_PCT * n:
            checks.append(Check("other processes", "bad", reading, "they hold half the CPUs the run needs: stop "
                                "them or wait for them"))
        elif any(pct >= BUSY_PROCESS_WARN_PCT for _, _, pct in f.top_processes):
            checks.append(Check("other processes", "warn", reading, "these compete with the browser and the cell "
                                "clock: stop them for the run if you can"))
        else:
            checks.append(Check("other processes", "ok", reading))
    if f.steal_pct is None and f.others_cpu_pct is None and f.loadavg_1m is not None:
        per_cpu = f.loadavg_1m / n
        reading = f"1-minute load average {f.loadavg_1m:g} on {n} CPU(s) (not sampled)"
        if per_cpu >= LOADAVG_BAD_PER_CPU:
            checks.append(Check("load", "bad", reading, "the machine is saturated: `clawbed doctor` names who"))
        elif per_cpu >= LOADAVG_WARN_PER_CPU:
            checks.append(Check("load", "warn", reading, "the machine is busy: `clawbed doctor` names who"))
        else:
            checks.append(Check("load", "ok", reading))
    return checks


# -- reading the machine -------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _kernel_config() -> str | None:
    with contextlib.suppress(OSError, EOFError):
        return gzip.decompress(Path("/proc/config.gz").read_bytes()).decode(errors="replace")
    return _read(f"/boot/config-{platform.release()}")


def _preempt(f: Facts) -> None:
    """The preemption model, from the most direct source there is."""
    debugfs = _read("/sys/kernel/debug/sched/preempt")
    uname_model, uname_dynamic = preempt_from_uname(platform.version())
    config = _kernel_config()
    config_model, config_dynamic = preempt_from_config(config) if config else (None, False)
    f.preempt_dynamic = uname_dynamic or config_dynamic
    for model, source in ((preempt_from_debugfs(debugfs) if debugfs else None, "/sys/kernel/debug/sched/preempt"),
                          (preempt_from_cmdline(_read("/proc/cmdline") or "") if f.preempt_dynamic else None,
                           "preempt= on the kernel command line"),
                          (config_model, "the kernel's config" + (", PREEMPT_DYNAMIC" if f.preempt_dynamic else "")),
                          (uname_model, "uname -v")):
        if model is not None:
            f.preempt_model, f.preempt_source = model, source
            return


def probe_fifo() -> tuple[bool, str | None]:
    """Whether a thread of this process may take SCHED_FIFO: a probe thread asks for priority 1
    and ends (its policy ends with it)."""
    result: dict[str, Any] = {}

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # 0: this thread
            result["ok"] = True
        except OSError as e:
            result["ok"] = False
            result["error"] = errno.errorcode.get(e.errno or 0, str(e.errno)) + f" ({e.strerror})"

    thread = threading.Thread(target=probe, name="doctor-fifo-probe")
    thread.start()
    thread.join()
    return bool(result.get("ok")), result.get("error")


class WakeupProbe:
    """A thread that sleeps to 1 ms deadlines until stopped, as the cell thread does, and
    records how late each wake-up came (SCHED_FIFO priority 1 when allowed). A wake-up past
    several deadlines counts once, and the next deadline is the first one after it."""

    def __init__(self) -> None:
        self.late_ms: list[float] = []
        self.policy = "normal"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="doctor-wakeups", daemon=True)

    def _run(self) -> None:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # 0: this thread
            self.policy = "SCHED_FIFO 1"
        deadline = time.monotonic_ns() + WAKEUP_PERIOD_NS
        while not self._stop.is_set():
            now = time.monotonic_ns()
            if deadline > now:
                time.sleep((deadline - now) / 1e9)
            woke = time.monotonic_ns()
            self.late_ms.append(max(woke - deadline, 0) / 1e6)
            deadline += WAKEUP_PERIOD_NS * (1 + max(woke - deadline, 0) // WAKEUP_PERIOD_NS)

    def __enter__(self) -> WakeupProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> tuple[int, float | None, float | None]:
        """Wake-ups, lateness p99 and max, ms (None: none recorded)."""
        if not self.late_ms:
            return 0, None, None
        ordered = sorted(self.late_ms)
        return len(ordered), round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3), round(ordered[-1], 3)


def _all_process_ticks() -> dict[int, tuple[str, int]]:
    ticks = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            text = _read(f"/proc/{entry}/stat")
            parsed = process_ticks(text) if text else None
            if parsed is not None:
                ticks[int(entry)] = parsed
    return ticks


def collect(sample_s: float = DEFAULT_SAMPLE_S) -> Facts:
    """Read the machine; with ``sample_s`` > 0 also steal, the busiest other processes (this
    process left out) and how late a probe thread wakes, over that many seconds."""
    f = Facts(cpus_online=os.cpu_count(), cpus_allowed=sorted(os.sched_getaffinity(0)), is_root=os.geteuid() == 0)
    _preempt(f)
    f.fifo_allowed, f.fifo_error = probe_fifo()
    f.rlimit_rtprio = resource.getrlimit(resource.RLIMIT_RTPRIO)
    for name in ("rt_runtime_us", "rt_period_us"):
        text = _read(f"/proc/sys/kernel/sched_{name}")
        if text is not None:
            setattr(f, name, int(text))
    for cpu in range(f.cpus_online or 0):
        governor = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")
        if governor:
            f.governors[cpu] = governor.strip()
    loadavg = _read("/proc/loadavg")
    f.loadavg_1m = float(loadavg.split()[0]) if loadavg else None
    if sample_s > 0:
        stat_before, procs_before = _read("/proc/stat") or "", _all_process_ticks()
        start = time.monotonic()
        with WakeupProbe() as probe:
            time.sleep(sample_s)
        f.wakeups, f.wakeup_late_p99_ms, f.wakeup_late_max_ms = probe.summary()
        f.wakeup_policy = probe.policy
        stat_after, procs_after = _read("/proc/stat") or "", _all_process_ticks()
        f.sample_s = round(time.monotonic() - start, 3)
        f.steal_pct = steal_pct_between(stat_before, stat_after)
        f.top_processes, f.others_cpu_pct = busy_processes(procs_before, procs_after, f.sample_s,
                                                           os.sysconf("SC_CLK_TCK"), {os.getpid()})
    return f


#: The checks of what a sample saw now (not the machine's lasting traits).
SAMPLED_CHECKS = ("steal", "other processes")


def run_warning(report: Report) -> str | None:
    """What a run says before it starts: every check that is not ok when the verdict is bad,
    else only the sampled ones (a busy neighbour, steal); a machine's lasting traits (2 CPUs,
    the kernel's preemption model) are left to ``clawbed doctor``. None: nothing to say."""
    said = [c for c in report.checks
            if c.status != "ok" and (report.verdict == "bad" or c.name in SAMPLED_CHECKS)]
    if not said:
        return None
    return (f"clawbed doctor: {report.verdict}: " + "; ".join(f"{c.name}: {c.reading}" for c in said)
            + "; `clawbed doctor` says what to change")


def render(report: Report, width: int = 80) -> str:
    """The report as text of at most ``width`` columns."""
    lines = [f"clawbed doctor: {report.verdict}"]
    for c in report.checks:
        lines += textwrap.wrap(f"{c.status:<4}  {c.name}: {c.reading}", width, subsequent_indent=" " * 6)
        if c.advice:
            lines += textwrap.wrap(f"fix: {c.advice}", width, initial_indent=" " * 6, subsequent_indent=" " * 11)
    return "\n".join(lines)
