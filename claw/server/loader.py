"""Owned BPF objects of the CLAW server: the congestion controls and the ACK-flag reader.

Each class creates exactly one thing and its :meth:`close` removes exactly that, in the
style of :mod:`clawbed.netns`; the ``Resources`` helpers at the bottom record each thing in
the run's ledger before creating it and push its ``close`` on the stack:

- :class:`CongestionControl` — ``claw`` or ``cqic`` (``claw/bpf/claw_cc.bpf.c``), or any other
  built ``<variant>_cc.bpf.o`` whose struct_ops is named ``<variant>`` (``vegas``), registered
  under a name of the run's own (:func:`cc_name`: ``claw_<run id>``; congestion-control
  names are machine-wide, so two runs can each have theirs at the same time) through a
  struct_ops *link* pinned in the run's bpffs: removing that pin unregisters it, so even a
  run killed with SIGKILL leaves nothing registered once its bpffs is unmounted.
  The shared maps (``claw_peers``, ``claw_flows``, ``claw_ack_flags``) are pinned beside it;
  the first object to load creates them, later ones reuse them, and each removes only the
  pins it created.
- :class:`AckFlagsIngress` — ``claw/bpf/ack_flags_ingress.bpf.c`` loaded, pinned and attached
  with a :class:`~clawbed.claw.bpfobjects.TcProgram` on the server's device towards the UEs;
  once per device in a process, later instances on that device sharing it and its flag map.

The bpffs (:class:`~clawbed.claw.bpfobjects.BpffsMount`), the tc attachment and the object
files' build are :mod:`clawbed.claw.bpfobjects`', shared with the UE's ACK marker. What a
killed run left (ledger kinds ``struct_ops``, ``cc-default``, ``bpffs``, ``bpf-pin``,
``tc-filter``) the ledger undoes itself (:func:`clawbed.netns.undo_entry`).
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clawbed.claw.bpfobjects import (
    BpffsMount,
    TcProgram,
    device_l2_len,
    object_path,
    record,
)
from clawbed.claw.server import bpfmap
from clawbed.claw.server.bpfmap import BpfError, BpfMap
from clawbed.claw.server.libbpf import BpfObject
from clawbed.claw.server.maps import ACK_FLAGS_MAP, FLOWS_MAP, SHARED_MAPS, FlowKey, FlowStats
from clawbed.claw.server.sysctls import read_sysctl, write_sysctl
from clawbed.netns import (
    FALLBACK_CC,
    Ledger,
    Namespace,
    ResourceError,
    Resources,
    unlink_pin,
)

log = logging.getLogger(__name__)

#: The congestion controls built from ``claw_cc.bpf.c`` (object ``<variant>_cc.bpf.o``, whose
#: struct_ops variable, map and compiled-in CC name are all ``<variant>``). Any other object
#: ``<variant>_cc.bpf.o`` built the same way loads too (``vegas``: ``vegas_cc.bpf.c``).
VARIANTS = ("claw", "cqic")
#: The longest congestion-control name: the kernel's TCP_CA_NAME_MAX (16) less its NUL.
CC_NAME_MAX = 15
#: Size of ``tcp_congestion_ops.name``, bytes.
CC_NAME_FIELD_BYTES = 16
AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
#: tc filter priority of CLAW's programs (any fixed value: we delete by it).
TC_PREF = 0xC1A

def check_variant(variant: str) -> str:
    """``variant`` if it can name a BPF congestion control (object ``<variant>_cc.bpf.o``,
    struct_ops ``<variant>``): [a-z][a-z0-9]*, else ValueError."""
    if not re.fullmatch(r"[a-z][a-z0-9]*", variant):
        raise ValueError(f"unknown congestion control variant {variant!r}: a variant is named "
                         f"[a-z][a-z0-9]* after its object <variant>_cc.bpf.o (e.g. {', '.join(VARIANTS)})")
    return variant


def cc_name(variant: str, run_id: str, instance: str = "") -> str:
    """The name run ``run_id`` registers BPF congestion control ``variant`` (``claw``,
    ``cqic``, ``vegas``) under: ``<variant>_<run id>``, or ``<variant>_<run id>_<instance>``
    for a further instance of the run (another UE's CLAW).

    The kernel's congestion-control names are one namespace for the whole machine; a name of
    the run's own lets two runs (two replays, a replay and the kernel tests) each register
    claw at the same time instead of waiting for each other, and an instance suffix lets one
    run register it once per UE."""
    check_variant(variant)
    return check_cc_name(f"{variant}_{run_id}_{instance}" if instance else f"{variant}_{run_id}")


def check_cc_name(name: str) -> str:
    """``name`` if the kernel takes it as a congestion control's name (at most
    ``CC_NAME_MAX`` characters; [a-z0-9_] here, a subset of what it allows), else ValueError."""
    if not 0 < len(name) <= CC_NAME_MAX or not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"congestion control name {name!r}: must be 1 to {CC_NAME_MAX} characters of [a-z0-9_]")
    return name


def struct_ops_image(path: Path, compiled_name: str, name: str) -> bytes:
    """The BPF object file ``path`` with the ``name`` field of its struct_ops variable
    (``tcp_congestion_ops.name``, compiled in as ``compiled_name``) set to ``name``.

    libbpf copies a struct_ops variable from its ELF section when it opens the object, and
    the 1.1 that Debian 12 ships gives no access to that copy before load
    (``bpf_map__initial_value`` returns NULL for a struct_ops map), so the name is changed
    in the section's bytes: the one 16-byte NUL-padded ``compiled_name`` in it (the rest of
    a tcp_congestion_ops there is zeros and ``flags``)."""
    image = bytearray(path.read_bytes())
    where = f"BPF object {path}"
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise ResourceError(f"{where}: not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        """(name offset in the section-name table, file offset, size) of section ``i``."""
        sh_name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", image, shoff + i * shentsize)
        return sh_name, offset, size

    _, names_at, _ = section(shstrndx)
    found = []
    for i in range(shnum):
        sh_name, offset, size = section(i)
        end = image.index(b"\0", names_at + sh_name)
        if image[names_at + sh_name:end].decode(errors="replace") in (".struct_ops", ".struct_ops.link"):
            found.append((offset, size))
    if len(found) != 1:
        raise ResourceError(f"{where}: expected one .struct_ops section, found {len(found)}")
    offset, size = found[0]
    old = compiled_name.encode().ljust(CC_NAME_FIELD_BYTES, b"\0")
    data = bytes(image[offset:offset + size])
    if data.count(old) != 1:
        raise ResourceError(f"{where}: the congestion control's name {compiled_name!r} occurs "
                            f"{data.count(old)} times in its .struct_ops section, not once")
    at = offset + data.index(old)
    image[at:at + CC_NAME_FIELD_BYTES] = name.encode().ljust(CC_NAME_FIELD_BYTES, b"\0")
    return bytes(image)


def available_congestion_controls() -> list[str]:
    """The kernel's registered congestion controls (one list for every namespace)."""
    return AVAILABLE_CC.read_text().split()


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
                record(self.ledger, "bpf-pin", str(pin))
                self._candidates.append(pin)

    def loaded(self) -> None:
        # A pin that did not exist before the load and exists now was made by this load.
        self.created = [p for p in self._candidates if p.exists()]

    def remove(self) -> None:
        for pin in reversed(self.created):
            unlink_pin(pin)
        self.created = []


