"""``make bench`` beside Mahimahi: mm-link found through $MM_LINK and run live (a stand-in
script with mm-link's command line, and the real mm-link when one is installed), as an
unprivileged user the bench makes and removes, in a namespace of its own; without one, or
when it fails, the reference figures printed with where and when they were measured instead
of a comparison column, and the output says why."""

from __future__ import annotations

import grp
import io
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from pyroute2 import netns
from rich.console import Console

from clawbed.emulator import bench

FAKE_MM_LINK = """#!/bin/sh
# mm-link UPLINK DOWNLINK [--downlink-log=FILE] -- COMMAND...: a stand-in that runs COMMAND
# (as its child, as mm-link does) with MAHIMAHI_BASE set and writes a delivery log of one
# packet per ms.
log=""
shift 2
while [ "$1" != "--" ]; do case "$1" in --downlink-log=*) log="${1#--downlink-log=}";; esac; shift; done
shift
if [ -n "$log" ]; then echo "# base timestamp: 0" > "$log"; for t in 1 2 3 4 6; do echo "$t - 1500" >> "$log"; done; fi
MAHIMAHI_BASE=127.0.0.1 "$@"
"""


def _fake(tmp_path: Path) -> Path:
    path = tmp_path / "mm-link"
    path.write_text(FAKE_MM_LINK)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _real_mm_link() -> Path:
    """The installed mm-link ($MM_LINK or on PATH), or a skip saying there is none."""
    try:
        found = bench.mm_link_binary()
    except bench.MmLinkMissing as e:
        pytest.skip(f"no mm-link here: {e}")
    if found is None:
        pytest.skip("no mm-link here ($MM_LINK or mm-link on PATH; it is built from Mahimahi's source, "
                    "see docs/benchmarks.md)")
    return found


# -- pure parts ------------------------------------------------------------------------------------


def test_mm_link_from_the_environment_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake(tmp_path)
    monkeypatch.setenv("MM_LINK", str(fake))
    assert bench.mm_link_binary() == fake
    monkeypatch.setenv("MM_LINK", str(tmp_path / "absent"))
    with pytest.raises(bench.MmLinkMissing, match=r"\$MM_LINK=.*absent: no such program"):
        bench.mm_link_binary()
    monkeypatch.delenv("MM_LINK")
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    assert bench.mm_link_binary() == fake
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    assert bench.mm_link_binary() is None


def _mm_link_accepts(path: Path) -> list[int]:
    """The trace's timestamps, checked by mm-link's own rules: one whole number of ms a line,
    no empty line, never decreasing, lasting more than 0 ms."""
    lines = path.read_text().split("\n")
    assert lines[-1] == "", "the last line ends with a newline"
    stamps = [int(line) for line in lines[:-1]]
    assert all(re.fullmatch(r"[0-9]+", line) for line in lines[:-1])
    assert stamps == sorted(stamps) and stamps[-1] > 0
    return stamps


def test_the_traces_written_for_mm_link(tmp_path: Path) -> None:
    stamps = _mm_link_accepts(bench.constant_mahimahi_trace(tmp_path / "12.down", packets_per_ms=1))
    assert stamps == list(range(1, 1001))  # 12 Mbit/s: one 1500-byte opportunity a ms, over 1 s
    stamps = _mm_link_accepts(bench.constant_mahimahi_trace(tmp_path / "1g.down",
                                                            packets_per_ms=bench.MM_1GBIT_PACKETS_PER_MS,
                                                            period_ms=100))
    assert len(stamps) == 100 * bench.MM_1GBIT_PACKETS_PER_MS and stamps[-1] == 100
    gbit_s = len(stamps) * 1500 * 8 / (stamps[-1] / 1000) / 1e9
    assert 1.0 <= gbit_s < 1.05  # the emulator's 1 Gbit/s rate link of its 100 Mbit/s step


def test_the_user_name_is_a_resource_name_and_a_valid_user_name() -> None:
    name = bench.mm_user_name("ab12")
    assert name == "cbab12mm" and len(name) <= 15
    assert re.fullmatch(r"[a-z_][a-z0-9_-]*", name)  # useradd's default NAME_REGEX
    with pytest.raises(ValueError):
        bench.mm_user_name("much-too-long-id")


def test_mm_link_argv_drops_to_the_user() -> None:
    user = bench.MmUser("cbab12mm", 990, 991, Path("/tmp/x"))
    argv = bench.mm_link_argv(Path("/opt/mm-link"), Path("/tmp/x/t.down"), "sleep 1", "--downlink-log=/tmp/x/l",
                              user=user)
    assert argv == ["setpriv", "--reuid=990", "--regid=991", "--clear-groups", "--", "/opt/mm-link", "/tmp/x/t.down",
                    "/tmp/x/t.down", "--downlink-log=/tmp/x/l", "--", "sh", "-c", "sleep 1"]
    assert bench.mm_link_argv(Path("mm-link"), Path("t"), "true")[0] == "mm-link"


