"""The UE side of CLAW's loss flags: ``claw/bpf/ack_mark_egress.bpf.c`` on the egress of the
UE's device, and the map through which the client tells it about loss events.

:class:`AckMarker` is an owned resource made of the shared owned BPF objects of
:mod:`clawbed.claw.bpfobjects` (the server's loader uses the same): a bpffs of the run's own
named for the UE (``<run dir>/cb<run id>m<ue id>``, mount source named the same, so two
UEs' markers never collide), the program loaded with libbpf and pinned there with its two
maps, a :class:`~clawbed.claw.bpfobjects.TcProgram` on the device's egress inside the UE
namespace, and the map's configuration (the RTT window, the device's link-layer header
length). With a ledger, the mount and the filter are recorded before they are made, so
``clawbed cleanup`` removes what a killed client left. :meth:`AckMarker.close` removes
exactly what it made, also when the device already vanished (the emulator removes its TUN
when it stops).

:class:`AckMarkMap` only writes into a marker loaded by someone else (its pinned config map).

Map value layout (``struct ack_mark_config`` of the C source, native byte order)::

    u64 wireless_event_ns   u64 overflow_event_ns   u64 window_ns   u32 l2_len   u32 reserved

The object is built by ``claw/bpf/build.sh`` (the one build path; provisioning runs it):
nothing is compiled at run time.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clawbed.claw.bpfobjects import BpffsMount, TcProgram, device_l2_len, object_path
from clawbed.claw.server import bpfmap
from clawbed.claw.server.bpfmap import BpfMap
from clawbed.claw.server.libbpf import BpfObject
from clawbed.netns import Ledger, ResourceError, resource_name

if TYPE_CHECKING:  # the feed decoder's import of numpy would slow every client's start
    from clawbed.claw.client.feed import LossKind

OBJECT_NAME = "ack_mark_egress.bpf.o"
PROGRAM = "ack_mark_egress"
CONFIG_MAP = "ack_mark_cfg"
STATS_MAP = "ack_mark_stats"
#: tc filter preference of the marker (any fixed value: it names the filter to delete).
FILTER_PREF = 49152
#: The window before the first echo, ns (the client's default T).
DEFAULT_WINDOW_NS = 100 * 1_000_000

_CONFIG = struct.Struct("=QQQII")
_STATS = struct.Struct("=QQQQ")
_KEY0 = struct.pack("=I", 0)


class MarkerError(ResourceError):
    """The marker's maps are not what this module expects; says which and why."""


def marker_name(run_id: str, ue_id: int) -> str:
    """``cb<run id>m<ue id>``: the name of UE ``ue_id``'s marker bpffs (mount and directory)."""
    return resource_name(run_id, f"m{ue_id}")


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
        self._cfg = BpfMap.open_pinned(config_map)
        # Not read_only: claw/server/bpfmap.py passes file_flags 1 for it, which the kernel refuses.
        self._stats = BpfMap.open_pinned(stats_map) if stats_map else None
        if self._cfg.value_size != _CONFIG.size:
            self._close_maps()
            raise MarkerError(f"{config_map}: value of {self._cfg.value_size} bytes, expected {_CONFIG.size} "
                              "(not an ack_mark_egress config map, or an older build)")
        #: Events written (both kinds).
        self.events_written = 0

    def _set(self, updates: dict[int, int], keep_larger: bool = False) -> None:
        """Rewrite fields (by index in the struct) keeping the others as the map holds them,
        so two writers (the daemon, a test injecting an event) do not undo each other; with
        ``keep_larger``, a field already holding more is left as it is."""
        current = self._cfg.lookup(_KEY0)
        value = list(_CONFIG.unpack(current)) if current else [0] * 5
        for i, v in updates.items():
            value[i] = max(v, value[i]) if keep_larger else v
        self._cfg.update(_KEY0, _CONFIG.pack(*value))

    def note_event(self, kind: LossKind, at_monotonic_ns: int) -> None:
        """A loss event of ``kind`` at ``at_monotonic_ns`` (CLOCK_MONOTONIC): ACKs sent
        within one window after it get the kind's flag."""
        # The latest event wins: an earlier one written late (behind another writer's, e.g. a
        # test's injected event set ahead of time) must not cut the later one's window.
        self._set({0 if kind.value == "rlc-loss" else 1: max(int(at_monotonic_ns), 1)}, keep_larger=True)
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

    def __enter__(self) -> AckMarkMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AckMarker(AckMarkMap):
    """UE ``ue_id``'s marker loaded and attached on ``dev`` in namespace ``netns`` (see the
    module docstring); a context manager. With ``ledger`` (the run's), its bpffs and tc
    filter are recorded there before they are made."""

    def __init__(self, *, netns: str, dev: str, run_id: str, run_dir: Path | str, ue_id: int,
                 ledger: Ledger | None = None, obj_dir: Path | None = None) -> None:
        self.netns = netns
        self.dev = dev
        self.name = marker_name(run_id, ue_id)
        self._stack = contextlib.ExitStack()
        try:
            obj_path = object_path(OBJECT_NAME, obj_dir)
            l2_len = device_l2_len(netns, dev)
            self.bpffs = BpffsMount(Path(run_dir) / self.name, self.name, ledger=ledger)
            self._stack.callback(self.bpffs.close)  # unmounting drops the pins below
            self.prog_pin = self.bpffs / "prog"
            self.config_pin, self.stats_pin = self.bpffs / CONFIG_MAP, self.bpffs / STATS_MAP
            with BpfObject(obj_path) as obj:
                obj.set_pin_path(CONFIG_MAP, self.config_pin)  # libbpf pins them as it loads
                obj.set_pin_path(STATS_MAP, self.stats_pin)
                obj.load()
                bpfmap.obj_pin(obj.prog_fd(PROGRAM), self.prog_pin)
            super().__init__(self.config_pin, self.stats_pin)
            self._stack.callback(self._close_maps)
            self._set({2: DEFAULT_WINDOW_NS, 3: l2_len})
            tc = TcProgram(netns, dev, self.prog_pin, direction="egress", pref=FILTER_PREF, ledger=ledger)
            self._stack.callback(tc.close)
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        """Detach, close the maps, unmount (idempotent); a device that is already gone is fine."""
        self._stack.close()

    def __enter__(self) -> AckMarker:
        return self
