"""Owned BPF objects of the CLAW server: a bpffs, the congestion controls, the ACK-flag reader.

Each class creates exactly one thing and its :meth:`close` removes exactly that, in the
style of :mod:`clawbed.netns`; the ``Resources`` helpers at the bottom record each thing in
the run's ledger before creating it and push its ``close`` on the stack:

- :class:`BpffsMount` — a bpffs mounted on a directory of the run's own (mount source
  and directory both named ``cb<run id>bp``). Pins live there rather than under ``/sys/fs/bpf``, because
  ``ip netns exec`` remounts ``/sys`` and would hide them from processes in namespaces.
- :class:`CongestionControl` — ``claw`` or ``cqic`` (``claw/bpf/claw_cc.bpf.c``), registered
  through a struct_ops *link* pinned in the bpffs: removing that pin unregisters it, so even
  a run killed with SIGKILL leaves nothing registered once its bpffs is unmounted. The
  shared maps (``claw_peers``, ``claw_flows``, ``claw_ack_flags``) are pinned beside it; the
  first object to load creates them, later ones reuse them, and each removes only the pins
  it created.
- :class:`TcProgram` — a pinned tc program attached as a direct-action ``bpf`` filter on a
  device in a namespace (a ``clsact`` qdisc is added only if the device has none).
- :class:`AckFlagsIngress` — ``claw/bpf/ack_flags_ingress.bpf.c`` loaded, pinned and attached
  with a :class:`TcProgram` on the server's device towards the UEs.

Object files come from ``claw/bpf/build.sh`` (``$CLAWBED_BPF_DIR`` or ``<repo>/target/bpf``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Sequence

from clawbed.netns import Ledger, Namespace, ResourceError, Resources, register_cleanup
from clawbed.paths import REPO_ROOT
from clawbed.claw.server import bpfmap
from clawbed.claw.server.bpfmap import BpfError, BpfMap
from clawbed.claw.server.libbpf import BpfObject
from clawbed.claw.server.maps import ACK_FLAGS_MAP, FLOWS_MAP, SHARED_MAPS, FlowKey, FlowStats

log = logging.getLogger(__name__)

#: The congestion controls built from ``claw_cc.bpf.c`` (object ``<variant>_cc.bpf.o``).
VARIANTS = ("claw", "cqic")
BPF_FS_MAGIC = 0xCAFE4A11
AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
#: What a namespace default goes back to when it was ours and nothing else is known: reno is
#: the one CC every namespace may always default to (the kernel marks it non-restricted).
FALLBACK_CC = "reno"
#: tc filter priority of CLAW's programs (any fixed value: we delete by it).
TC_PREF = 0xC1A

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def objects_dir() -> Path:
    """Where ``claw/bpf/build.sh`` puts the objects: ``$CLAWBED_BPF_DIR`` or ``<repo>/target/bpf``."""
    return Path(os.environ.get("CLAWBED_BPF_DIR", REPO_ROOT / "target" / "bpf"))


def build_command(out_dir: Path | None = None) -> list[str]:
    """The command that builds every CLAW BPF object into ``out_dir``."""
    return ["bash", str(REPO_ROOT / "claw" / "bpf" / "build.sh"), str(out_dir or objects_dir())]


def available_congestion_controls() -> list[str]:
    """The kernel's registered congestion controls (one list for every namespace)."""
    return AVAILABLE_CC.read_text().split()


def _statfs_type(path: Path) -> int:
    buf = ctypes.create_string_buffer(120)  # struct statfs; f_type is its first long
    if _libc.statfs(os.fsencode(str(path)), buf) != 0:
        err = ctypes.get_errno()
        raise ResourceError(f"statfs {path}: {os.strerror(err)}")
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def _unlink_pin(path: Path) -> bool:
    """Remove a pin; False when it was already gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as e:
        raise ResourceError(f"removing BPF pin {path}: {e.strerror}") from e


def _record(ledger: Ledger | None, kind: str, name: str, **extra: object) -> None:
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
        _record(ledger, "bpffs", source, path=str(self.path))
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


def unmount_bpffs(path: Path) -> bool:
    """Unmount the bpffs at ``path`` if one is mounted there; True when one was."""
    try:
        if not os.path.ismount(path) or _statfs_type(path) != BPF_FS_MAGIC:
            return False
    except ResourceError:
        return False
    if _libc.umount2(os.fsencode(str(path)), 0) != 0:
        err = ctypes.get_errno()
        raise ResourceError(f"unmounting the bpffs on {path}: {os.strerror(err)}")
    return True


class _SharedPins:
    """Point an object's shared maps at the bpffs; remember which pins this load created."""

    def __init__(self, bpffs: BpffsMount, ledger: Ledger | None) -> None:
        self.bpffs = bpffs
        self.ledger = ledger
        self.created: list[Path] = []
        self._candidates: list[Path] = []

    def attach(self, obj: BpfObject, names: Sequence[str]) -> None:
        for name in names:
            if not obj.has_map(name):
                continue
            pin = self.bpffs / name
            obj.set_pin_path(name, pin)
            if not pin.exists():
                _record(self.ledger, "bpf-pin", str(pin))
                self._candidates.append(pin)

    def loaded(self) -> None:
        # A pin that did not exist before the load and exists now was made by this load.
        self.created = [p for p in self._candidates if p.exists()]

    def remove(self) -> None:
        for pin in reversed(self.created):
            _unlink_pin(pin)
        self.created = []


