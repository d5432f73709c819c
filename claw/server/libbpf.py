"""The few libbpf (1.1) calls the loader needs, through ctypes.

libbpf does the hard part of loading a BPF object — ELF, BTF, relocations, kfunc and
``__kconfig`` externs, struct_ops — so the loader only opens an object, points its shared
maps at pins in the run's bpffs (libbpf reuses a pinned map or creates and pins it), loads
it, and hands out descriptors. Everything libbpf prints (including the verifier's log) is
captured and put into the error of the call that failed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from pathlib import Path

from clawbed.claw.server.bpfmap import BpfError

_LIB_NAMES = ("libbpf.so.1", "libbpf.so")


def _load_libbpf() -> ctypes.CDLL:
    errors = []
    for name in _LIB_NAMES:
        try:
            return ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            errors.append(str(e))
    raise BpfError("loading libbpf (Debian: apt-get install libbpf1 libbpf-dev): " + "; ".join(errors))


_lib: ctypes.CDLL | None = None
_libc = ctypes.CDLL(None, use_errno=True)
_libc.vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
_libc.vsnprintf.restype = ctypes.c_int

# int (*libbpf_print_fn_t)(enum libbpf_print_level, const char *, va_list); on x86-64 a
# va_list argument is a pointer to the caller's __va_list_tag, which vsnprintf accepts as is.
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_messages = threading.local()
_print_lock = threading.Lock()


def _capture(level: int, fmt: bytes, args: int) -> int:
    buf = ctypes.create_string_buffer(4096)
    n = _libc.vsnprintf(buf, len(buf), fmt, args)
    log = getattr(_messages, "log", None)
    if log is not None:
        log.append(buf.value.decode(errors="replace"))
    return max(n, 0)


_print_callback = _PRINT_FN(_capture)


def lib() -> ctypes.CDLL:
    """libbpf, with argument types declared and its messages captured."""
    global _lib
    with _print_lock:
        if _lib is None:
            so = _load_libbpf()
            p = ctypes.c_void_p
            decl = {
                "bpf_object__open_file": ([ctypes.c_char_p, p], p),
                "bpf_object__open_mem": ([p, ctypes.c_size_t, p], p),
                "bpf_object__load": ([p], ctypes.c_int),
                "bpf_object__close": ([p], None),
                "bpf_object__find_map_by_name": ([p, ctypes.c_char_p], p),
                "bpf_object__find_program_by_name": ([p, ctypes.c_char_p], p),
                "bpf_map__set_pin_path": ([p, ctypes.c_char_p], ctypes.c_int),
                "bpf_map__is_pinned": ([p], ctypes.c_bool),
                "bpf_map__set_map_flags": ([p, ctypes.c_uint32], ctypes.c_int),
                "bpf_map__map_flags": ([p], ctypes.c_uint32),
                "bpf_map__fd": ([p], ctypes.c_int),
                "bpf_program__fd": ([p], ctypes.c_int),
                "bpf_program__set_autoload": ([p, ctypes.c_bool], ctypes.c_int),
                "bpf_map__attach_struct_ops": ([p], p),
                "bpf_link__disconnect": ([p], None),
                "bpf_link__destroy": ([p], ctypes.c_int),
                "libbpf_set_print": ([_PRINT_FN], p),
                "bpf_tc_hook_create": ([p], ctypes.c_int),
                "bpf_tc_hook_destroy": ([p], ctypes.c_int),
                "bpf_tc_attach": ([p, p], ctypes.c_int),
                "bpf_tc_detach": ([p, p], ctypes.c_int),
                "bpf_tc_query": ([p, p], ctypes.c_int),
            }
            for name, (argtypes, restype) in decl.items():
                fn = getattr(so, name)
                fn.argtypes = argtypes
                fn.restype = restype
            so.libbpf_set_print(_print_callback)
            _lib = so
    return _lib


class _Capture:
    """Collect libbpf's messages during one call, for its error message."""

    def __enter__(self) -> list[str]:
        self.log: list[str] = []
        _messages.log = self.log
        return self.log

    def __exit__(self, *exc: object) -> None:
        _messages.log = None


def _tail(log: list[str], lines: int = 25) -> str:
    text = "".join(log).strip().splitlines()
    if not text:
        return ""
    return "\n  libbpf: " + "\n  libbpf: ".join(text[-lines:])


class _OpenOpts(ctypes.Structure):
    """The head of libbpf's ``struct bpf_object_open_opts`` (``sz`` says how much of it a
    caller fills; libbpf takes the fields beyond it as zero)."""

    _fields_ = [("sz", ctypes.c_size_t), ("object_name", ctypes.c_char_p)]


