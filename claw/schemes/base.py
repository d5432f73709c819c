"""The interface every transport scheme implements, and the registry of schemes.

A scheme is what differs between two runs of the same experiment: the server's congestion
control and whatever runs beside it (CLAW's agent on the server, CLAW's client on each UE).
Every user drives every scheme through the same verbs and never asks which scheme it is
(a replay's loads, other UEs of the cell, wired cross traffic)::

    scheme = get_scheme(name)()
    scheme.setup(ctx)                      # server side: sysctls, CC, agent; pushed on ctx.resources
    procs = scheme.start_clients(ctx)      # client side, one per UE (none for kernel CCs); returns
                                           # once every client is ready
    sock.setsockopt(IPPROTO_TCP, TCP_CONGESTION, scheme.server_cc.encode())  # or the namespace default
                                           # (claw/cqic: claw_<run id>, known after setup)
    scheme.cc_maps_dir, scheme.client_log(ctx, ue)   # what samplers and reports read, if any
    ...
    scheme.teardown()                      # or let ctx.resources close: same thing, once

What a user must know beforehand is a class attribute: :attr:`Scheme.needs_ue` (it has a
part on each UE, so it cannot drive senders without one, such as wired cross traffic).

Everything a scheme creates goes on its own stack, itself pushed on ``ctx.resources``, so
it is removed exactly once, in reverse order, whichever comes first.

Adding a scheme is one file in this package: a subclass of :class:`Scheme` decorated with
:func:`register_scheme`; ``clawbed.claw.schemes`` imports every module here.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import re
import select
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from clawbed.claw.server.sysctls import apply_server_sysctls, read_sysctl, restore_sysctls, write_sysctl
from clawbed.errors import InputError
from clawbed.netns import Namespace, OwnedProcess, ResourceError, Resources, wait_until

#: name → scheme class, filled by :func:`register_scheme`.
SCHEMES: dict[str, type[Scheme]] = {}
#: How long a scheme's clients may take to become ready (CLAW's: ACK marker attached, feedback
#: socket open, diag feed connected), s.
CLIENT_READY_TIMEOUT_S = 10.0
#: How often a wait for readiness checks that the processes it waits for still run, s (the
#: readiness itself wakes the wait at once: :class:`ReadySignal`).
READY_CHECK_INTERVAL_S = 0.05
#: How often :meth:`Scheme.wait_clients_ready`'s default polls :meth:`Scheme.client_ready`, s.
READY_POLL_INTERVAL_S = 0.005


class ReadySignal:
    """A FIFO at ``path`` on which a scheme's processes say they are ready, one line each
    (``ready ue=<id> pid=<pid>``, ``ready agent pid=<pid>``), so the scheme wakes the moment
    they are rather than polling files. Lines of at most PIPE_BUF bytes are written whole,
    so any number of processes share it. :meth:`close` removes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a previous load's, in a reused directory
        try:
            os.mkfifo(path, 0o600)
        except OSError as e:
            raise ResourceError(f"creating the readiness FIFO {path}: {e.strerror}") from e
        self._read = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        # Held open so that the read end never sees end-of-file between two writers.
        self._hold = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        self._partial = b""
        #: Every word that followed "ready" so far (``ue=0``, ``agent``).
        self.seen: set[str] = set()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._read, 4096)
            except BlockingIOError:
                return
            if not data:
                return
            *lines, self._partial = (self._partial + data).split(b"\n")
            for line in lines:
                words = line.decode(errors="replace").split()
                if len(words) >= 2 and words[0] == "ready":
                    self.seen.add(words[1])

    def wait(self, wanted: dict[str, tuple[str, OwnedProcess, Path | None]], deadline: float) -> None:
        """Return once every key of ``wanted`` (``ue=0``, ``agent``) said ready; each value is
        (what to call it, its process, its log). A process that exits first, or a deadline
        (``time.monotonic()``) passed, raises :class:`ResourceError` naming it and its log."""
        while True:
            self._drain()
            missing = [k for k in wanted if k not in self.seen]
            if not missing:
                return
            for key in missing:
                what, proc, log_path = wanted[key]
                if not proc.alive():
                    self._drain()  # it may have said ready just before it ended
                    if key in self.seen:
                        continue
                    raise ResourceError(f"{what} exited with status {proc.popen.returncode} before it was ready"
                                        f"{log_tail(log_path)}")
            left = deadline - time.monotonic()
            if left <= 0:
                names = ", ".join(f"{wanted[k][0]} (log: {wanted[k][2]})" for k in missing)
                raise ResourceError(f"timed out waiting for {names} to be ready")
            select.select([self._read], [], [], min(left, READY_CHECK_INTERVAL_S))

    def close(self) -> None:
        for fd in (self._read, self._hold):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._read = self._hold = -1
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def stop_together(procs: Sequence[OwnedProcess], timeout_s: float = 5.0) -> None:
    """SIGTERM to every process of ``procs`` still running, then wait for each on its pidfd
    (woken the moment it ends, not by a poll); :meth:`OwnedProcess.close` then finds them
    ended (and kills one that did not end in ``timeout_s``)."""
    running = [p for p in procs if p.alive()]
    for p in running:
        with contextlib.suppress(ProcessLookupError):
            p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for p in running:
        try:
            fd = os.pidfd_open(p.pid)
        except OSError:
            continue  # already reaped
        try:
            select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        finally:
            os.close(fd)
        p.alive()  # reaps it if it ended


