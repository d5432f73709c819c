"""The UE side of CLAW's loss flags: ``claw/bpf/ack_mark_egress.bpf.c`` on the egress of the
UE's device, and the map through which the client tells it about loss events.

:class:`AckMarker` is an owned resource: it builds the object if needed, mounts a bpffs of
the run's own (``<run dir>/cb<run id>mk``, mount source named the same), loads and pins the
program and its maps there with ``bpftool``, adds a ``clsact`` qdisc (unless the device
already has one) and a direct-action ``bpf`` filter on the device's egress inside the UE
namespace, and writes the map's configuration (the RTT window, the device's link-layer
header length). :meth:`AckMarker.close` removes exactly that — the filter, the qdisc if it
made it, the pins, the mount and its directory — also when the device already vanished
(the emulator removes its TUN when it stops).

:class:`AckMarkMap` only writes into a marker loaded by someone else (its pinned config map).

Map value layout (``struct ack_mark_config`` of the C source, native byte order)::

    u64 wireless_event_ns   u64 overflow_event_ns   u64 window_ns   u32 l2_len   u32 reserved

Compile command (what :func:`build_object` runs; ``claw/bpf/build.sh`` gives the same object):

    clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -Wall -Werror -I/usr/include/x86_64-linux-gnu \\
          -Iclaw/bpf -c claw/bpf/ack_mark_egress.bpf.c -o target/bpf/ack_mark_egress.bpf.o
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from clawbed.netns import IFNAME_MAX, PREFIX, Resources, ResourceError
from clawbed.paths import REPO_ROOT

from clawbed.claw.client.feed import LossKind

SOURCE = REPO_ROOT / "claw" / "bpf" / "ack_mark_egress.bpf.c"
BUILD_DIR = REPO_ROOT / "target" / "bpf"
OBJECT_NAME = "ack_mark_egress.bpf.o"
CFLAGS = ("-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", "-Wall", "-Werror",
          "-I/usr/include/x86_64-linux-gnu")
CONFIG_MAP = "ack_mark_cfg"
STATS_MAP = "ack_mark_stats"
#: tc filter preference of the marker (any fixed value: it names the filter to delete).
FILTER_PREF = 49152

_CONFIG = struct.Struct("=QQQII")
_STATS = struct.Struct("=QQQQ")
_KEY0 = struct.pack("=I", 0)
#: Bytes before the IPv4 header, by ``ip -j link`` ``link_type``.
_L2_LEN = {"none": 0, "ether": 14}


class MarkerError(ResourceError):
    """Building, loading, attaching or detaching the ACK marker failed; says which step."""


def _run(argv: list[str], what: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MarkerError(f"{what}: {' '.join(argv)}: {e}") from e
    if check and proc.returncode != 0:
        raise MarkerError(f"{what}: `{' '.join(argv)}` exited {proc.returncode}: "
                          f"{(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc


def build_object(out_dir: Path = BUILD_DIR, *, source: Path = SOURCE) -> Path:
    """Compile the program into ``out_dir`` unless the object is newer than its source."""
    obj = out_dir / OBJECT_NAME
    if obj.exists() and obj.stat().st_mtime >= source.stat().st_mtime:
        return obj
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{OBJECT_NAME}.{os.getpid()}.tmp"
    try:
        _run(["clang", *CFLAGS, f"-I{source.parent}", "-c", str(source), "-o", str(tmp)],
             f"compiling {source.name}")
        tmp.replace(obj)  # atomic: a concurrent build never sees half an object
    finally:
        tmp.unlink(missing_ok=True)
    return obj


@dataclass(frozen=True)
class MarkStats:
    """The program's counters."""

    acks_seen: int
    marked_wireless: int
    marked_overflow: int
    rewrite_errors: int