class CongestionControl:
    """The BPF congestion control ``variant`` (object ``<variant>_cc.bpf.o``, struct_ops
    ``<variant>``: ``claw``, ``cqic``, ``vegas``), registered under ``name`` (:func:`cc_name`)
    while this object is open; sockets and namespace defaults use ``name``.

    ``close`` moves every namespace default that :meth:`set_namespace_default` set (and the
    root namespace's, should it name us) off it, unregisters it by removing its link pin,
    waits until the kernel no longer lists it, and removes the map pins its load created.
    """

    def __init__(self, bpffs: BpffsMount, variant: str = "claw", *, name: str, ledger: Ledger | None = None,
                 obj_dir: Path | None = None, register_timeout_s: float = 5.0) -> None:
        self.variant = check_variant(variant)
        self.name = check_cc_name(name)
        obj_path = object_path(f"{variant}_cc.bpf.o", obj_dir)
        self.bpffs = bpffs
        self.ledger = ledger
        self.timeout_s = register_timeout_s
        self.link_pin = bpffs / f"{name}_link"
        self._defaults: list[tuple[Namespace, str]] = []
        self._closed = True
        if name in available_congestion_controls():
            raise ResourceError(
                f"registering congestion control {name}: one of that name is already registered "
                f"(a leftover of a run with the same id? bpftool struct_ops list)")
        self._pins = _SharedPins(bpffs, ledger)
        with BpfObject(obj_path, image=struct_ops_image(obj_path, variant, name)) as obj:
            if not obj.has_map(variant):
                raise ResourceError(f"BPF object {obj_path} has no struct_ops named {variant!r}")
            self._pins.attach(obj, SHARED_MAPS)
            obj.add_map_flags(variant, bpfmap.BPF_F_LINK)
            try:
                obj.load()
            finally:
                self._pins.loaded()
            try:
                obj.prepare_struct_ops(variant)
                self.struct_ops_id = bpfmap.map_info(obj.map_fd(variant)).map_id
                record(ledger, "struct_ops", name, pin=str(self.link_pin), map_id=self.struct_ops_id)
                link_fd = bpfmap.link_create_struct_ops(obj.map_fd(variant))
                try:
                    bpfmap.obj_pin(link_fd, self.link_pin)
                finally:
                    os.close(link_fd)
            except BaseException:
                self._pins.remove()
                raise
        self._closed = False
        if name not in available_congestion_controls():
            self.close()
            raise ResourceError(f"registering congestion control {name}: the link was made but "
                                f"{AVAILABLE_CC} does not list it")

    def set_namespace_default(self, ns: Namespace) -> None:
        """Make this CC the default of ``ns`` (allowed: it is ``TCP_CONG_NON_RESTRICTED``);
        ``close`` puts the previous default back first."""
        key = "net.ipv4.tcp_congestion_control"
        previous = read_sysctl(ns, key)
        record(self.ledger, "cc-default", ns.name, cc=self.name, previous=previous)
        self._defaults.append((ns, previous if previous != self.name else FALLBACK_CC))
        write_sysctl(ns, key, self.name)

    def _move_defaults_off(self) -> None:
        for ns, previous in reversed(self._defaults):
            try:
                current = read_sysctl(ns, "net.ipv4.tcp_congestion_control")
            except ResourceError:
                continue  # the namespace is gone, and its default with it
            if current == self.name:
                write_sysctl(ns, "net.ipv4.tcp_congestion_control", previous)
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
        unlink_pin(self.link_pin)
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
        while struct_ops_map_exists(self.struct_ops_id, self.variant):
            if time.monotonic() > deadline:
                log.warning("struct_ops map %s of %s (id %d) is still held after unregistering, by sockets "
                            "that still use it; it goes when they close", self.variant, self.name,
                            self.struct_ops_id)
                break
            time.sleep(0.02)


