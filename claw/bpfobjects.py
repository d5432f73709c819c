"""Owned BPF objects shared by CLAW's server and client: a bpffs of the run's own, a pinned tc
program attached to a device, and the BPF object files' build.

Each class creates exactly one thing and its :meth:`close` removes exactly that, in the
style of :mod:`clawbed.netns`; with a ledger, each thing is recorded before it is created,
and :func:`clawbed.netns.cleanup_from_ledger` removes what a killed run left (the ledger
knows how to undo each kind it records: ``bpffs``, ``bpf-pin``, ``tc-filter``):

- :class:`BpffsMount` — a bpffs mounted on a directory of the run's own (mount source and
  directory named ``cb<run id><role>``). Pins live there rather than under ``/sys/fs/bpf``,
  because ``ip netns exec`` remounts ``/sys`` and would hide them from processes in
  namespaces. The server's is ``cb<rid>bp`` (``bq`` for cqic), each UE's ACK marker's
  ``cb<rid>m<ue>``.
- :class:`TcProgram` — a pinned tc program attached as a direct-action ``bpf`` filter on a
  device of a namespace, ingress or egress (a ``clsact`` qdisc is added only if the device
  has none, and removed with the filter then), through libbpf from a thread inside the
  namespace rather than ``tc`` processes (a load's set-up and teardown made six per device).

Users: :mod:`clawbed.claw.server.loader` (the congestion controls, the ACK-flag reader) and
:mod:`clawbed.claw.client.marking` (the UE's ACK marker).

Object files come from ``claw/bpf/build.sh`` alone (``$CLAWBED_BPF_DIR`` or
``<repo>/target/bpf``): provisioning runs it, and nothing compiles at run time.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
from pathlib import Path

from clawbed.netns import Ledger, ResourceError, Resources, unmount_bpffs
from clawbed.paths import REPO_ROOT

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def objects_dir() -> Path:
    """Where ``claw/bpf/build.sh`` puts the objects: ``$CLAWBED_BPF_DIR`` or ``<repo>/target/bpf``."""
    return Path(os.environ.get("CLAWBED_BPF_DIR", REPO_ROOT / "target" / "bpf"))


def build_command(out_dir: Path | None = None) -> list[str]:
    """The command that builds every CLAW BPF object into ``out_dir`` (the one build path)."""
    return ["bash", str(REPO_ROOT / "claw" / "bpf" / "build.sh"), str(out_dir or objects_dir())]


def object_path(name: str, obj_dir: Path | None = None) -> Path:
    """The built object ``name`` (e.g. ``ack_mark_egress.bpf.o``); a clear error when it is
    missing (``claw/bpf/build.sh`` has not run)."""
    path = (obj_dir or objects_dir()) / name
    if not path.is_file():
        raise ResourceError(f"BPF object {path} is missing: build it with `{' '.join(build_command(obj_dir))}` "
                            "(scripts/provision.sh does)")
    return path


def record(ledger: Ledger | None, kind: str, name: str, **extra: object) -> None:
    """Record a thing about to be created in ``ledger`` (none: nothing to record)."""
    if ledger is not None:
        ledger.record(kind, name, **extra)


class BpffsMount:
    """A bpffs mounted at ``path`` (created if missing, removed again if we created it)."""

    def __init__(self, path: Path, source: str, *, ledger: Ledger | None = None) -> None:
        if not source.startswith("cb"):
            raise ValueError(f"bpffs source name {source!r} must start with 'cb'")
        self.path = Path(path).resolve()
        self.source = source
        if os.path.ismount(self.path):
            raise ResourceError(f"mounting a bpffs ({source}) on {self.path}: something is already mounted there")
        self._made_dir = not self.path.exists()
        record(ledger, "bpffs", source, path=str(self.path))
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ResourceError(f"creating bpffs mount point {self.path}: {e.strerror}") from e
        if _libc.mount(source.encode(), os.fsencode(str(self.path)), b"bpf", 0, b"mode=0700") != 0:
            err = ctypes.get_errno()
            self._remove_dir()
            raise ResourceError(f"mounting a bpffs ({source}) on {self.path}: {os.strerror(err)}")
        self._closed = False

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def _remove_dir(self) -> None:
        if self._made_dir:
            with contextlib.suppress(OSError):
                self.path.rmdir()

    def close(self) -> None:
        """Unmount (dropping any pin still in it) and remove the directory if we made it."""
        if self._closed:
            return
        self._closed = True
        unmount_bpffs(self.path)
        self._remove_dir()


def mount_bpffs(res: Resources, parent: Path, role: str = "bp") -> BpffsMount:
    """A bpffs named ``cb<run id><role>``, mounted on ``parent/cb<run id><role>``, for the
    life of ``res``."""
    name = res.name(role)
    mount = BpffsMount(Path(parent) / name, name, ledger=res.ledger)
    res.callback(mount.close)
    return mount


class TcProgram:
    """A pinned tc program as a direct-action filter on ``device`` in namespace ``netns``
    (its name), ingress or egress; ``close`` deletes the filter (and the ``clsact`` qdisc if
    it added it), and is fine with a device or namespace that already went (the emulator
    removes its TUNs). Attached and removed through libbpf's netlink calls from a thread
    inside the namespace (:func:`~clawbed.netns.in_netns`), not by ``tc``
    processes; the ledger entry is the one ``tc`` undoes after a crash."""

    def __init__(self, netns: str, device: str, prog_pin: Path, *, direction: str, pref: int,
                 ledger: Ledger | None = None) -> None:
        if direction not in ("ingress", "egress"):
            raise ValueError(f"tc direction must be ingress or egress, not {direction!r}")
        from clawbed.claw.server import bpfmap, libbpf
        from clawbed.netns import in_netns

        self.netns, self.device, self.direction, self.pref = netns, device, direction, pref
        self._point = libbpf.TC_INGRESS if direction == "ingress" else libbpf.TC_EGRESS
        self._added_qdisc = False
        self._closed = True
        what = f"tc {direction} filter pref {pref} on {device}"

        def attach() -> None:
            ifindex = socket.if_nametoindex(device)
            # The entry says whether the qdisc is ours to remove, so it is looked for first.
            record(ledger, "tc-filter", device, netns=netns, direction=direction, pref=pref,
                   qdisc=not libbpf.tc_has_clsact(ifindex, pref))
            fd = bpfmap.obj_get(prog_pin)
            try:
                self._handle, self._added_qdisc = libbpf.tc_attach(ifindex, self._point, fd, pref, what)
            finally:
                os.close(fd)
            self._ifindex = ifindex
            self._closed = False

        in_netns(netns, f"attaching {prog_pin} as {what}", attach)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not os.path.exists(f"/var/run/netns/{self.netns}"):
            return  # the namespace went, and the device with it
        from clawbed.claw.server import libbpf
        from clawbed.netns import in_netns

        def detach() -> None:
            try:
                if socket.if_nametoindex(self.device) != self._ifindex:
                    return  # the device went (a new one of that name is not ours)
            except OSError:
                return
            libbpf.tc_detach(self._ifindex, self._point, self._handle, self.pref)
            if self._added_qdisc:
                libbpf.tc_remove_qdisc(self._ifindex)

        in_netns(self.netns, f"removing tc {self.direction} filter pref {self.pref} on {self.device}", detach)


#: ``ioctl`` that reads a device's hardware address, whose family is its ARPHRD link type.
_SIOCGIFHWADDR = 0x8927


def device_l2_len(netns: str, device: str) -> int:
    """Bytes before the IPv4 header on ``device`` of namespace ``netns``: 14 with an
    Ethernet header (veth, loopback), 0 without (TUN); from the device's ARPHRD type (read
    with an ``ioctl`` from a thread inside the namespace, no process)."""
    from clawbed.netns import in_netns

    def link_type() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            ifreq = fcntl.ioctl(s, _SIOCGIFHWADDR, struct.pack("16s16x", device.encode()))
        return int(struct.unpack_from("H", ifreq, 16)[0])

    arphrd = in_netns(netns, f"reading the link type of device {device}", link_type)
    if arphrd in (1, 772):  # ARPHRD_ETHER, ARPHRD_LOOPBACK
        return 14
    if arphrd == 65534:  # ARPHRD_NONE (TUN)
        return 0
    raise ResourceError(f"device {device} in {netns} has link type {arphrd}: CLAW's tc programs "
                        "handle Ethernet and TUN (no link-layer header) devices")
