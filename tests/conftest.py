"""Shared test fixtures: the repository's tools, and a guard that no run leaves ``cb*`` behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clawbed.paths import REPO_ROOT

#: The venv's ``clawbed`` command (tests run with the venv's Python).
CLAWBED = Path(sys.executable).parent / "clawbed"


def cb_leftovers() -> set[str]:
    """Every ``cb*`` namespace and root-namespace link on the machine."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in ns.splitlines() if line.startswith("cb")}
    names |= {line.split(": ")[1].split("@")[0] for line in links.splitlines()
              if ": cb" in line}
    return names


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind() -> object:
    """Fail the session if the tests created ``cb*`` resources and did not remove them."""
    before = cb_leftovers()
    yield
    left = cb_leftovers() - before
    assert not left, f"tests left these behind: {sorted(left)}"


@pytest.fixture
def clawbed_cli() -> Path:
    return CLAWBED


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
