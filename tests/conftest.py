"""Shared test fixtures: the repository's tools, and a guard that no run of the session leaves
its ``cb*`` namespaces or links behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clawbed.paths import REPO_ROOT

#: The venv's ``clawbed`` command (tests run with the venv's Python).
CLAWBED = Path(sys.executable).parent / "clawbed"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The one place root-only tests are told apart: a test marked ``root`` (network
    namespaces, BPF, nginx on port 443, …) is skipped, with the reason, when not run as root."""
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, BPF, privileged ports): run the suite as root")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``nohup`` (SIGHUP ignored) or ``&`` in a script (SIGINT ignored) the processes
    the tests start would inherit the ignored signals, and the tests that stop them by
    SIGINT or SIGHUP would wait in vain: give them the default dispositions, as the CLI does."""
    from clawbed.signals import restore_default_signals
    restore_default_signals()


def session_leftovers(base: Path) -> set[str]:
    """The namespaces and root-namespace links that the ledgers of this session's runs (every
    run keeps one in its directory, under the session's temporary folder) record and that
    still exist. By ledger, not by name: other runs on the machine (a suite, another
    session) have ``cb*`` resources of their own, which are not this session's to judge."""
    namespaces = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    links = {line.split(": ")[1].split("@")[0] for line in
             subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()}
    left = set()
    for ledger in base.rglob("ledger*.jsonl"):
        for line in ledger.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a killed run
            if entry.get("kind") == "netns" and entry.get("name") in namespaces:
                left.add(f"namespace {entry['name']} ({ledger})")
            elif entry.get("kind") == "link" and not entry.get("netns") and entry.get("name") in links:
                left.add(f"link {entry['name']} ({ledger})")
    return left


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind(tmp_path_factory: pytest.TempPathFactory) -> object:
    """Fail the session if its runs left namespaces or links behind."""
    yield
    left = session_leftovers(tmp_path_factory.getbasetemp())
    assert not left, f"tests left these behind: {sorted(left)}"


def shared_data_or_skip(subpath: str) -> Path:
    """A folder or file of the optional third-party recordings, or skip the test saying
    which is missing (a clone without the shared data folder runs everything else)."""
    from clawbed.paths import shared_data
    path = shared_data(subpath)
    if path is None:
        pytest.skip(f"needs the third-party recordings in <shared>/data/{subpath} "
                    "(CLAWBED_SHARED or ../shared beside the repository); not present")
    return path


@pytest.fixture
def mahimahi_traces() -> Path:
    """Mahimahi's recorded Saturator traces (GPL-3.0, not shipped with the project)."""
    return shared_data_or_skip("mahimahi-traces")


@pytest.fixture
def clawbed_cli() -> Path:
    return CLAWBED


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
