"""A small ctypes wrapper of the ``bpf(2)`` system call: pinned objects and map elements.

Only what CLAW's server needs, with no library beyond libc: open a pinned map
(``BPF_OBJ_GET``), read, write, delete and iterate its elements, pin a descriptor, open a map
by id, ask a map for its sizes, and create a struct_ops link. Each failure raises
:class:`BpfError` naming the operation and the object. One update costs about 2 µs.

Layouts follow ``union bpf_attr`` of ``include/uapi/linux/bpf.h`` (x86-64); the kernel
accepts a shorter attribute than its own as long as it is zero-padded, so each command packs
only its fields into a zeroed buffer.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from clawbed.errors import ResourceError

_SYS_BPF = 321  # x86-64

BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_LINK_CREATE = 28

BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2

BPF_MAP_TYPE_STRUCT_OPS = 26
BPF_STRUCT_OPS = 44  # enum bpf_attach_type
BPF_F_LINK = 1 << 13  # map flag: a struct_ops map registered through a link

_ATTR_BYTES = 128
_MAP_INFO_BYTES = 96
_MAP_INFO = struct.Struct("=IIIIII16sII")  # type id key_size value_size max_entries map_flags name ...

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_uint]


class BpfError(ResourceError):
    """A ``bpf(2)`` command failed; ``errno`` keeps the kernel's error number."""

    def __init__(self, message: str, errno_: int = 0) -> None:
        super().__init__(message)
        self.errno = errno_


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char], what: str) -> int:
    ret = _syscall(_SYS_BPF, cmd, ctypes.addressof(attr), _ATTR_BYTES)
    if ret < 0:
        err = ctypes.get_errno()
        raise BpfError(f"{what}: {os.strerror(err)}", err)
    return int(ret)


def obj_get(path: str | Path, *, read_only: bool = False) -> int:
    """A new descriptor for the object pinned at ``path`` (a file in a bpffs)."""
    name = os.fsencode(str(path)) + b"\0"
    buf = ctypes.create_string_buffer(name)
    attr = ctypes.create_string_buffer(_ATTR_BYTES)
    flags = 1 if read_only else 0  # BPF_F_RDONLY
    struct.pack_into("=QII", attr, 0, ctypes.addressof(buf), 0, flags)
    return _bpf(BPF_OBJ_GET, attr, f"opening the BPF object pinned at {path}")


def obj_pin(fd: int, path: str | Path) -> None:
    """Pin the object behind ``fd`` at ``path`` (which must not exist, inside a bpffs)."""
    name = os.fsencode(str(path)) + b"\0"
    buf = ctypes.create_string_buffer(name)
    attr = ctypes.create_string_buffer(_ATTR_BYTES)
    struct.pack_into("=QI", attr, 0, ctypes.addressof(buf), fd)
    _bpf(BPF_OBJ_PIN, attr, f"pinning BPF object fd {fd} at {path}")


def map_fd_by_id(map_id: int) -> int:
    """A descriptor for the map with kernel id ``map_id``."""
    attr = ctypes.create_string_buffer(_ATTR_BYTES)
    struct.pack_into("=I", attr, 0, map_id)
    return _bpf(BPF_MAP_GET_FD_BY_ID, attr, f"opening BPF map id {map_id}")


@dataclass(frozen=True)
class MapInfo:
    """What the kernel reports about a map."""

    map_type: int
    map_id: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int
    name: str


def map_info(fd: int) -> MapInfo:
    """The type, id, sizes and name of the map behind ``fd``."""
    info = ctypes.create_string_buffer(_MAP_INFO_BYTES)
    attr = ctypes.create_string_buffer(_ATTR_BYTES)
    struct.pack_into("=IIQ", attr, 0, fd, _MAP_INFO_BYTES, ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr, f"reading the info of BPF map fd {fd}")
    t, i, ks, vs, me, fl, name = _MAP_INFO.unpack_from(info, 0)[:7]
    return MapInfo(t, i, ks, vs, me, fl, name.split(b"\0", 1)[0].decode(errors="replace"))


def link_create_struct_ops(map_fd: int) -> int:
    """Register a loaded ``BPF_F_LINK`` struct_ops map through a new link; its descriptor."""
    attr = ctypes.create_string_buffer(_ATTR_BYTES)
    struct.pack_into("=III", attr, 0, map_fd, 0, BPF_STRUCT_OPS)
    return _bpf(BPF_LINK_CREATE, attr, f"creating a struct_ops link for BPF map fd {map_fd}")