class BpfObject:
    """An opened (then loaded) BPF object file. :meth:`close` releases libbpf's descriptors;
    what was pinned or registered stays until removed on its own.

    With ``image``, the object is opened from those bytes (a modified copy of the file at
    ``path``, which names it in errors and gives libbpf its object name) instead of the file.
    """

    def __init__(self, path: Path, *, image: bytes | None = None) -> None:
        self.path = Path(path)
        self._lib = lib()
        if image is None and not self.path.is_file():
            raise BpfError(f"opening BPF object {self.path}: no such file (build it: claw/bpf/build.sh)")
        # libbpf parses an image in place until the object is loaded: keep it alive with us.
        self._image = ctypes.create_string_buffer(image, len(image)) if image is not None else None
        with _Capture() as log:
            if self._image is None:
                obj = self._lib.bpf_object__open_file(os.fsencode(str(self.path)), None)
            else:
                # The same object name open_file would derive from the file name.
                opts = _OpenOpts(ctypes.sizeof(_OpenOpts), os.fsencode(self.path.name.split(".")[0]))
                obj = self._lib.bpf_object__open_mem(self._image, len(self._image), ctypes.byref(opts))
        if not obj:
            err = ctypes.get_errno()
            raise BpfError(f"opening BPF object {self.path}: {os.strerror(err)}{_tail(log)}", err)
        self._obj: int | None = obj
        self.loaded = False

    def _need_open(self) -> int:
        if self._obj is None:
            raise BpfError(f"BPF object {self.path} is closed")
        return self._obj

    def _map(self, name: str) -> int:
        m = self._lib.bpf_object__find_map_by_name(self._need_open(), name.encode())
        if not m:
            raise BpfError(f"BPF object {self.path} has no map named {name!r}")
        return m

    def _prog(self, name: str) -> int:
        p = self._lib.bpf_object__find_program_by_name(self._need_open(), name.encode())
        if not p:
            raise BpfError(f"BPF object {self.path} has no program named {name!r}")
        return p

    def has_map(self, name: str) -> bool:
        return bool(self._lib.bpf_object__find_map_by_name(self._need_open(), name.encode()))

    def set_pin_path(self, map_name: str, path: Path) -> None:
        """Pin (or reuse the pin of) map ``map_name`` at ``path`` when loading."""
        rc = self._lib.bpf_map__set_pin_path(self._map(map_name), os.fsencode(str(path)))
        if rc < 0:
            raise BpfError(f"setting the pin path of map {map_name} of {self.path} to {path}: {os.strerror(-rc)}", -rc)

    def add_map_flags(self, map_name: str, flags: int) -> None:
        m = self._map(map_name)
        rc = self._lib.bpf_map__set_map_flags(m, self._lib.bpf_map__map_flags(m) | flags)
        if rc < 0:
            raise BpfError(f"setting flags {flags:#x} on map {map_name} of {self.path}: {os.strerror(-rc)}", -rc)

    def set_autoload(self, prog_name: str, autoload: bool) -> None:
        rc = self._lib.bpf_program__set_autoload(self._prog(prog_name), autoload)
        if rc < 0:
            raise BpfError(f"setting autoload of {prog_name} in {self.path}: {os.strerror(-rc)}", -rc)

    def load(self) -> None:
        """Load programs and create (or reuse pinned) maps; the verifier's log on failure."""
        with _Capture() as log:
            rc = self._lib.bpf_object__load(self._need_open())
        if rc < 0:
            raise BpfError(f"loading BPF object {self.path}: {os.strerror(-rc)}{_tail(log)}", -rc)
        self.loaded = True

    def map_fd(self, name: str) -> int:
        fd = self._lib.bpf_map__fd(self._map(name))
        if fd < 0:
            raise BpfError(f"map {name} of {self.path} has no descriptor (not loaded?)")
        return fd

    def map_is_pinned(self, name: str) -> bool:
        return bool(self._lib.bpf_map__is_pinned(self._map(name)))

    def prog_fd(self, name: str) -> int:
        fd = self._lib.bpf_program__fd(self._prog(name))
        if fd < 0:
            raise BpfError(f"program {name} of {self.path} has no descriptor (not loaded?)")
        return fd

    def prepare_struct_ops(self, map_name: str) -> None:
        """Fill struct_ops map ``map_name`` with its programs (``bpf_map__attach_struct_ops``).

        For a ``BPF_F_LINK`` map this only stores the value; registering is then the job of
        a link (:func:`claw.server.bpfmap.link_create_struct_ops`). libbpf's own handle is
        disconnected, so that freeing it never unregisters anything.
        """
        with _Capture() as log:
            link = self._lib.bpf_map__attach_struct_ops(self._map(map_name))
        if not link:
            err = ctypes.get_errno()
            raise BpfError(f"filling struct_ops map {map_name} of {self.path}: {os.strerror(err)}{_tail(log)}", err)
        self._lib.bpf_link__disconnect(link)
        self._lib.bpf_link__destroy(link)

    def close(self) -> None:
        if self._obj is not None:
            self._lib.bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- tc attachment (libbpf's netlink calls; run them in a thread inside the namespace:
# clawbed.netns.in_netns) ------------------------------------------------------

#: ``enum bpf_tc_attach_point``.
TC_INGRESS = 1 << 0
TC_EGRESS = 1 << 1


class _TcHook(ctypes.Structure):
    """libbpf's ``struct bpf_tc_hook`` (24 bytes on x86-64)."""

    _fields_ = [("sz", ctypes.c_size_t), ("ifindex", ctypes.c_int), ("attach_point", ctypes.c_int),
                ("parent", ctypes.c_uint32)]


class _TcOpts(ctypes.Structure):
    """libbpf's ``struct bpf_tc_opts`` (32 bytes on x86-64)."""

    _fields_ = [("sz", ctypes.c_size_t), ("prog_fd", ctypes.c_int), ("flags", ctypes.c_uint32),
                ("prog_id", ctypes.c_uint32), ("handle", ctypes.c_uint32), ("priority", ctypes.c_uint32)]


def _hook(ifindex: int, attach_point: int) -> _TcHook:
    return _TcHook(sz=ctypes.sizeof(_TcHook), ifindex=ifindex, attach_point=attach_point)


def tc_has_clsact(ifindex: int, priority: int) -> bool:
    """Whether device ``ifindex`` of this thread's namespace has a ``clsact`` qdisc: a query
    for a filter of ``priority`` under it answers "no such filter" (or finds one) when it
    has, "invalid" (no such parent qdisc) when it has not."""
    opts = _TcOpts(sz=ctypes.sizeof(_TcOpts), handle=1, priority=priority)
    rc = lib().bpf_tc_query(ctypes.byref(_hook(ifindex, TC_INGRESS)), ctypes.byref(opts))
    if rc in (0, -errno.ENOENT):
        return True
    if rc == -errno.EINVAL:
        return False
    raise BpfError(f"looking for the clsact qdisc of device {ifindex}: {os.strerror(-rc)}", -rc)


def tc_attach(ifindex: int, attach_point: int, prog_fd: int, priority: int, what: str) -> tuple[int, bool]:
    """Attach ``prog_fd`` as a direct-action ``bpf`` filter of priority (tc's ``pref``)
    ``priority`` on device ``ifindex`` of this thread's namespace, at ``attach_point``
    (:data:`TC_INGRESS` / :data:`TC_EGRESS`), adding a ``clsact`` qdisc if the device has
    none; (the filter's handle, whether the qdisc was added). ``what`` names it in errors;
    on an error nothing stays added."""
    so = lib()
    hook = _hook(ifindex, attach_point)
    with _Capture() as log:
        rc = so.bpf_tc_hook_create(ctypes.byref(hook))
    if rc not in (0, -errno.EEXIST):
        raise BpfError(f"{what}: adding a clsact qdisc: {os.strerror(-rc)}{_tail(log)}", -rc)
    added_qdisc = rc == 0
    opts = _TcOpts(sz=ctypes.sizeof(_TcOpts), prog_fd=prog_fd, priority=priority)
    with _Capture() as log:
        rc = so.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts))
    if rc != 0:
        if added_qdisc:
            tc_remove_qdisc(ifindex)
        raise BpfError(f"{what}: attaching the filter: {os.strerror(-rc)}{_tail(log)}", -rc)
    return int(opts.handle), added_qdisc


