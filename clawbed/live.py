"""A live run's namespaces, from its record: what ``clawbed exec RUN ROLE -- CMD`` runs in.

Every run (a replay, ``clawbed emu run``) keeps a ledger (``ledger.jsonl``) in its directory:
each namespace, link and process it made, written before use. A replay's manifest also
names them by role (``made``). This module finds a run's directory (a path, or a name under
the runs folder), the namespace of a role (``ue`` = UE 0, ``ue<i>``, ``core``, ``server``),
and whether the run is live: its emulator process still runs (PID and start time as the
ledger recorded them) and the namespace still exists. Nothing is found by name pattern, so
another run's ``cb*`` namespaces are never taken for this one's.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from clawbed.errors import InputError
from clawbed.netns import PREFIX, RUN_ID_LENGTH, Ledger, ResourceError, _pid_runs
from clawbed.paths import runs_dir

#: Roles a command may run in.
ROLES = ("ue", "server", "core")
#: Where network namespaces are bound (``ip netns``).
NETNS_DIR = Path("/var/run/netns")
#: The ledger's name of the emulator process (``emulator/process.py``).
EMULATOR_PROCESS = "clawbed-emu"
_UE_ROLE = re.compile(r"^ue(\d+)?$")


@dataclass
class LiveRun:
    """A run's directory and what its record says it made."""

    path: Path
    run_id: str | None
    #: Role → namespace name (``ue0``, ``ue1``, …, ``core``, ``server``).
    namespaces: dict[str, str]
    #: The emulator's ledger entry, if it recorded one.
    emulator: dict | None
    status: str | None

    def namespace(self, role: str) -> str:
        """The namespace of ``role`` (``ue`` is UE 0)."""
        match = _UE_ROLE.match(role)
        key = f"ue{match.group(1) or 0}" if match else role
        if key not in self.namespaces and role not in ROLES and not match:
            raise InputError(f"{role!r}: give one of {', '.join(ROLES)} (or ue<i> for UE i)")
        if key not in self.namespaces:
            raise InputError(f"{self.path}: the run made no {role} namespace (it has: "
                             f"{', '.join(sorted(self.namespaces)) or 'none'})")
        return self.namespaces[key]

    def check_live(self, namespace: str) -> None:
        """Refuse, saying why, unless the run is live and ``namespace`` still exists."""
        if self.status is not None and self.status != "running":
            raise InputError(f"{self.path}: the run is not live (its manifest says {self.status})")
        if self.emulator is None:
            raise InputError(f"{self.path}: the run's ledger records no emulator: not a live run")
        pid = int(self.emulator["pid"])
        if not _pid_runs(pid, self.emulator.get("argv", []), self.emulator.get("start_ticks")):
            raise InputError(f"{self.path}: the run is not live (its emulator, PID {pid}, has ended)")
        if not (NETNS_DIR / namespace).exists():
            raise InputError(f"{self.path}: namespace {namespace} is gone")


def find_run(run: str) -> Path:
    """The run directory ``run`` names: a path, or a name under the runs folder."""
    for candidate in (Path(run), runs_dir() / run):
        if candidate.is_dir():
            if not (candidate / "ledger.jsonl").is_file():
                raise InputError(f"{candidate}: no ledger.jsonl (not a run directory, or its run made nothing yet)")
            return candidate.resolve()
    raise InputError(f"{run}: no such run directory (as a path, or under {runs_dir()})")


def read_run(path: Path) -> LiveRun:
    """What the run at ``path`` made, from its manifest (a replay's roles) and its ledger."""
    try:
        entries = Ledger(path / "ledger.jsonl").entries()
    except ResourceError as e:
        raise InputError(str(e)) from None
    manifest: dict = {}
    manifest_path = path / "manifest.json"
    if manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as e:
            raise InputError(f"{manifest_path}: not JSON ({e.msg}, line {e.lineno})") from None
    made = manifest.get("made") or {}
    namespaces = {role: name for role, name in (made.get("namespaces") or {}).items() if isinstance(name, str)}
    run_id = manifest.get("run_id")
    for entry in entries:
        if entry["kind"] != "netns":
            continue
        name = entry["name"]
        if run_id is None and name.endswith("core") and name.startswith(PREFIX):
            run_id = name[len(PREFIX):len(PREFIX) + RUN_ID_LENGTH]
        role = _role_of(name, run_id)
        if role is not None:
            namespaces.setdefault(role, name)
    if "server" not in namespaces and "core" in namespaces:
        namespaces["server"] = namespaces.get("srv", namespaces["core"])  # without a wired side: the core's
    namespaces.pop("srv", None)
    emulator = next((e for e in entries if e["kind"] == "process" and e["name"] == EMULATOR_PROCESS), None)
    return LiveRun(path, run_id, namespaces, emulator, manifest.get("status"))


def _role_of(name: str, run_id: str | None) -> str | None:
    """``cb<rid>u3`` → ``ue3``, ``cb<rid>core`` → ``core``, ``cb<rid>srv`` → ``srv``."""
    if run_id is None or not name.startswith(PREFIX + run_id):
        return None
    rest = name[len(PREFIX + run_id):]
    if rest in ("core", "srv"):
        return rest
    if rest.startswith("u") and rest[1:].isdigit():
        return f"ue{int(rest[1:])}"
    return None


def exec_argv(run: str, role: str, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` in ``role``'s namespace of the live run ``run``
    (a leading ``--``, which separates it from clawbed's own arguments, is dropped)."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise InputError("give the command to run after --, e.g. clawbed exec RUN ue -- ip addr")
    live = read_run(find_run(run))
    namespace = live.namespace(role)
    live.check_live(namespace)
    return ["ip", "netns", "exec", namespace, *argv]


def exec_in(run: str, role: str, argv: list[str]) -> None:
    """Replace this process with ``argv`` in the namespace (its terminal, its exit status)."""
    command = exec_argv(run, role, argv)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        raise InputError(f"running {' '.join(command)}: {e.strerror}") from None