class BpfMap:
    """An open BPF map with fixed-size byte keys and values.

    Buffers are allocated once per map, so an instance is not safe to share between
    threads (the agent uses it from one asyncio loop). Close it, or use it as a context
    manager; the map itself lives on while it is pinned or used by a program.
    """

    def __init__(self, fd: int, label: str) -> None:
        self.fd = fd
        self.label = label
        info = map_info(fd)
        self.info = info
        self.key_size = info.key_size
        self.value_size = info.value_size
        self._key = ctypes.create_string_buffer(max(info.key_size, 1))
        self._next = ctypes.create_string_buffer(max(info.key_size, 1))
        self._value = ctypes.create_string_buffer(max(info.value_size, 1))
        self._attr = ctypes.create_string_buffer(_ATTR_BYTES)
        self._closed = False

    @classmethod
    def open_pinned(cls, path: str | Path, *, read_only: bool = False) -> BpfMap:
        """The map pinned at ``path``."""
        return cls(obj_get(path, read_only=read_only), str(path))

    def _elem_attr(self, value_addr: int, flags: int = 0) -> None:
        struct.pack_into("=IIQQQ", self._attr, 0, self.fd, 0, ctypes.addressof(self._key), value_addr, flags)

    def _set_key(self, key: bytes) -> None:
        if len(key) != self.key_size:
            raise ValueError(f"{self.label}: key of {len(key)} bytes, the map's are {self.key_size}")
        ctypes.memmove(self._key, key, self.key_size)

    def lookup(self, key: bytes) -> bytes | None:
        """The value stored under ``key``, or None when there is none."""
        self._set_key(key)
        self._elem_attr(ctypes.addressof(self._value))
        ret = _syscall(_SYS_BPF, BPF_MAP_LOOKUP_ELEM, ctypes.addressof(self._attr), _ATTR_BYTES)
        if ret < 0:
            err = ctypes.get_errno()
            if err == 2:  # ENOENT
                return None
            raise BpfError(f"looking up a key in BPF map {self.label}: {os.strerror(err)}", err)
        return self._value.raw[: self.value_size]

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        """Store ``value`` under ``key`` (``flags``: BPF_ANY, BPF_NOEXIST, BPF_EXIST)."""
        if len(value) != self.value_size:
            raise ValueError(f"{self.label}: value of {len(value)} bytes, the map's are {self.value_size}")
        self._set_key(key)
        ctypes.memmove(self._value, value, self.value_size)
        self._elem_attr(ctypes.addressof(self._value), flags)
        ret = _syscall(_SYS_BPF, BPF_MAP_UPDATE_ELEM, ctypes.addressof(self._attr), _ATTR_BYTES)
        if ret < 0:
            err = ctypes.get_errno()
            raise BpfError(f"updating a key in BPF map {self.label}: {os.strerror(err)}", err)

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; False when it was not there."""
        self._set_key(key)
        self._elem_attr(0)
        ret = _syscall(_SYS_BPF, BPF_MAP_DELETE_ELEM, ctypes.addressof(self._attr), _ATTR_BYTES)
        if ret < 0:
            err = ctypes.get_errno()
            if err == 2:
                return False
            raise BpfError(f"deleting a key from BPF map {self.label}: {os.strerror(err)}", err)
        return True

    def keys(self) -> Iterator[bytes]:
        """Every key, in the kernel's order (a key deleted meanwhile may restart the walk)."""
        first = True
        while True:
            if first:
                struct.pack_into("=IIQQQ", self._attr, 0, self.fd, 0, 0, ctypes.addressof(self._next), 0)
            else:
                ctypes.memmove(self._key, self._next, self.key_size)
                self._elem_attr(ctypes.addressof(self._next))
            ret = _syscall(_SYS_BPF, BPF_MAP_GET_NEXT_KEY, ctypes.addressof(self._attr), _ATTR_BYTES)
            if ret < 0:
                err = ctypes.get_errno()
                if err == 2:
                    return
                raise BpfError(f"walking the keys of BPF map {self.label}: {os.strerror(err)}", err)
            first = False
            yield self._next.raw[: self.key_size]

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) pair that still exists when it is read."""
        for key in list(self.keys()):
            value = self.lookup(key)
            if value is not None:
                yield key, value

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.fd)

    def __enter__(self) -> BpfMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