def test_the_downlink_log_parsing() -> None:
    log = "# mahimahi mm-link (Downlink) [t] > l\n# base timestamp: 5\n3 + 1500\n4 - 1500\n4 - 1500\n7 d 1 1500\n9 - 1500\n"
    assert bench.mm_link_delivered_ms(log) == [4, 4, 9]


def test_mm_link_steps_run_beside_their_emulator_steps() -> None:
    def step(key: str) -> bench.Step:
        return bench.Step(key, key, lambda d: None)

    steps = [step(k) for k in ("idle", "tcp", "at_100mbit", "cell_45_ues", "mahimahi")]
    steps += bench.mm_link_steps(Path("mm-link"), 1.0)
    assert [s.key for s in bench.interleave(steps)] == [
        "idle", "mm_idle", "tcp", "mm_tcp", "at_100mbit", "mm_100mbit", "cell_45_ues", "mahimahi", "mm_12mbit"]
    alone = [step("idle"), *bench.mm_link_steps(Path("mm-link"), 1.0)]
    assert [s.key for s in bench.interleave(alone)] == ["idle", "mm_idle", "mm_tcp", "mm_100mbit", "mm_12mbit"]


def test_cpu_ratios_are_medians_of_what_both_measured() -> None:
    runs = {"idle": [{"cpu_percent": 0.2}, {"cpu_percent": 0.4}, {"cpu_percent": 9.0}],
            "mm_idle": [{"cpu_percent": 2.0}, {"error": "RuntimeError: x"}, {"cpu_percent": 6.0}],
            "at_100mbit": [{"cpu_percent": 5.0}], "mm_100mbit": [{"error": "RuntimeError: x"}]}
    assert bench.cpu_ratios(runs) == {"idle": 0.1}


def _live_results() -> dict:
    by_thread = {"cb-cell": 0.1, "cb-io": 0.1, "cb-tx": 0.0}
    runs = {"idle": [{"cpu_percent": 0.2, "cpu_percent_by_thread": by_thread}],
            "mm_idle": [{"cpu_percent": 1.22, "mm_link_processes": 3}],
            "mm_tcp": [{"gbit_s": 1.637, "cpu_percent": 82.5, "mm_link_processes": 3}],
            "mm_100mbit": [{"mbit_s": 100.0, "cpu_percent": 6.1, "mm_link_processes": 3}],
            "mm_12mbit": [{"interarrival_p99_ms": 1.0, "packets": 2397, "resolution_ms": 1, "cpu_percent": 2.9}]}
    return {"runs": runs, **{k: v[0] for k, v in runs.items()}, "load_average_before": 1.0,
            "load_average_after": 1.0, "cpus": 2, "cpu_steal_percent": {}, "mm_link": "/opt/mahimahi/bin/mm-link",
            "mm_user": "cbab12mm", "references": bench.REFERENCES}


def test_live_figures_in_one_table_of_80_columns() -> None:
    text = io.StringIO()
    bench.render(_live_results(), Console(file=text, width=80))
    assert max(len(line) for line in text.getvalue().splitlines()) <= 80
    printed = " ".join(text.getvalue().split())  # words a narrow table wrapped, joined
    assert bench.MM_COLUMN in printed and "both measured now on this machine" in printed
    assert "not a comparison" not in printed
    for figure in ("1.22 % of a core", "1.637 Gbit/s", "6.1 % of a core", "idle ×0.16"):
        assert figure in printed, figure
    assert "left processes running" not in printed
    results = _live_results()
    results["runs"]["mm_idle"][0]["stopped_after_exit"] = ["dnsmasq (4242)"]
    text = io.StringIO()
    bench.render(results, Console(file=text, width=80))
    assert "left processes running after it ended (the bench stopped them): mm_idle: dnsmasq (4242)" in " ".join(
        text.getvalue().split())


def test_without_mm_link_the_references_say_where_and_when() -> None:
    results = {"runs": {"idle": [{"cpu_percent": 0.9, "cpu_percent_by_thread": {"cb-cell": 0.4}}]},
               "idle": {"cpu_percent": 0.9, "cpu_percent_by_thread": {"cb-cell": 0.4}},
               "load_average_before": 1.0, "load_average_after": 1.0, "cpus": 2, "cpu_steal_percent": {},
               "mm_link": None, "references": bench.REFERENCES}
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    printed = text.getvalue()
    assert bench.MM_COLUMN not in printed and "not a comparison" in printed
    assert "no mm-link here" in printed
    assert all(ref["where"] and ref["when"] for ref in bench.REFERENCES)
    assert "issue 14" in printed and "2026-11" in printed