def tc_detach(ifindex: int, attach_point: int, handle: int, priority: int) -> bool:
    """Delete the filter :func:`tc_attach` made; False when it is gone already."""
    hook = _hook(ifindex, attach_point)
    opts = _TcOpts(sz=ctypes.sizeof(_TcOpts), handle=handle, priority=priority)
    rc = lib().bpf_tc_detach(ctypes.byref(hook), ctypes.byref(opts))
    if rc in (-errno.ENOENT, -errno.ENODEV, -errno.EINVAL):
        return False
    if rc != 0:
        raise BpfError(f"deleting tc filter pref {priority} on device {ifindex}: {os.strerror(-rc)}", -rc)
    return True


def tc_remove_qdisc(ifindex: int) -> bool:
    """Delete the device's ``clsact`` qdisc (ingress and egress: a hook of one point only
    would flush that point's filters instead); False when there is none."""
    rc = lib().bpf_tc_hook_destroy(ctypes.byref(_hook(ifindex, TC_INGRESS | TC_EGRESS)))
    if rc in (-errno.ENOENT, -errno.ENODEV, -errno.EINVAL):
        return False
    if rc != 0:
        raise BpfError(f"deleting the clsact qdisc of device {ifindex}: {os.strerror(-rc)}", -rc)
    return True
