"""Network namespaces, links and processes owned by objects whose teardown removes them.

Every OS resource a run creates is named ``cb<run id>…`` and recorded in a ledger file as it
is created, so that cleanup is structural: closing the :class:`Resources` stack removes
exactly what was made (on success, on error, on Ctrl-C, on SIGTERM), and ``clawbed cleanup``
can remove what a killed run left by reading its ledger. Nothing is ever removed by pattern.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import secrets
import signal
import string
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

# pyroute2 is imported with the module, not where it is used, although it takes ~60 ms of a
# short-lived process's start: with it imported lazily, tests/test_bwest.py's busy-cell
# estimate (a bulk flow whose server and UE ends are threads of one Python process) erred
# 7.6-9.2 % against 3.4-4.0 % eagerly, five runs each, with nothing else changed; the cause is
# not yet found.
import pyroute2  # noqa: F401

if TYPE_CHECKING:
    from pyroute2 import IPRoute, NetNS

from clawbed.errors import ResourceError
from clawbed.setns import in_netns, socket_in_namespace  # noqa: F401  (re-exported)
from clawbed.signals import interrupt_handler, restore_default_signals

_T = TypeVar("_T")
#: Every resource name starts with this prefix (the before-stop hook lists ``cb*`` leftovers).
PREFIX = "cb"
#: Linux limit on interface names, characters.
IFNAME_MAX = 15
RUN_ID_ALPHABET = string.ascii_lowercase + string.digits
RUN_ID_LENGTH = 4


def new_run_id() -> str:
    """A short random run id (4 characters of [a-z0-9]) so names stay within 15 characters."""
    return "".join(secrets.choice(RUN_ID_ALPHABET) for _ in range(RUN_ID_LENGTH))


def resource_name(run_id: str, role: str) -> str:
    """``cb<run id><role>``, checked against the interface-name limit."""
    name = f"{PREFIX}{run_id}{role}"
    if len(name) > IFNAME_MAX:
        raise ValueError(f"resource name {name!r} is longer than {IFNAME_MAX} characters")
    return name


def _attempt(what: str, fn: Callable[[], _T]) -> _T:
    from pyroute2.netlink.exceptions import NetlinkError
    try:
        return fn()
    except NetlinkError as e:
        raise ResourceError(f"{what}: {os.strerror(e.code) if e.code else e}") from e
    except OSError as e:
        raise ResourceError(f"{what}: {e.strerror or e}") from e


class Ledger:
    """An append-only JSON-lines record of what a run created, written before it is used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, kind: str, name: str, **extra: object) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"kind": kind, "name": name, **extra}) + "\n")
            f.flush()

    def entries(self) -> list[dict]:
        """Every complete entry. A run killed mid-write leaves its last line torn (no newline,
        cut JSON): that entry was never acted on, so it is skipped; a bad line elsewhere is
        corruption and a :class:`ResourceError` naming the line."""
        if not self.path.exists():
            return []
        entries = []
        lines = self.path.read_text(errors="replace").split("\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as e:
                if number == len(lines):  # the last line, unterminated: a torn write
                    break
                raise ResourceError(f"{self.path}:{number}: not a ledger entry ({e.msg})") from None
            if not isinstance(entry, dict) or "kind" not in entry or "name" not in entry:
                raise ResourceError(f"{self.path}:{number}: a ledger entry needs a kind and a name")
            entries.append(entry)
        return entries


class Namespace:
    """A network namespace ``name`` with its loopback up and IPv6 off on every interface made
    in it later; :meth:`close` deletes it.

    Why no IPv6: the testbed's traffic is IPv4, and an interface with IPv6 on gets its
    link-local address a second or two after it comes up (duplicate address detection). A
    browser already loading a page sees that address appear as a network change and aborts
    its requests (``ERR_NETWORK_CHANGED``). Loopback keeps ``::1``.
    """

    def __init__(self, name: str) -> None:
        if not name.startswith(PREFIX):
            raise ValueError(f"namespace {name!r} must start with {PREFIX!r}")
        self.name = name
        from pyroute2 import netns
        _attempt(f"creating network namespace {name}", lambda: netns.create(name))
        self._closed = False
        try:
            with self.netlink() as ns:
                lo = ns.link_lookup(ifname="lo")[0]
                _attempt(f"bringing up lo in {name}", lambda: ns.link("set", index=lo, state="up"))
            self.sysctl("net.ipv6.conf.default.disable_ipv6", 1)
        except BaseException:
            self.close()  # not yet owned by anyone: remove it here
            raise

    @contextlib.contextmanager
    def netlink(self) -> Iterator[NetNS]:
        """A netlink socket inside the namespace."""
        from pyroute2 import NetNS
        sock = _attempt(f"opening netlink in namespace {self.name}", lambda: NetNS(self.name))
        try:
            yield sock
        finally:
            sock.close()

    @property
    def path(self) -> str:
        """The namespace's bind mount, for ``setns`` by other programs."""
        return f"/var/run/netns/{self.name}"

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside this namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: Sequence[str], *, check: bool = True, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a command to completion inside the namespace; failures name the command."""
        try:
            proc = subprocess.run(self.command(argv), capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise ResourceError(f"in namespace {self.name}: {' '.join(argv)} did not finish in {timeout_s} s") from e
        if check and proc.returncode != 0:
            raise ResourceError(
                f"in namespace {self.name}: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}"
            )
        return proc

    def sysctl(self, key: str, value: str | int) -> None:
        """Set a per-namespace sysctl (e.g. ``net.ipv4.tcp_congestion_control``)."""
        path = "/proc/sys/" + key.replace(".", "/")
        self.run(["sh", "-c", f"echo {value} > {path}"])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        from pyroute2 import netns
        try:
            netns.remove(self.name)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise ResourceError(f"removing network namespace {self.name}: {e.strerror}") from e


@dataclass
class Endpoint:
    """One end of a link: its namespace, interface name and IPv4 address with prefix."""

    ns: Namespace
    ifname: str
    address: str | None = None
    prefixlen: int = 24


class VethPair:
    """A veth link between two namespaces, addressed and up. Deleting one end deletes both."""

    def __init__(self, a: Endpoint, b: Endpoint, mtu: int = 1500) -> None:
        for end in (a, b):
            if not end.ifname.startswith(PREFIX) or len(end.ifname) > IFNAME_MAX:
                raise ValueError(f"interface name {end.ifname!r} must start with {PREFIX!r}, ≤ {IFNAME_MAX} chars")
        self.a, self.b = a, b
        what = f"creating veth {a.ifname}@{a.ns.name} <-> {b.ifname}@{b.ns.name}"
        # Made in the root namespace with the peer placed in b, then the near end moved to a:
        # pyroute2 resolves the peer's namespace by name only from the root namespace.
        from pyroute2 import IPRoute
        with IPRoute() as ipr:
            _attempt(what, lambda: ipr.link("add", ifname=a.ifname, kind="veth",
                                            peer={"ifname": b.ifname, "net_ns_fd": b.ns.name}))
            self._closed = False
            index = ipr.link_lookup(ifname=a.ifname)[0]
            _attempt(f"moving {a.ifname} into {a.ns.name}", lambda: ipr.link("set", index=index, net_ns_fd=a.ns.name))
        for end in (a, b):
            with end.ns.netlink() as ns:
                index = ns.link_lookup(ifname=end.ifname)[0]
                if end.address:
                    _attempt(f"addressing {end.ifname} in {end.ns.name} as {end.address}/{end.prefixlen}",
                             functools.partial(ns.addr, "add", index=index, address=end.address,
                                               prefixlen=end.prefixlen))
                _attempt(f"bringing up {end.ifname} in {end.ns.name}",
                         functools.partial(ns.link, "set", index=index, state="up", mtu=mtu))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ResourceError):
            with self.a.ns.netlink() as ns:
                found = ns.link_lookup(ifname=self.a.ifname)
                if found:
                    _attempt(f"deleting veth {self.a.ifname}", lambda: ns.link("del", index=found[0]))


class OwnedProcess:
    """A process this run started; :meth:`close` stops exactly that PID (TERM, then KILL)."""

    def __init__(self, argv: Sequence[str], *, name: str, log_path: Path | None = None,
                 stdout: int | None = None, env: dict[str, str] | None = None,
                 interactive: bool = False, stdin: int | None = None) -> None:
        """``interactive``: the process uses this one's terminal (stdin, stdout, stderr) and
        stays in its session, so a Ctrl-C reaches both (a user's command or shell run inside
        a namespace); it excludes ``log_path``, ``stdout`` and ``stdin``. ``stdin``: e.g.
        ``subprocess.PIPE`` for a worker that takes requests (default: nothing to read)."""
        if interactive and (log_path or stdout is not None or stdin is not None):
            raise ValueError("an interactive process uses the terminal: no log_path, stdout or stdin")
        self.name = name
        self.argv = list(argv)
        self._log = log_path.open("ab") if log_path else None
        quiet = self._log or subprocess.DEVNULL
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=None if interactive else (stdout if stdout is not None else quiet),
                stderr=None if interactive else quiet,
                stdin=None if interactive else (stdin if stdin is not None else subprocess.DEVNULL),
                env=env,
                # Own process group: a Ctrl-C on the terminal reaches only us, and we stop it in order.
                start_new_session=not interactive,
            )
        except OSError as e:
            if self._log:
                self._log.close()
            raise ResourceError(f"starting {name} ({argv[0]}): {e.strerror}") from e

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def close(self, timeout_s: float = 5.0) -> int | None:
        """Stop the process (SIGTERM, SIGKILL after ``timeout_s``) and return its exit status."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.popen.kill()
                self.popen.wait()
        if self._log:
            self._log.close()
            self._log = None
        return self.popen.returncode


class Resources(contextlib.ExitStack):
    """The resources of one run: created through it, recorded in its ledger, removed in reverse.

    Use as a context manager. While it is open, SIGTERM raises :class:`KeyboardInterrupt` in
    the main thread, so a terminated run unwinds exactly like a Ctrl-C.
    """

    def __init__(self, run_id: str, ledger_path: Path) -> None:
        super().__init__()
        self.run_id = run_id
        self.ledger = Ledger(ledger_path)
        self._old_sigterm: object = None
        self._owner_pid = os.getpid()

    def __enter__(self) -> Resources:
        super().__enter__()
        self._owner_pid = os.getpid()
        # A run started with SIGINT or SIGHUP ignored must still start its children with the
        # default dispositions, so that it can stop them (clawbed/signals.py).
        restore_default_signals()
        self._old_sigterm = signal.signal(signal.SIGTERM, interrupt_handler(self._owner_pid))
        # signal.signal returned a handler, SIG_DFL/SIG_IGN or None; each is what it takes back.
        self.callback(lambda: signal.signal(signal.SIGTERM, self._old_sigterm))  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> bool:
        # pyroute2 forks helper processes (without exec) to open sockets in namespaces; a
        # forked copy of this stack must never tear down the parent's resources.
        if os.getpid() != self._owner_pid:
            os._exit(1)
        return bool(super().__exit__(*exc))  # type: ignore[arg-type]  # ExitStack's own (type, value, tb)

    def name(self, role: str) -> str:
        return resource_name(self.run_id, role)

    def namespace(self, role: str) -> Namespace:
        name = self.name(role)
        self.ledger.record("netns", name)
        ns = Namespace(name)
        self.callback(ns.close)
        return ns

    def veth(self, a: Endpoint, b: Endpoint, mtu: int = 1500) -> VethPair:
        self.ledger.record("link", a.ifname, netns=a.ns.name)
        pair = VethPair(a, b, mtu)
        self.callback(pair.close)
        return pair

    def process(self, argv: Sequence[str], *, name: str, **kwargs: object) -> OwnedProcess:
        proc = OwnedProcess(argv, name=name, **kwargs)  # type: ignore[arg-type]  # OwnedProcess's keywords, passed on
        self.ledger.record("process", name, pid=proc.pid, argv=list(argv), start_ticks=_start_ticks(proc.pid))
        self.callback(proc.close)
        return proc

    def record_process(self, pid: int, *, name: str, argv: Sequence[str],
                       stop_signal: signal.Signals = signal.SIGTERM) -> None:
        """Write to the ledger a process another library started for this run (a Mininet
        host's shell), so that ``clawbed cleanup`` stops it with ``stop_signal`` if the run is
        killed; while the run lives, the object that started it stops it (registered on this
        stack by its caller). ``stop_signal``: what ends it (an interactive bash ignores SIGTERM)."""
        self.ledger.record("process", name, pid=pid, argv=list(argv), start_ticks=_start_ticks(pid),
                           signal=stop_signal.name)


#: What a namespace's default congestion control goes back to when it was the run's own and
#: nothing else is known: reno is the one CC every namespace may always default to (the
#: kernel marks it non-restricted).
FALLBACK_CC = "reno"
BPF_FS_MAGIC = 0xCAFE4A11
_libc = ctypes.CDLL(None, use_errno=True)
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def unlink_pin(path: Path) -> bool:
    """Remove a pin; False when it was already gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as e:
        raise ResourceError(f"removing BPF pin {path}: {e.strerror}") from e


def _statfs_type(path: Path) -> int:
    buf = ctypes.create_string_buffer(120)  # struct statfs; f_type is its first long
    if _libc.statfs(os.fsencode(str(path)), buf) != 0:
        err = ctypes.get_errno()
        raise ResourceError(f"statfs {path}: {os.strerror(err)}")
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


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


def tc_in(netns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tc", "-n", netns, *args], capture_output=True, text=True, timeout=30)


def remove_tc_filter(netns: str, device: str, direction: str, pref: int, qdisc: bool) -> bool:
    """Delete our filter (and the qdisc if we added it); False when the device is gone."""
    probe = tc_in(netns, "qdisc", "show", "dev", device)
    if probe.returncode != 0 or "clsact" not in probe.stdout:
        return False  # namespace, device or qdisc gone: the filter went with it
    done = tc_in(netns, "filter", "del", "dev", device, direction, "pref", str(pref))
    if done.returncode != 0 and "Cannot find" not in done.stderr:
        raise ResourceError(f"in namespace {netns}: deleting tc {direction} filter pref {pref} on "
                            f"{device}: {done.stderr.strip()}")
    if qdisc:
        done = tc_in(netns, "qdisc", "del", "dev", device, "clsact")
        if done.returncode != 0 and "Cannot find" not in done.stderr:
            raise ResourceError(f"in namespace {netns}: deleting the clsact qdisc of {device}: "
                                f"{done.stderr.strip()}")
    return True


def _restore_cc_default(entry: dict) -> str | None:
    """A ``cc-default`` entry: the namespace's default CC back from the run's to the previous."""
    name = entry.get("name", "")
    if not Path(f"/var/run/netns/{name}").exists():
        return None
    ns_cmd = ["ip", "netns", "exec", name, "sh", "-c"]
    current = subprocess.run([*ns_cmd, "cat /proc/sys/net/ipv4/tcp_congestion_control"],
                             capture_output=True, text=True)
    if current.stdout.strip() != entry.get("cc"):
        return None
    previous = entry.get("previous") or FALLBACK_CC
    previous = FALLBACK_CC if previous == entry.get("cc") else previous
    subprocess.run([*ns_cmd, f"echo {previous} > /proc/sys/net/ipv4/tcp_congestion_control"],
                   capture_output=True, text=True)
    return f"default congestion control of {name} ({entry.get('cc')} -> {previous})"


def undo_entry(entry: dict) -> str | None:
    """Undo one ledger entry of a BPF or tc kind left by a killed run; what was removed, or
    None when nothing was left. Entries are visited newest first (:func:`cleanup_from_ledger`),
    so pins go before their mount and a namespace's default CC is restored before the CC's
    link is unpinned."""
    kind, name = entry.get("kind"), entry.get("name", "")
    if kind == "tc-filter":
        if remove_tc_filter(entry["netns"], name, entry["direction"], int(entry["pref"]), bool(entry.get("qdisc"))):
            return f"tc {entry['direction']} filter on {name} in {entry['netns']}"
        return None
    if kind == "bpf-pin":
        return f"BPF pin {name}" if unlink_pin(Path(name)) else None
    if kind == "bpffs":
        path = Path(entry["path"])
        if unmount_bpffs(path):
            with contextlib.suppress(OSError):
                path.rmdir()
            return f"bpffs {name} on {path}"
        return None
    if kind == "struct_ops":
        pin = Path(entry["pin"])
        return f"struct_ops {name} (link {pin})" if unlink_pin(pin) else None
    if kind == "cc-default":
        return _restore_cc_default(entry)
    if kind == "trace-instance":  # a scheduler trace's tracefs instance (replay/schedtrace.py)
        path = Path(entry["path"])
        try:
            path.rmdir()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise ResourceError(f"removing the trace instance {path}: {e.strerror}") from e
        return f"trace instance {path}"
    if kind == "tracefs":  # mounted by the run (it was not): unmounted when still a tracefs
        path = Path(entry["path"])
        if os.path.ismount(path) and _statfs_type(path) == TRACEFS_MAGIC and \
                _libc.umount2(os.fsencode(str(path)), 0) == 0:
            return f"tracefs on {path}"
        return None
    return None


#: statfs magic of a tracefs.
TRACEFS_MAGIC = 0x74726163
#: The kinds :func:`undo_entry` undoes (the others: processes, links, namespaces).
BPF_AND_TC_KINDS = frozenset({"bpffs", "bpf-pin", "tc-filter", "struct_ops", "cc-default", "trace-instance",
                              "tracefs"})


def cleanup_from_ledger(path: Path) -> list[str]:
    """Remove what a ledger records and still exists (a run killed with SIGKILL); return what was removed.

    Entries are undone newest first, so a pin goes before its mount and a process before
    its namespace. The ledger knows how to undo every kind it records, BPF and tc ones too
    (:func:`undo_entry`): nothing needs importing first.
    """
    from pyroute2 import IPRoute, NetNS, netns
    from pyroute2.netlink.exceptions import NetlinkError
    removed: list[str] = []
    for entry in reversed(Ledger(path).entries()):
        kind, name = entry["kind"], entry["name"]
        if kind in BPF_AND_TC_KINDS:
            done = undo_entry(entry)
            if done:
                removed.append(done)
        elif kind == "process":
            pid = int(entry["pid"])
            if _pid_runs(pid, entry.get("argv", []), entry.get("start_ticks")):
                os.kill(pid, signal.Signals[entry.get("signal", "SIGTERM")])
                removed.append(f"process {name} (pid {pid})")
        elif kind == "link":
            if entry.get("netns") and entry["netns"] not in netns.listnetns():
                continue  # the link went with its namespace (opening it would make it anew)
            with contextlib.suppress(OSError, NetlinkError):
                target: IPRoute | NetNS = NetNS(entry["netns"]) if entry.get("netns") else IPRoute()
                with target as ipr:
                    found = ipr.link_lookup(ifname=name)
                    if found:
                        ipr.link("del", index=found[0])
                        removed.append(f"link {name}")
        elif kind == "netns" and name in netns.listnetns():
            netns.remove(name)
            removed.append(f"namespace {name}")
    return removed


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22): with the
    PID, it names one process for good, whatever it later calls itself."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count after it.
    return int(stat[stat.rindex(")") + 2:].split()[19])


def _pid_runs(pid: int, argv: list[str], start_ticks: int | None = None) -> bool:
    """True when ``pid`` is alive and is still the process the ledger recorded (not a reused PID).

    The start time decides when recorded: programs such as nginx rewrite their command line.
    Otherwise the program name does; ``ip netns exec NS CMD…`` replaces itself with CMD, so
    such a process is recognised by either name.
    """
    if start_ticks is not None:
        return _start_ticks(pid) == start_ticks
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    running = cmdline[0].decode(errors="replace")
    names = {argv[0]} if argv else set()
    if argv[:3] == ["ip", "netns", "exec"] and len(argv) > 4:
        names.add(argv[4])
    return running in names


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.02) -> None:
    """Poll ``predicate`` until true; raise naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise ResourceError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