class AckMarkMap:
    """The config (and, if given, stats) map of a loaded marker, opened from their pins."""

    def __init__(self, config_map: Path | str, stats_map: Path | str | None = None) -> None:
        from clawbed.claw.server.bpfmap import BpfMap  # the project's one bpf(2) wrapper

        self._cfg = BpfMap.open_pinned(config_map)
        # Not read_only: claw/server/bpfmap.py passes file_flags 1 for it, which the kernel refuses.
        self._stats = BpfMap.open_pinned(stats_map) if stats_map else None
        if self._cfg.value_size != _CONFIG.size:
            self._close_maps()
            raise MarkerError(f"{config_map}: value of {self._cfg.value_size} bytes, expected {_CONFIG.size} "
                              "(not an ack_mark_egress config map, or an older build)")
        #: Events written (both kinds).
        self.events_written = 0

    def _set(self, updates: dict[int, int]) -> None:
        """Rewrite fields (by index in the struct) keeping the others as the map holds them,
        so two writers (the daemon, a test injecting an event) do not undo each other."""
        current = self._cfg.lookup(_KEY0)
        value = list(_CONFIG.unpack(current)) if current else [0] * 5
        for i, v in updates.items():
            value[i] = v
        self._cfg.update(_KEY0, _CONFIG.pack(*value))

    def note_event(self, kind: LossKind, at_monotonic_ns: int) -> None:
        """A loss event of ``kind`` at ``at_monotonic_ns`` (CLOCK_MONOTONIC): ACKs sent
        within one window after it get the kind's flag."""
        self._set({0 if kind is LossKind.WIRELESS else 1: max(int(at_monotonic_ns), 1)})
        self.events_written += 1

    def set_window_ms(self, window_ms: int) -> None:
        """How long after an event ACKs are flagged (one RTT), ms."""
        self._set({2: max(int(window_ms), 1) * 1_000_000})

    def set_l2_len(self, l2_len: int) -> None:
        """Bytes before the IPv4 header on the device (0 on a TUN, 14 on Ethernet)."""
        self._set({3: l2_len})

    def stats(self) -> MarkStats:
        if self._stats is None:
            raise MarkerError("this marker map was opened without its stats map")
        value = self._stats.lookup(_KEY0)
        return MarkStats(*_STATS.unpack(value)) if value else MarkStats(0, 0, 0, 0)

    def _close_maps(self) -> None:
        for m in (self._cfg, self._stats):
            if m is not None:
                m.close()

    def close(self) -> None:
        self._close_maps()

    def __enter__(self) -> "AckMarkMap":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AckMarker(AckMarkMap):
    """The marker loaded and attached on ``dev`` in namespace ``netns`` (see the module
    docstring); a context manager. With ``res``, its mount is recorded in the run's ledger
    and :meth:`close` is registered on the stack."""

    def __init__(self, *, netns: str, dev: str, run_id: str, run_dir: Path | str, role: str = "mk",
                 res: Resources | None = None, obj: Path | None = None) -> None:
        self.netns = netns
        self.dev = dev
        self.name = f"{PREFIX}{run_id}{role}"
        if len(self.name) > IFNAME_MAX:
            raise ValueError(f"marker name {self.name!r} is longer than {IFNAME_MAX} characters")
        self.bpffs = Path(run_dir).resolve() / self.name
        self.prog_pin = self.bpffs / "prog"
        self.maps_dir = self.bpffs / "maps"
        self._mounted = False
        self._made_dir = False
        self._made_qdisc = False
        self._attached = False
        self._opened = False
        obj = obj or build_object()
        try:
            l2_len = self._l2_len()
            self._mount(res)
            _run(["bpftool", "prog", "load", str(obj), str(self.prog_pin), "type", "classifier",
                  "pinmaps", str(self.maps_dir)], f"loading {obj.name}")
            super().__init__(self.maps_dir / CONFIG_MAP, self.maps_dir / STATS_MAP)
            self._opened = True
            self._set({2: 100 * 1_000_000, 3: l2_len})
            self._attach()
        except BaseException:
            self.close()
            raise
        if res is not None:
            res.callback(self.close)

    def _tc(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(["tc", "-n", self.netns, *args], f"tc in namespace {self.netns}", check=check)

    def _l2_len(self) -> int:
        proc = _run(["ip", "-n", self.netns, "-j", "link", "show", "dev", self.dev],
                    f"looking up device {self.dev} in namespace {self.netns}")
        link_type = json.loads(proc.stdout)[0].get("link_type")
        if link_type not in _L2_LEN:
            raise MarkerError(f"device {self.dev} in {self.netns} has link type {link_type!r}; "
                              f"the marker handles {sorted(_L2_LEN)}")
        return _L2_LEN[link_type]

    def _mount(self, res: Resources | None) -> None:
        if self.bpffs.exists():
            raise MarkerError(f"{self.bpffs} already exists: another marker of this run (use another role)")
        self.bpffs.parent.mkdir(parents=True, exist_ok=True)
        self.bpffs.mkdir()
        self._made_dir = True
        if res is not None:
            res.ledger.record("bpffs", self.name, path=str(self.bpffs))
        _run(["mount", "-t", "bpf", self.name, str(self.bpffs)], f"mounting a bpffs at {self.bpffs}")
        self._mounted = True

    def _attach(self) -> None:
        shown = self._tc("-j", "qdisc", "show", "dev", self.dev)
        if not any(q.get("kind") == "clsact" for q in json.loads(shown.stdout or "[]")):
            self._tc("qdisc", "add", "dev", self.dev, "clsact")
            self._made_qdisc = True
        self._tc("filter", "add", "dev", self.dev, "egress", "pref", str(FILTER_PREF), "handle", "1",
                 "bpf", "direct-action", "object-pinned", str(self.prog_pin))
        self._attached = True

    def close(self) -> None:
        """Detach and unload (idempotent); a device that is already gone is fine."""
        problems = []
        if self._attached:
            self._attached = False
            proc = self._tc("filter", "del", "dev", self.dev, "egress", "pref", str(FILTER_PREF), check=False)
            if proc.returncode != 0 and not _device_gone(proc.stderr):
                problems.append(f"deleting the egress filter on {self.dev}: {proc.stderr.strip()}")
        if self._made_qdisc:
            self._made_qdisc = False
            proc = self._tc("qdisc", "del", "dev", self.dev, "clsact", check=False)
            if proc.returncode != 0 and not _device_gone(proc.stderr):
                problems.append(f"deleting the clsact qdisc on {self.dev}: {proc.stderr.strip()}")
        if self._opened:
            self._opened = False
            self._close_maps()
        if self._mounted:
            # Unmounting a bpffs drops its pins; the program lives on only while attached.
            proc = _run(["umount", str(self.bpffs)], "unmounting the marker's bpffs", check=False)
            if proc.returncode != 0:
                time.sleep(0.1)
                proc = _run(["umount", str(self.bpffs)], "unmounting the marker's bpffs", check=False)
            if proc.returncode == 0:
                self._mounted = False
            else:
                problems.append(f"unmounting {self.bpffs}: {proc.stderr.strip()}")
        if self._made_dir and not self._mounted:
            self._made_dir = False
            with contextlib.suppress(FileNotFoundError):
                self.bpffs.rmdir()
        if problems:
            raise MarkerError("; ".join(problems))

    def __enter__(self) -> "AckMarker":
        return self


def _device_gone(stderr: str) -> bool:
    text = stderr.lower()
    return "cannot find device" in text or "no such device" in text or "invalid netns" in text \
        or "no such file" in text