def test_mm_link_naming_a_missing_program_falls_back_saying_so(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_LINK", str(tmp_path / "absent" / "mm-link"))
    results = bench.run_all(tmp_path, 1.0, Console(file=io.StringIO()), {"mm_idle"})
    assert "no such program" in results["mm_idle"]["error"]
    assert results["mm_user"] is None  # no user made for a program that is not there
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    printed = text.getvalue()
    assert f"$MM_LINK={tmp_path / 'absent' / 'mm-link'}: no such program" in printed
    assert "mm-link failed live here, so these instead" in printed and "issue 14" in printed


# -- processes: the stand-in, the tree meter -------------------------------------------------------


def test_the_tree_meter_stops_what_outlives_the_root(tmp_path: Path) -> None:
    """A process of the tree left running after its root ended (as a dnsmasq mm-link failed
    to stop would be) is found by pid and start time and stopped; the root's CPU is counted."""
    script = tmp_path / "mm-link"
    # Busy for at least a second (counting in the shell itself), leaving a sleep behind.
    script.write_text("#!/bin/sh\nsleep 30 &\nend=$(($(date +%s) + 2))\n"
                      "while [ $(date +%s) -lt $end ]; do i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done; done\n")
    script.chmod(0o755)
    proc = subprocess.Popen([str(script)])
    meter = bench.ProcessTreeCpu(proc.pid, "mm-link")
    time.sleep(0.1)
    meter.start()
    while proc.poll() is None:
        meter.sample()
        time.sleep(0.05)
    stopped = meter.stop_survivors()
    assert len(stopped) == 1 and stopped[0].startswith("sleep ("), stopped
    pid = int(stopped[0].split("(")[1].rstrip(")"))
    for _ in range(100):  # reaped by init once killed
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"sleep ({pid}) still runs")
    assert meter.processes() >= 1 and meter.percent() > 0


def test_the_stand_in_runs_live_and_its_log_is_read(tmp_path: Path) -> None:
    fake = _fake(tmp_path)
    idle = bench.mm_link_idle(fake, tmp_path / "idle", 1.0)
    assert idle["cpu_percent"] is not None and idle["cpu_percent"] >= 0 and idle["mm_link_processes"] == 1
    # The 12 Mbit/s step's command needs iperf3 both ends; its log parsing alone, through a
    # command that does nothing.
    log = tmp_path / "log"
    run = bench._mm_link(fake, bench.constant_mahimahi_trace(tmp_path / "t.down", packets_per_ms=1), "echo hi", 1.0,
                         f"--downlink-log={log}", out=tmp_path / "run")
    assert run.stdout == "hi\n" and bench.mm_link_delivered_ms(log.read_text()) == [1, 2, 3, 4, 6]


REFUSES_ROOT = """#!/bin/sh
# mm-link's own rule: it refuses to run as root.
if [ "$(id -u)" = 0 ]; then echo "please run as non-root" >&2; exit 1; fi
""" + FAKE_MM_LINK.split("\n", 1)[1]