def log_tail(log_path: Path | None, chars: int = 1500) -> str:
    """``: <the log's last lines> (log: <path>)``, for an error about a process that ended."""
    if log_path is None:
        return ""
    try:
        tail = log_path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        tail = ""
    return (f": {tail}" if tail else "") + f" (log: {log_path})"


@dataclass
class UeEndpoint:
    """One UE as a scheme sees it."""

    #: The UE's namespace.
    ns: Namespace
    #: Its IPv4 address as the server sees it.
    address: str
    #: Its id in the emulator and in CLAW feedback (0..65535).
    index: int
    #: Its device towards the network (the emulator's TUN): where its ACKs leave.
    device: str
    #: The emulator's diag feed port on 127.0.0.1 inside ``ns`` (CLAW clients read it).
    diag_port: int | None = None


@dataclass
class SchemeContext:
    """Where a scheme runs."""

    resources: Resources
    #: The run's directory (keys, logs, the bpffs mount point go here).
    run_dir: Path
    #: The namespace of the servers (the emulator's core namespace).
    server_ns: Namespace
    #: The servers' IPv4 address (CLAW's agent listens there too).
    server_address: str
    #: The server namespace's device on which the UEs' packets arrive.
    server_device: str
    ues: Sequence[UeEndpoint]
    #: UDP port of CLAW's agent.
    agent_port: int = 7070
    #: CLAW feedback period, ms (spec default 100).
    feedback_period_ms: int = 100
    #: Extra arguments for CLAW clients (e.g. ``["--n-antennas", "2", "--n-rb", "50"]``).
    client_args: list[str] = field(default_factory=list)
    #: Overrides of the server sysctls (``clawbed.claw.server.sysctls.SERVER_SYSCTLS``).
    sysctls: dict[str, str] = field(default_factory=dict)
    #: Make the scheme's CC the server namespace's default (for servers such as nginx that
    #: cannot choose it per socket). A kernel CC must then be in the machine's
    #: ``net.ipv4.tcp_allowed_congestion_control``; claw and cqic always may.
    namespace_default: bool = True
    #: Tells apart two instances of a scheme in one run (claw on UE 0 and claw on another UE):
    #: a suffix of the kernel CC's and the bpffs' names ([a-z0-9], at most 3 characters);
    #: "" for the replay's own, ``u<i>`` for other UE ``i``'s.
    instance: str = ""

    def __post_init__(self) -> None:
        ipaddress.IPv4Address(self.server_address)
        if not re.fullmatch(r"[a-z0-9]{0,3}", self.instance):
            raise ValueError(f"SchemeContext.instance {self.instance!r}: at most 3 characters of [a-z0-9]")
        for ue in self.ues:
            ipaddress.IPv4Address(ue.address)