def struct_ops_map_exists(map_id: int, name: str) -> bool:
    """True while the kernel still has struct_ops map ``map_id`` named ``name`` (the map's
    name is the variant's, ``claw``, ``cqic`` or ``vegas``, whatever name the CC was
    registered under)."""
    try:
        fd = bpfmap.map_fd_by_id(map_id)
    except BpfError:
        return False
    try:
        info = bpfmap.map_info(fd)
        return info.map_type == bpfmap.BPF_MAP_TYPE_STRUCT_OPS and info.name == name
    finally:
        os.close(fd)


@dataclass
class _Attached:
    """One device's ACK-flag reader and the flag map it fills, shared by ``users`` instances."""

    tc: TcProgram
    flags: BpfMap
    users: int


#: The ACK-flag readers attached by this process, by (namespace, device). A device gets one:
#: the program clears the flag bits it has read and ends the filter chain (TC_ACT_OK), so a
#: second reader behind it would see no flags. Every further CLAW instance whose server
#: receives on that device (another UE's CLAW beside the replay's) shares the reader and its
#: flag map (the map is keyed by flow, so each CC finds its own flows' flags).
_ATTACHED: dict[tuple[str, str], _Attached] = {}


class AckFlagsIngress:
    """The server's ACK-flag reader on ``device`` in ``ns``: loaded, pinned, attached — or,
    when this process already has one there, that one's flag map pinned into ``bpffs`` as
    ``claw_ack_flags`` (then make this before the congestion control, which reuses the pin).
    The last of a device's instances to close detaches the reader."""

    def __init__(self, bpffs: BpffsMount, ns: Namespace, device: str, *, ledger: Ledger | None = None,
                 obj_dir: Path | None = None) -> None:
        self._key = (ns.name, device)
        self._pins = _SharedPins(bpffs, ledger)
        self.prog_pin: Path | None = None
        self._closed = True
        shared = _ATTACHED.get(self._key)
        if shared is not None:
            self._share(shared, bpffs, ledger)
            return
        kind = "eth" if device_l2_len(ns.name, device) else "l3"
        prog = f"claw_ack_flags_{kind}"
        other = "claw_ack_flags_l3" if kind == "eth" else "claw_ack_flags_eth"
        self.prog_pin = bpffs / f"ack_flags_{ns.name}_{device}"
        with BpfObject(object_path("ack_flags_ingress.bpf.o", obj_dir)) as obj:
            self._pins.attach(obj, [ACK_FLAGS_MAP])
            obj.set_autoload(other, False)
            try:
                obj.load()
            finally:
                self._pins.loaded()
            try:
                record(ledger, "bpf-pin", str(self.prog_pin))
                bpfmap.obj_pin(obj.prog_fd(prog), self.prog_pin)
            except BaseException:
                self._pins.remove()
                raise
        self._closed = False
        try:
            flags = open_map(bpffs.path, ACK_FLAGS_MAP)
            try:
                tc = TcProgram(ns.name, device, self.prog_pin, direction="ingress", pref=TC_PREF, ledger=ledger)
            except BaseException:
                flags.close()
                raise
        except BaseException:
            self.close()
            raise
        _ATTACHED[self._key] = _Attached(tc, flags, users=1)

    def _share(self, shared: _Attached, bpffs: BpffsMount, ledger: Ledger | None) -> None:
        pin = bpffs / ACK_FLAGS_MAP
        if pin.exists():
            raise ResourceError(f"{pin}: a flag map is pinned already; to share the ACK-flag reader of "
                                f"{self._key[1]} in {self._key[0]}, make the AckFlagsIngress before the "
                                f"congestion control")
        record(ledger, "bpf-pin", str(pin))
        bpfmap.obj_pin(shared.flags.fd, pin)
        self._pins.created = [pin]
        shared.users += 1
        self._closed = False

    @property
    def tc(self) -> TcProgram | None:
        """The tc filter this instance reads through (shared), while attached."""
        shared = _ATTACHED.get(self._key)
        return shared.tc if shared is not None else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        shared = _ATTACHED.get(self._key)
        if shared is not None:
            shared.users -= 1
            if shared.users == 0:
                del _ATTACHED[self._key]
                shared.flags.close()
                shared.tc.close()
        if self.prog_pin is not None:
            unlink_pin(self.prog_pin)  # the filter holds the program while others still read
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

def register_cc(res: Resources, bpffs: BpffsMount, variant: str = "claw") -> CongestionControl:
    """Register ``variant`` (``claw``, ``cqic``, ``vegas``) as ``cc_name(variant, res.run_id)``
    for the life of ``res``."""
    cc = CongestionControl(bpffs, variant, name=cc_name(variant, res.run_id), ledger=res.ledger)
    res.callback(cc.close)
    return cc


def attach_ack_flags(res: Resources, bpffs: BpffsMount, ns: Namespace, device: str) -> AckFlagsIngress:
    """Read the UE's ACK loss flags on ``device`` in ``ns`` for the life of ``res``."""
    ingress = AckFlagsIngress(bpffs, ns, device, ledger=res.ledger)
    res.callback(ingress.close)
    return ingress