ALWAYS_REFUSES = """#!/bin/sh
echo "please run as non-root" >&2
exit 1
"""


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A folder any user can read (pytest's are root's only, as the bench's own are)."""
    path = Path(tempfile.mkdtemp(prefix="clawbed-test-mm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _program(folder: Path, text: str) -> Path:
    path = folder / "mm-link"
    path.write_text(text)
    path.chmod(0o755)
    return path


def _nothing_left(user: str) -> None:
    """No user or group of that name, no namespace of mm-link's."""
    with pytest.raises(KeyError):
        pwd.getpwnam(user)
    with pytest.raises(KeyError):
        grp.getgrnam(user)
    assert not [name for name in netns.listnetns() if name.endswith(bench.MM_NAMESPACE_ROLE)]


@pytest.mark.root
def test_mm_link_runs_as_a_user_the_bench_makes_and_removes(tmp_path: Path, public_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_LINK", str(_program(public_dir, REFUSES_ROOT)))
    folders_before = set(Path(tempfile.gettempdir()).glob("clawbed-mm-*"))
    results = bench.run_all(tmp_path, 1.0, Console(file=io.StringIO()), {"mm_idle"})
    user = results["mm_user"]
    assert user.startswith("cb") and user.endswith("mm") and len(user) <= 15
    assert "error" not in results["mm_idle"], results["mm_idle"]
    assert results["mm_idle"]["cpu_percent"] >= 0
    _nothing_left(user)
    assert set(Path(tempfile.gettempdir()).glob("clawbed-mm-*")) <= folders_before
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    assert bench.MM_COLUMN in text.getvalue() and "not a comparison" not in text.getvalue()


def test_a_failing_mm_link_falls_back_to_the_references_saying_so(tmp_path: Path, public_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_LINK", str(_program(public_dir, ALWAYS_REFUSES)))
    results = bench.run_all(tmp_path, 1.0, Console(file=io.StringIO()), {"mm_idle", "mm_12mbit"})
    assert "please run as non-root" in results["mm_idle"]["error"]
    assert "please run as non-root" in results["mm_12mbit"]["error"]
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    printed = text.getvalue()
    assert "failed live here" in printed and "mm_idle: RuntimeError: mm-link exited 1: please run as non-root" in printed
    assert "mm-link failed live here, so these instead" in printed and "not a comparison" in printed
    assert "issue 14" in printed  # the reference figures, with where they were measured


@pytest.mark.root
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_bench_leaves_no_user_folder_or_namespace(tmp_path: Path, public_dir: Path,
                                                                 how: signal.Signals) -> None:
    """Ctrl-C (or SIGTERM) while mm-link runs: the user, its folder, the namespace and every
    process of the run are gone when the bench has ended."""
    folders_before = set(Path(tempfile.gettempdir()).glob("clawbed-mm-*"))
    env = dict(os.environ, MM_LINK=str(_program(public_dir, REFUSES_ROOT)), PYTHONUNBUFFERED="1")
    bench_run = subprocess.Popen([sys.executable, "-m", "clawbed.emulator.bench", "--only", "mm_idle", "--seconds",
                                  "30", "--output", str(tmp_path / "out.json")], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
    try:
        assert bench_run.stdout is not None
        first = bench_run.stdout.readline()
        user = re.search(r"mm-link runs as (\S+),", first)
        assert user, first
        pwd.getpwnam(user.group(1))
        time.sleep(2)  # well into the run: the stand-in and its sleep started
        bench_run.send_signal(how)
        bench_run.wait(timeout=30)
    finally:
        if bench_run.poll() is None:
            bench_run.kill()
            bench_run.wait()
    assert bench_run.returncode != 0  # interrupted, not finished
    _nothing_left(user.group(1))
    assert set(Path(tempfile.gettempdir()).glob("clawbed-mm-*")) <= folders_before


@pytest.mark.root
def test_mm_user_flag_names_an_unprivileged_user(tmp_path: Path, public_dir: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_LINK", str(_program(public_dir, REFUSES_ROOT)))
    for sub in "abc":
        (tmp_path / sub).mkdir()
    with pytest.raises(click.BadParameter, match="'root' is root; mm-link refuses to run as root"):
        bench.run_all(tmp_path / "a", 1.0, Console(file=io.StringIO()), {"mm_idle"}, mm_user_name="root")
    with pytest.raises(click.BadParameter, match="no such user 'cbnosuchuser'"):
        bench.run_all(tmp_path / "b", 1.0, Console(file=io.StringIO()), {"mm_idle"}, mm_user_name="cbnosuchuser")
    results = bench.run_all(tmp_path / "c", 1.0, Console(file=io.StringIO()), {"mm_idle"}, mm_user_name="nobody")
    assert results["mm_user"] == "nobody" and "error" not in results["mm_idle"], results["mm_idle"]
    pwd.getpwnam("nobody")  # a named user is left alone


# -- the real mm-link ------------------------------------------------------------------------------


@pytest.mark.root
def test_the_real_mm_link_runs_idle_as_the_benchs_user_and_leaves_nothing(tmp_path: Path) -> None:
    """mm-link itself (built from Mahimahi's source; CI has none and skips): 2 s idle as the
    user the bench makes, its CPU figure reported from its own processes, and afterwards no
    user, group, folder, namespace or process of the run."""
    binary = _real_mm_link()
    if not binary.stat().st_mode & stat.S_ISUID or binary.stat().st_uid != 0:
        pytest.skip(f"{binary} is not setuid root (its install step makes it so)")
    folders_before = set(Path(tempfile.gettempdir()).glob("clawbed-mm-*"))
    console = io.StringIO()
    results = bench.run_all(tmp_path, 2.0, Console(file=console, width=120), {"mm_idle"})
    idle = results["mm_idle"]
    assert "error" not in idle, idle
    # mm-link and its two ferries (uplink, downlink), each polling its queue: some CPU, never a core.
    assert idle["mm_link_processes"] == 3, idle
    assert idle["cpu_percent"] is not None and 0 <= idle["cpu_percent"] < 50, idle
    assert "stopped_after_exit" not in idle, idle
    user = results["mm_user"]
    assert user is not None and f"mm-link runs as {user}" in console.getvalue()
    _nothing_left(user)
    assert set(Path(tempfile.gettempdir()).glob("clawbed-mm-*")) <= folders_before
    # userdel refuses a user that still has a process, and the bench says so.
    assert "could not remove" not in console.getvalue()
