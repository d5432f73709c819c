"""The run directory of one replay, written as the run goes so that an interrupted run keeps
every finished load.

Layout (``runs/<name or timestamp>/``)::

    manifest.json        config, versions, trace SHA-256, seed, host facts; rewritten (atomically)
                         at the start and when the run ends (``status``, loads done, duration)
    results.jsonl        one JSON object per load, appended and fsynced as each load ends
    results.csv          the same loads, flat columns (:data:`RESULT_COLUMNS`), appended likewise
    late-loads.jsonl     loads run again because the emulator fell behind during them (``timing_ok``)
    loads/NNN-<scheme>/  one directory per load:
        tcp.csv          the server's TCP state per flow, ~10 ms (replay.sampler.SAMPLE_COLUMNS)
        truth.csv        the emulator's ground truth for the UE during the load, 1 ms rows
        diag.jsonl.zst   the UE's synthetic diag feed (MobileInsight-shaped) during the load
        estimates.csv    the CLAW client's estimates during the load (claw, cqic)
        objects.json     the loader's per-object timings
        ...              the scheme's own files (agent and client logs)
    emulator/            the emulator's config, log, whole-run truth, packet log and diag files
    ledger.jsonl         what the run created (``clawbed cleanup <run dir>`` after a SIGKILL)
                         the manifest's ``made`` names it by role (:func:`resources_made`)
    report.html          the interactive report, with plotly.min.js beside it (offline)

Times in every series are Unix seconds (``t_unix_s``), so that series from the emulator, the
sampler and the client line up; the report shifts them to the load's start.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import zstandard

from clawbed import __version__
from clawbed.errors import InputError
from clawbed.files import atomic_write
from clawbed.netns import Ledger
from clawbed.paths import REPO_ROOT, runs_dir
from clawbed.replay.records import CSV_COLUMNS, LoadRecord

MANIFEST = "manifest.json"
RESULTS_JSONL = "results.jsonl"
RESULTS_CSV = "results.csv"
#: Loads run again because the emulator fell behind during them (``LoadRecord.timing_ok``).
LATE_LOADS_JSONL = "late-loads.jsonl"
LOADS_DIR = "loads"
EMULATOR_DIR = "emulator"
LEDGER = "ledger.jsonl"
#: Flat columns of ``results.csv`` (``results.jsonl`` has these and the objects).
#: ``results.csv``'s columns (the record's flat fields).
RESULT_COLUMNS = CSV_COLUMNS
#: Names a run may be given (``--name``): no path separators, nothing hidden.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def default_name() -> str:
    """A run name from the local time, e.g. ``2025-01-31T14-05-09`` (sorts by time)."""
    return time.strftime("%Y-%m-%dT%H-%M-%S")


def check_name(name: str) -> str:
    """``name`` if it can be a run directory's name; otherwise an :class:`InputError` naming ``--name``."""
    if not _NAME.match(name):
        raise InputError(f"--name {name!r}: use letters, digits, '.', '_' or '-' (at most 100, not starting "
                         "with '.' or '-')")
    return name


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _first_line(argv: Sequence[str]) -> str | None:
    """First non-empty output line of ``argv`` (stdout, else stderr), or None if it cannot run."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for text in (proc.stdout, proc.stderr):
        # Debian's chromium wrapper prints shell noise on stderr; the version is on stdout.
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines and proc.returncode == 0:
            return lines[0]
    return None


def versions(emulator_binary: Path) -> dict[str, str | None]:
    """Versions of everything a replay's figures depend on (None: not found)."""
    rustc = shutil.which("rustc") or str(Path.home() / ".cargo" / "bin" / "rustc")
    commit = _first_line(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"])
    dirty = _first_line(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {
        "clawbed": __version__,
        "clawbed_commit": f"{commit}{'+dirty' if dirty else ''}" if commit else None,
        "clawbed_emu": _first_line([str(emulator_binary), "--version"]),
        "kernel": platform.release(),
        "python": platform.python_version(),
        # nginx -v writes to stderr and exits 0.
        "nginx": _first_line(["nginx", "-v"]),
        "chromium": _first_line(["chromium", "--version"]),
        "rustc": _first_line([rustc, "--version"]),
    }


def host_facts() -> dict[str, Any]:
    """What the machine was: name, CPUs, memory, load, the kernel's TCP defaults."""

    def read(path: str) -> str | None:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return None

    cpu_model = None
    for line in (read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem_kib = None
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_mib": mem_kib // 1024 if mem_kib else None,
        "loadavg_1_5_15": read("/proc/loadavg"),
        "root_default_cc": read("/proc/sys/net/ipv4/tcp_congestion_control"),
        "allowed_cc": read("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
    }


def resources_made(ledger_path: Path, run_id: str, roles: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """What a run made, for its manifest's ``made``: its run id (every name it made starts with
    ``cb<run id>``, which tells its resources from another run's), its namespaces and TUNs by
    role (``roles``: ``namespaces`` and ``tuns``, e.g. ``ue0``, ``core``, ``server``), and every
    namespace, link and process its ledger records so far (processes: name, PID, and the
    namespace ``ip netns exec`` started them in)."""
    entries = Ledger(ledger_path).entries()
    processes = []
    for e in entries:
        if e["kind"] != "process":
            continue
        argv = e.get("argv") or []
        netns = argv[3] if argv[:3] == ["ip", "netns", "exec"] and len(argv) > 3 else None
        processes.append({"name": e["name"], "pid": e.get("pid"), "netns": netns})
    return {"run_id": run_id, "prefix": f"cb{run_id}",
            "namespaces": dict(roles.get("namespaces", {})), "tuns": dict(roles.get("tuns", {})),
            "all_namespaces": [e["name"] for e in entries if e["kind"] == "netns"],
            "links": [{"name": e["name"], "netns": e.get("netns")} for e in entries if e["kind"] == "link"],
            "processes": processes}


def describe_made(made: Mapping[str, Any], run_dir: Path) -> str:
    """One line on what a run made: run id, namespaces by role, the PIDs of its processes, and
    how to run a command in its UE (the run named by its name when it is in the runs folder)."""
    run_name = run_dir.name if run_dir.parent == runs_dir().resolve() else str(run_dir)
    namespaces = made.get("namespaces", {})
    roles = ", ".join(f"{role} {name}" for role, name in namespaces.items())
    latest: dict[str, Any] = {}
    for proc in made.get("processes", []):
        latest[proc["name"]] = proc["pid"]  # a process started again (a loader) shows its last PID
    pids = ", ".join(f"{name} {pid}" for name, pid in latest.items())
    return (f"run id {made.get('run_id')} (its names start {made.get('prefix')}); namespaces: {roles}; "
            f"PIDs: {pids or 'none'}; a command in its UE: clawbed exec {run_name} ue -- CMD")


class RunDir:
    """One replay's directory: created empty (an existing non-empty one is refused, so a run
    never mixes its loads with another's), then filled as the run goes."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        if self.path.exists() and any(self.path.iterdir()):
            raise InputError(f"run directory {self.path} already exists and is not empty: "
                             "give another --name (or remove it)")
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / LOADS_DIR).mkdir(exist_ok=True)
        self.manifest: dict[str, Any] = {}

    @property
    def ledger_path(self) -> Path:
        return self.path / LEDGER

    @property
    def emulator_dir(self) -> Path:
        return self.path / EMULATOR_DIR

    def write_manifest(self, **updates: Any) -> None:
        """Merge ``updates`` into the manifest and rewrite it atomically."""
        self.manifest.update(updates)
        with atomic_write(self.path / MANIFEST, "w") as f:
            json.dump(self.manifest, f, indent=2, default=str)
            f.write("\n")

    def load_dir(self, load: int, scheme: str) -> Path:
        """``loads/NNN-<scheme>/`` for load number ``load`` (0-based), created."""
        path = self.path / LOADS_DIR / f"{load:03d}-{scheme}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def append_result(self, record: LoadRecord) -> None:
        """Append one load's record to ``results.jsonl`` and ``results.csv``, each fsynced:
        a Ctrl-C right after keeps it."""
        data = record.to_json()
        _append(self.path / RESULTS_JSONL, json.dumps(data, default=str) + "\n")
        csv_path = self.path / RESULTS_CSV
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=RESULT_COLUMNS, extrasaction="ignore", lineterminator="\n")
        if not csv_path.exists():
            writer.writeheader()
        writer.writerow({k: ("" if data[k] is None else data[k]) for k in RESULT_COLUMNS})
        _append(csv_path, buf.getvalue())

    def append_late(self, record: LoadRecord) -> None:
        """Append a load discarded because the emulator fell behind during it (``timing_ok``
        False, run again) to ``late-loads.jsonl``."""
        _append(self.path / LATE_LOADS_JSONL, json.dumps(record.to_json(), default=str) + "\n")


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> int:
    """Write rows (sequences in ``columns`` order, or mappings) as a CSV file atomically;
    return the number of rows. Floats keep their repr's precision."""
    count = 0
    with atomic_write(path, "w") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            values = [row.get(c) for c in columns] if isinstance(row, Mapping) else row
            writer.writerow(["" if v is None else v for v in values])
            count += 1
    return count


def read_csv(path: Path) -> dict[str, list[str]]:
    """A CSV file as column name → list of its text values (empty dict if the file is absent)."""
    if not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return {}
        columns: dict[str, list[str]] = {name: [] for name in header}
        for row in reader:
            if len(row) != len(header):
                continue  # a row cut short by an interrupted writer
            for name, value in zip(header, row):
                columns[name].append(value)
    return columns


def write_zstd_lines(path: Path, lines: Iterable[bytes]) -> int:
    """Write byte lines (each ending in a newline) into a zstd file atomically; return how many."""
    count = 0
    compressor = zstandard.ZstdCompressor(level=3)
    with atomic_write(path, "wb") as f:
        with compressor.stream_writer(f, closefd=False) as z:
            for line in lines:
                z.write(line)
                count += 1
    return count


def compress_in_place(path: Path) -> Path:
    """Replace ``path`` by ``path.zst`` (zstd, streamed: the emulator's whole-run diag file is
    ~0.8 MB per second of run, ~15x smaller compressed); return the new path."""
    out = path.with_name(path.name + ".zst")
    compressor = zstandard.ZstdCompressor(level=3)
    with path.open("rb") as src, atomic_write(out, "wb") as dst:
        compressor.copy_stream(src, dst)
    path.unlink()
    return out


def read_zstd_lines(path: Path) -> list[bytes]:
    """The lines of a file written by :func:`write_zstd_lines`."""
    with path.open("rb") as f:
        return zstandard.ZstdDecompressor().stream_reader(f).read().splitlines(keepends=True)


def read_results(run_dir: Path) -> list[LoadRecord]:
    """Every load recorded in ``run_dir/results.jsonl``; a last line cut short is skipped, a
    bad line is an :class:`InputError` naming the file and line."""
    path = run_dir / RESULTS_JSONL
    if not path.is_file():
        raise InputError(f"{run_dir}: no {RESULTS_JSONL} (not a replay run directory, or no load finished)")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(keepends=True), start=1):
        if not line.endswith("\n"):
            break
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{number}: not JSON ({e.msg})") from None
        records.append(LoadRecord.from_json(data, f"{path}:{number}"))
    return records