@dataclass
class ClientAgent:
    """A process a scheme wants on a UE: ``argv`` runs from the root namespace (it enters
    the UE's namespace itself, or is wrapped by ``ue.ns.command``)."""

    name: str
    ue: UeEndpoint
    argv: list[str]
    log_path: Path | None = None


class Scheme:
    """A transport scheme. Subclasses set :attr:`name` and :attr:`server_cc` and extend
    :meth:`_setup_server` / :meth:`client_agents`; the base applies the server sysctls and
    makes :attr:`server_cc` the server namespace's default (for servers that cannot set it
    per socket, such as nginx)."""

    name: ClassVar[str]
    #: The scheme has a part on each UE (a client daemon reading the UE's diag feed): it
    #: cannot drive senders that have no UE of their own, such as wired cross traffic.
    needs_ue: ClassVar[bool] = False
    #: The congestion control's name in the kernel: what servers pass to
    #: ``setsockopt(TCP_CONGESTION)`` and what the server namespace's default becomes. Fixed
    #: for a kernel CC; a scheme that loads its own CC (claw, cqic) names it per run and
    #: knows it once set up.
    server_cc: str
    description: ClassVar[str] = ""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None

    @property
    def stack(self) -> contextlib.ExitStack:
        if self._stack is None:
            raise RuntimeError(f"scheme {self.name}: setup() has not run")
        return self._stack

    def setup(self, ctx: SchemeContext) -> None:
        """Prepare the server side. Everything made is removed by :meth:`teardown` (or when
        ``ctx.resources`` closes)."""
        if self._stack is not None:
            raise RuntimeError(f"scheme {self.name}: setup() already ran")
        self._stack = contextlib.ExitStack()
        ctx.resources.callback(self.teardown)
        try:
            previous = apply_server_sysctls(ctx.server_ns, ctx.sysctls)
            self._stack.callback(restore_sysctls, ctx.server_ns, previous)
            self._setup_server(ctx)
            self._set_default_cc(ctx)
        except BaseException:
            self.teardown()
            raise

    def _setup_server(self, ctx: SchemeContext) -> None:
        """Scheme-specific server set-up (push every undo on :attr:`stack`)."""

    def _set_default_cc(self, ctx: SchemeContext) -> None:
        if not ctx.namespace_default:
            return
        key = "net.ipv4.tcp_congestion_control"
        allowed = read_sysctl(ctx.server_ns, "net.ipv4.tcp_allowed_congestion_control").split()
        if self.server_cc not in allowed:
            # Only the root namespace may default to a restricted CC; the allowed list is
            # machine-wide, so changing it is the machine's provisioning's call, not a run's.
            raise ResourceError(
                f"scheme {self.name}: {self.server_cc} cannot be the default congestion control of namespace "
                f"{ctx.server_ns.name}: the kernel allows only {' '.join(allowed)} there "
                f"(net.ipv4.tcp_allowed_congestion_control). Add it machine-wide "
                f"(sysctl -w net.ipv4.tcp_allowed_congestion_control='{' '.join(allowed + [self.server_cc])}'), "
                f"or run with namespace_default=False and servers that set TCP_CONGESTION per socket")
        previous = read_sysctl(ctx.server_ns, key)
        write_sysctl(ctx.server_ns, key, self.server_cc)

        def restore() -> None:
            if Path(ctx.server_ns.path).exists():
                write_sysctl(ctx.server_ns, key, previous)

        self.stack.callback(restore)

    def client_agents(self, ctx: SchemeContext) -> list[ClientAgent]:
        """The processes to start on the UEs (none for a plain kernel CC)."""
        return []

    def client_log(self, ctx: SchemeContext, ue: UeEndpoint) -> Path | None:
        """The CSV of estimates the scheme's client on ``ue`` writes (reports keep each
        load's slice of it); None when the scheme has no client."""
        return None

    @property
    def cc_maps_dir(self) -> Path | None:
        """Where the scheme's congestion control pins its maps (the TCP sampler reads the
        window it sets there); None for a kernel CC. Known once set up."""
        return None

    def client_ready(self, ctx: SchemeContext, ue: UeEndpoint) -> bool:
        """Whether the client on ``ue`` is ready (the default: as soon as it runs)."""
        return True

    def wait_clients_ready(self, ctx: SchemeContext, agents: Sequence[ClientAgent], procs: Sequence[OwnedProcess],
                           deadline: float) -> None:
        """Return once every client is ready; raise :class:`ResourceError` naming the client
        and its log when one exits first or ``deadline`` (``time.monotonic()``) passes. The
        default polls :meth:`client_ready`; a scheme whose clients signal readiness
        themselves overrides this (CLAW: :class:`ReadySignal`)."""
        for agent, proc in zip(agents, procs):
            def ready(agent: ClientAgent = agent, proc: OwnedProcess = proc) -> bool:
                if not proc.alive():
                    raise ResourceError(f"{agent.name} exited with status {proc.popen.returncode} before it was "
                                        f"ready{log_tail(agent.log_path)}")
                return self.client_ready(ctx, agent.ue)

            wait_until(ready, max(deadline - time.monotonic(), 0.05), f"{agent.name} to be ready (log: "
                       f"{agent.log_path})", interval_s=READY_POLL_INTERVAL_S)

    def start_clients(self, ctx: SchemeContext, timeout_s: float = CLIENT_READY_TIMEOUT_S) -> list[OwnedProcess]:
        """Start :meth:`client_agents` as processes owned by the scheme, and return once each
        is ready (:meth:`wait_clients_ready`); a client that exits first, or is not ready in time,
        raises :class:`~clawbed.netns.ResourceError` naming its log. In time: ``timeout_s``
        for every round of as many clients as there are CPUs (they start at once and share
        them: 44 CLAW clients, Fig 19's cell, take longer than 10 s on 2 CPUs)."""
        procs = []
        agents = self.client_agents(ctx)
        for agent in agents:
            proc = OwnedProcess(agent.argv, name=agent.name, log_path=agent.log_path)
            ctx.resources.record_process(proc.pid, name=agent.name, argv=agent.argv)
            self.stack.callback(proc.close)
            procs.append(proc)
        deadline = time.monotonic() + timeout_s * math.ceil(len(agents) / max(1, len(os.sched_getaffinity(0))))
        self.wait_clients_ready(ctx, agents, procs, deadline)
        return procs

    def teardown(self) -> None:
        """Remove what :meth:`setup` and :meth:`start_clients` made, in reverse; idempotent."""
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()
            self._stack = None


def register_scheme(cls: type[Scheme]) -> type[Scheme]:
    """Class decorator: make ``cls`` available as ``SCHEMES[cls.name]``."""
    if cls.name in SCHEMES and SCHEMES[cls.name] is not cls:
        raise ValueError(f"two schemes named {cls.name!r}: {SCHEMES[cls.name].__module__} and {cls.__module__}")
    SCHEMES[cls.name] = cls
    return cls


def scheme_names(*, without_ue: bool = False) -> list[str]:
    """The registered schemes' names, sorted; ``without_ue``: only those that need no part on
    a UE (what wired cross traffic can run)."""
    return sorted(n for n, cls in SCHEMES.items() if not (without_ue and cls.needs_ue))


def get_scheme(name: str) -> type[Scheme]:
    """The scheme class called ``name``; an :class:`InputError` listing the known ones."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise InputError(f"unknown scheme {name!r}; known: {', '.join(sorted(SCHEMES))}") from None


class KernelScheme(Scheme):
    """A congestion control built into the kernel: nothing but the CC name."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "server_cc" not in cls.__dict__ and "name" in cls.__dict__:
            cls.server_cc = cls.name
