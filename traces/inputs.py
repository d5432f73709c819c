"""Every input a ``--trace`` takes, made a PHY trace: a ``.cbt`` or ``.csv`` trace as it is; a
phone diag log (``.mi2log``, ``.qmdl``) or a Mahimahi downlink trace (``.down``) imported on
the fly with the importer's defaults (``clawbed trace import`` for other choices), once: the
result is cached under the state folder, named by the input's content and the importers' own
code, so a changed log or a changed importer is imported again and nothing else is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT, state_dir

#: File endings → the importer's name in ``clawbed trace import --from``.
IMPORTED_KINDS = {".mi2log": "mobileinsight", ".qmdl": "mobileinsight", ".down": "mahimahi"}
#: Endings read as they are.
TRACE_SUFFIXES = (".cbt", ".csv")
#: What ``--trace`` accepts, for help and error texts.
ACCEPTED = "a PHY trace (.cbt, .csv), a phone diag log (.mi2log, .qmdl) or a Mahimahi trace (.down)"
#: The code whose change invalidates a cached import.
_IMPORTER_CODE = ("traces/importers.py", "traces/diaglog", "traces/schema.py", "traces/binary.py", "traces/inputs.py")


def importer_fingerprint() -> str:
    """A digest of the importers' source: part of every cached import's name."""
    digest = hashlib.sha256()
    for rel in _IMPORTER_CODE:
        path = REPO_ROOT / rel
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if file.is_file():
                digest.update(file.relative_to(REPO_ROOT).as_posix().encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def import_phone_log(path: Path) -> tuple[Any, str]:
    """A phone diag log at the smallest LTE bandwidth that holds its largest allocation (a diag
    log does not carry the cell's bandwidth; the importer's 20 MHz default would double a 10 MHz
    cell's room), and the rule's one-line account. A log whose RBs are only estimated (the MAC
    path: no 0xB173) bounds nothing and stays at 20 MHz."""
    from clawbed.lte import N_RB_BY_BANDWIDTH_MHZ
    from clawbed.traces import importers

    probe = importers.import_mobileinsight(path, bandwidth_mhz=20.0)
    if probe.metadata.get("provenance", {}).get("path") == "mac-fallback":
        return probe, "20 MHz: its RBs are estimated (MAC blocks only), so they bound no bandwidth"
    largest = int(probe["own_rbs"].max())
    bandwidth = min(b for b, n in N_RB_BY_BANDWIDTH_MHZ.items() if n >= max(largest, 1) and b >= 1.4)
    trace = probe if bandwidth == 20.0 else importers.import_mobileinsight(path, bandwidth_mhz=bandwidth)
    return trace, (f"{bandwidth:g} MHz, the smallest LTE bandwidth holding its largest allocation ({largest} RBs); "
                   f"`clawbed trace import --bandwidth-mhz` for another")


def needs_import(path: Path) -> bool:
    return path.suffix.lower() in IMPORTED_KINDS


def cached_path(path: Path) -> Path:
    """Where the import of ``path`` is (or will be) cached."""
    content = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return state_dir() / "imported-traces" / f"{path.stem}-{content}-{importer_fingerprint()}.cbt"


def as_trace(path: Path, note: Callable[[str], None] | None = None) -> Path:
    """The PHY trace to run ``path`` as: itself, or its (cached) import; ``note`` hears one line
    when an import is made or reused. An input of no known kind is refused, naming the kinds."""
    if not path.is_file():
        raise InputError(f"--trace {path}: no such file")
    suffix = path.suffix.lower()
    if suffix in TRACE_SUFFIXES:
        return path
    kind = IMPORTED_KINDS.get(suffix)
    if kind is None:
        raise InputError(f"--trace {path}: not {ACCEPTED}; for another log, `clawbed trace import --from KIND` "
                         f"it first")
    out = cached_path(path)
    if out.is_file():
        if note:
            note(f"{path.name}: using its import {out} (same log, same importer)")
        return out
    from clawbed.traces import importers
    from clawbed.traces.io import write_trace

    if kind == "mobileinsight":
        trace, rule = import_phone_log(path)
        if note:
            note(f"{path.name}: {rule}")
    else:
        trace = importers.import_mahimahi(path, bandwidth_mhz=20.0, n_antennas=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(trace, out)  # atomic: an interrupted import never leaves half a trace in the cache
    if note:
        note(f"{path.name}: imported as `clawbed trace import --from {kind}` would, to {out} "
             f"({trace.duration_ms / 1000:.1f} s)")
    return out
