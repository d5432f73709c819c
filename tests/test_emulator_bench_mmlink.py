"""``make bench`` beside Mahimahi: mm-link found through $MM_LINK and run live (here a stand-in
script with mm-link's command line), or, without one, the reference figures printed with where
and when they were measured instead of a comparison column."""

from __future__ import annotations

import io
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from rich.console import Console

from clawbed.emulator import bench

FAKE_MM_LINK = """#!/bin/sh
# mm-link UPLINK DOWNLINK [--downlink-log=FILE] -- COMMAND...: a stand-in that runs COMMAND with
# MAHIMAHI_BASE set and writes a delivery log of one packet per ms.
log=""
shift 2
while [ "$1" != "--" ]; do case "$1" in --downlink-log=*) log="${1#--downlink-log=}";; esac; shift; done
shift
if [ -n "$log" ]; then echo "# base timestamp: 0" > "$log"; for t in 1 2 3 4 6; do echo "$t - 1500" >> "$log"; done; fi
MAHIMAHI_BASE=127.0.0.1 exec "$@"
"""


def _fake(tmp_path: Path) -> Path:
    path = tmp_path / "mm-link"
    path.write_text(FAKE_MM_LINK)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_mm_link_from_the_environment_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake(tmp_path)
    monkeypatch.setenv("MM_LINK", str(fake))
    assert bench.mm_link_binary() == fake
    monkeypatch.setenv("MM_LINK", str(tmp_path / "absent"))
    with pytest.raises(click.UsageError, match="MM_LINK"):
        bench.mm_link_binary()
    monkeypatch.delenv("MM_LINK")
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    assert bench.mm_link_binary() == fake


def test_mm_link_runs_live_and_its_log_is_read(tmp_path: Path) -> None:
    fake = _fake(tmp_path)
    idle = bench.mm_link_idle(fake, tmp_path, 1.0)
    assert idle["cpu_percent"] >= 0
    # The 12 Mbit/s step's command needs iperf3 both ends; its log parsing alone, through a
    # command that does nothing.
    out, _ = bench._mm_link(fake, bench.constant_mahimahi_trace(tmp_path / "t.down", packets_per_ms=1), "true", 1.0,
                            f"--downlink-log={tmp_path / 'log'}")
    assert (tmp_path / "log").read_text().count(" - ") == 5


def test_without_mm_link_the_references_say_where_and_when() -> None:
    results = {"runs": {"idle": [{"cpu_percent": 0.9, "cpu_percent_by_thread": {"cb-cell": 0.4}}]},
               "idle": {"cpu_percent": 0.9, "cpu_percent_by_thread": {"cb-cell": 0.4}},
               "load_average_before": 1.0, "load_average_after": 1.0, "cpus": 2, "cpu_steal_percent": {},
               "mm_link": None, "references": bench.REFERENCES}
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    printed = text.getvalue()
    assert "mm-link, same machine" not in printed and "not a comparison" in printed
    assert all(ref["where"] and ref["when"] for ref in bench.REFERENCES)
    assert "issue 14" in printed and "2026-11" in printed
    results["runs"]["mm_idle"] = [{"cpu_percent": 4.2}]
    results["mm_link"] = "/usr/bin/mm-link"
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    assert "mm-link, same machine, now" in text.getvalue() and "4.2 % of a core" in text.getvalue()


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


@pytest.mark.root
def test_mm_link_runs_as_a_user_the_bench_makes_and_removes(tmp_path: Path, public_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_LINK", str(_program(public_dir, REFUSES_ROOT)))
    results = bench.run_all(tmp_path, 1.0, Console(file=io.StringIO()), {"mm_idle"})
    user = results["mm_user"]
    assert user.startswith("cb") and user.endswith("mm") and len(user) <= 15
    assert "error" not in results["mm_idle"], results["mm_idle"]
    assert results["mm_idle"]["cpu_percent"] >= 0
    with pytest.raises(KeyError):
        pwd.getpwnam(user)  # removed on the way out
    text = io.StringIO()
    bench.render(results, Console(file=text, width=250))
    assert "mm-link, same machine, now" in text.getvalue() and "not a comparison" not in text.getvalue()


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
