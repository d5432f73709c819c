"""Where things are: the repository, the shared data beside it, and the project's state."""

from __future__ import annotations

import os
from pathlib import Path

from clawbed.errors import ClawbedError

#: The repository root (this file is ``<repo>/clawbed/paths.py``; the install is editable).
REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The optional folder of third-party recordings (real phone diag logs, Mahimahi's
    capacity traces): ``$CLAWBED_SHARED`` or ``<repo>/../shared``. Only tests and benchmarks
    over those recordings use it; nothing the project builds or runs needs it."""
    path = Path(os.environ.get("CLAWBED_SHARED", REPO_ROOT.parent / "shared"))
    if not path.is_dir():
        raise ClawbedError(
            f"shared data folder not found at {path}: put it beside the repository "
            "or point CLAWBED_SHARED at it"
        )
    return path


def shared_data(subpath: str) -> Path | None:
    """``<shared>/data/<subpath>`` if that exists, else None (the folder is optional)."""
    try:
        path = shared_dir() / "data" / subpath
    except ClawbedError:
        return None
    return path if path.exists() else None


def state_dir() -> Path:
    """The project's own state (services' data, caches): ``$CLAWBED_STATE`` or ``<repo>/.state``."""
    return Path(os.environ.get("CLAWBED_STATE", REPO_ROOT / ".state"))


def runs_dir() -> Path:
    """Where run directories go: ``$CLAWBED_RUNS`` or ``<repo>/runs``."""
    return Path(os.environ.get("CLAWBED_RUNS", REPO_ROOT / "runs"))