class CongestionControl:
    """The ``claw`` or ``cqic`` congestion control, registered while this object is open.

    ``close`` moves every namespace default that :meth:`set_namespace_default` set (and the
    root namespace's, should it name us) off it, unregisters it by removing its link pin,
    waits until the kernel no longer lists it, and removes the map pins its load created.
    """

    def __init__(self, bpffs: BpffsMount, variant: str = "claw", *, ledger: Ledger | None = None,
                 obj_dir: Path | None = None, register_timeout_s: float = 5.0) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown CLAW variant {variant!r}; one of {', '.join(VARIANTS)}")
        self.name = variant
        self.bpffs = bpffs
        self.ledger = ledger
        self.timeout_s = register_timeout_s
        self.link_pin = bpffs / f"{variant}_link"
        self._defaults: list[tuple[Namespace, str]] = []
        self._closed = True
        if variant in available_congestion_controls():
            raise ResourceError(
                f"registering congestion control {variant}: one of that name is already registered "
                f"(another run, or a leftover: bpftool struct_ops list)")
        obj_path = (obj_dir or objects_dir()) / f"{variant}_cc.bpf.o"
        self._pins = _SharedPins(bpffs, ledger)
        with BpfObject(obj_path) as obj:
            self._pins.attach(obj, SHARED_MAPS)
            obj.add_map_flags(variant, bpfmap.BPF_F_LINK)
            try:
                obj.load()
            finally:
                self._pins.loaded()
            try:
                obj.prepare_struct_ops(variant)
                self.struct_ops_id = bpfmap.map_info(obj.map_fd(variant)).map_id
                _record(ledger, "struct_ops", variant, pin=str(self.link_pin), map_id=self.struct_ops_id)
                link_fd = bpfmap.link_create_struct_ops(obj.map_fd(variant))
                try:
                    bpfmap.obj_pin(link_fd, self.link_pin)
                finally:
                    os.close(link_fd)
            except BaseException:
                self._pins.remove()
                raise
        self._closed = False
        if variant not in available_congestion_controls():
            self.close()
            raise ResourceError(f"registering congestion control {variant}: the link was made but "
                                f"{AVAILABLE_CC} does not list it")

    def set_namespace_default(self, ns: Namespace) -> None:
        """Make this CC the default of ``ns`` (allowed: it is ``TCP_CONG_NON_RESTRICTED``);
        ``close`` puts the previous default back first."""
        key = "net.ipv4.tcp_congestion_control"
        previous = ns.run(["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip()
        _record(self.ledger, "cc-default", ns.name, cc=self.name, previous=previous)
        self._defaults.append((ns, previous if previous != self.name else FALLBACK_CC))
        ns.sysctl(key, self.name)

    def _move_defaults_off(self) -> None:
        for ns, previous in reversed(self._defaults):
            try:
                current = ns.run(["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip()
            except ResourceError:
                continue  # the namespace is gone, and its default with it
            if current == self.name:
                ns.sysctl("net.ipv4.tcp_congestion_control", previous)
        self._defaults = []
        root = Path("/proc/sys/net/ipv4/tcp_congestion_control")
        if root.read_text().strip() == self.name:
            log.warning("the root namespace's default congestion control was %s; setting it to %s "
                        "before unregistering", self.name, FALLBACK_CC)
            root.write_text(FALLBACK_CC)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._move_defaults_off()
        _unlink_pin(self.link_pin)
        deadline = time.monotonic() + self.timeout_s
        while self.name in available_congestion_controls():
            if time.monotonic() > deadline:
                raise ResourceError(f"unregistering congestion control {self.name}: still listed in "
                                    f"{AVAILABLE_CC} {self.timeout_s} s after its link was removed")
            time.sleep(0.01)
        self._pins.remove()
        # The kernel frees the struct_ops map after an RCU grace period, or once the last
        # socket using the CC closes; wait briefly so that a caller listing struct_ops next
        # sees it gone, but only warn: sockets of the run may still be closing.
        while struct_ops_map_exists(self.struct_ops_id, self.name):
            if time.monotonic() > deadline:
                log.warning("struct_ops map %s (id %d) is still held after unregistering, by sockets "
                            "that still use it; it goes when they close", self.name, self.struct_ops_id)
                break
            time.sleep(0.02)


def struct_ops_map_exists(map_id: int, name: str) -> bool:
    """True while the kernel still has struct_ops map ``map_id`` named ``name``."""
    try:
        fd = bpfmap.map_fd_by_id(map_id)
    except BpfError:
        return False
    try:
        info = bpfmap.map_info(fd)
        return info.map_type == bpfmap.BPF_MAP_TYPE_STRUCT_OPS and info.name == name
    finally:
        os.close(fd)


class TcProgram:
    """A pinned tc program as a direct-action filter on ``device`` in ``ns``; ``close`` deletes
    the filter (and the ``clsact`` qdisc if it added it)."""

    def __init__(self, ns: Namespace, device: str, prog_pin: Path, *, direction: str = "ingress",
                 pref: int = TC_PREF, ledger: Ledger | None = None) -> None:
        if direction not in ("ingress", "egress"):
            raise ValueError(f"tc direction must be ingress or egress, not {direction!r}")
        self.ns, self.device, self.direction, self.pref = ns, device, direction, pref
        qdiscs = ns.run(["tc", "qdisc", "show", "dev", device]).stdout
        self._added_qdisc = "clsact" not in qdiscs
        _record(ledger, "tc-filter", device, netns=ns.name, direction=direction, pref=pref,
                qdisc=self._added_qdisc)
        if self._added_qdisc:
            ns.run(["tc", "qdisc", "add", "dev", device, "clsact"])
        self._closed = False
        try:
            ns.run(["tc", "filter", "add", "dev", device, direction, "pref", str(pref),
                    "bpf", "object-pinned", str(prog_pin), "direct-action"])
        except ResourceError:
            self.close()
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        remove_tc_filter(self.ns.name, self.device, self.direction, self.pref, self._added_qdisc)


def remove_tc_filter(netns_name: str, device: str, direction: str, pref: int, qdisc: bool) -> bool:
    """Delete our filter (and the qdisc if we added it); False when the device is gone."""
    ns_cmd = ["ip", "netns", "exec", netns_name]

    def tc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*ns_cmd, "tc", *args], capture_output=True, text=True, timeout=30)

    probe = tc("qdisc", "show", "dev", device)
    if probe.returncode != 0 or "clsact" not in probe.stdout:
        return False  # namespace, device or qdisc gone: the filter went with it
    done = tc("filter", "del", "dev", device, direction, "pref", str(pref))
    if done.returncode != 0 and "Cannot find" not in done.stderr:
        raise ResourceError(f"in namespace {netns_name}: deleting tc {direction} filter pref {pref} on "
                            f"{device}: {done.stderr.strip()}")
    if qdisc:
        done = tc("qdisc", "del", "dev", device, "clsact")
        if done.returncode != 0 and "Cannot find" not in done.stderr:
            raise ResourceError(f"in namespace {netns_name}: deleting the clsact qdisc of {device}: "
                                f"{done.stderr.strip()}")
    return True


def device_l2_kind(ns: Namespace, device: str) -> str:
    """``"eth"`` for a device with an Ethernet header (veth, loopback), ``"l3"`` for one
    without (TUN); from the device's ARPHRD type."""
    arphrd = int(ns.run(["cat", f"/sys/class/net/{device}/type"]).stdout.strip())
    if arphrd in (1, 772):  # ARPHRD_ETHER, ARPHRD_LOOPBACK
        return "eth"
    if arphrd == 65534:  # ARPHRD_NONE (TUN)
        return "l3"
    raise ResourceError(f"device {device} in {ns.name} has link type {arphrd}: CLAW's tc programs "
                        "handle Ethernet and TUN (no link-layer header) devices")


class AckFlagsIngress:
    """The server's ACK-flag reader on ``device`` in ``ns``: loaded, pinned, attached."""

    def __init__(self, bpffs: BpffsMount, ns: Namespace, device: str, *, ledger: Ledger | None = None,
                 obj_dir: Path | None = None) -> None:
        kind = device_l2_kind(ns, device)
        prog = f"claw_ack_flags_{kind}"
        other = "claw_ack_flags_l3" if kind == "eth" else "claw_ack_flags_eth"
        self.prog_pin = bpffs / f"ack_flags_{ns.name}_{device}"
        self._pins = _SharedPins(bpffs, ledger)
        self._closed = True
        with BpfObject((obj_dir or objects_dir()) / "ack_flags_ingress.bpf.o") as obj:
            self._pins.attach(obj, [ACK_FLAGS_MAP])
            obj.set_autoload(other, False)
            try:
                obj.load()
            finally:
                self._pins.loaded()
            try:
                _record(ledger, "bpf-pin", str(self.prog_pin))
                bpfmap.obj_pin(obj.prog_fd(prog), self.prog_pin)
            except BaseException:
                self._pins.remove()
                raise
        self._closed = False
        try:
            self.tc = TcProgram(ns, device, self.prog_pin, direction="ingress", ledger=ledger)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tc = getattr(self, "tc", None)
        if tc is not None:
            tc.close()
        _unlink_pin(self.prog_pin)
        self._pins.remove()


def open_map(bpffs_dir: Path, name: str) -> BpfMap:
    """A shared CLAW map (``claw_peers``, ``claw_flows``, ``claw_ack_flags``) from its pin."""
    return BpfMap.open_pinned(Path(bpffs_dir) / name)


def read_flow_stats(bpffs_dir: Path) -> dict[FlowKey, FlowStats]:
    """Every flow the CC has seen (``claw_flows``), for samplers: one walk of the map.

    Open the map once with :func:`open_map` instead when sampling often."""
    with open_map(bpffs_dir, FLOWS_MAP) as flows:
        return {FlowKey.unpack(k): FlowStats.unpack(v) for k, v in flows.items()}


# --- Resources helpers: record, create, push close ----------------------------------------

def mount_bpffs(res: Resources, parent: Path, role: str = "bp") -> BpffsMount:
    """A bpffs named ``cb<run id><role>``, mounted on ``parent/cb<run id><role>``, for the
    life of ``res``."""
    name = res.name(role)
    mount = BpffsMount(Path(parent) / name, name, ledger=res.ledger)
    res.callback(mount.close)
    return mount


def register_cc(res: Resources, bpffs: BpffsMount, variant: str = "claw") -> CongestionControl:
    """Register ``claw`` or ``cqic`` for the life of ``res``."""
    cc = CongestionControl(bpffs, variant, ledger=res.ledger)
    res.callback(cc.close)
    return cc


def attach_ack_flags(res: Resources, bpffs: BpffsMount, ns: Namespace, device: str) -> AckFlagsIngress:
    """Read the UE's ACK loss flags on ``device`` in ``ns`` for the life of ``res``."""
    ingress = AckFlagsIngress(bpffs, ns, device, ledger=res.ledger)
    res.callback(ingress.close)
    return ingress


def cleanup_entry(entry: dict) -> str | None:
    """Undo one ledger entry of this module left by a killed run; what was removed, or None.

    For :func:`clawbed.netns.cleanup_from_ledger` (kinds ``bpffs``, ``bpf-pin``,
    ``struct_ops``, ``cc-default``, ``tc-filter``); entries are visited newest first.
    """
    kind, name = entry.get("kind"), entry.get("name", "")
    if kind == "cc-default":
        path = Path(f"/var/run/netns/{name}")
        if path.exists():
            ns_cmd = ["ip", "netns", "exec", name, "sh", "-c"]
            cur = subprocess.run([*ns_cmd, "cat /proc/sys/net/ipv4/tcp_congestion_control"],
                                 capture_output=True, text=True)
            if cur.stdout.strip() == entry.get("cc"):
                prev = entry.get("previous") or FALLBACK_CC
                prev = FALLBACK_CC if prev == entry.get("cc") else prev
                subprocess.run([*ns_cmd, f"echo {prev} > /proc/sys/net/ipv4/tcp_congestion_control"],
                               capture_output=True, text=True)
                return f"default congestion control of {name} ({entry.get('cc')} -> {prev})"
        return None
    if kind == "tc-filter":
        if remove_tc_filter(entry["netns"], name, entry["direction"], int(entry["pref"]), bool(entry.get("qdisc"))):
            return f"tc {entry['direction']} filter on {name} in {entry['netns']}"
        return None
    if kind == "struct_ops":
        pin = Path(entry["pin"])
        if _unlink_pin(pin):
            return f"struct_ops {name} (link {pin})"
        return None
    if kind == "bpf-pin":
        if _unlink_pin(Path(name)):
            return f"BPF pin {name}"
        return None
    if kind == "bpffs":
        path = Path(entry["path"])
        if unmount_bpffs(path):
            with contextlib.suppress(OSError):
                path.rmdir()
            return f"bpffs {name} on {path}"
        return None
    return None


register_cleanup(("bpffs", "bpf-pin", "struct_ops", "cc-default", "tc-filter"), cleanup_entry)
