"""CLAW: the ``claw`` congestion control + the server agent, and the CLAW client on each UE.

Server side (in this order, undone in reverse):

1. a bpffs in the run directory (``<run_dir>/cb<run id>bp``), for the CC's pinned maps;
2. the ACK-flag reader on the server's device towards the UEs (shared with the run's other
   CLAW instances on that device: :class:`~clawbed.claw.server.loader.AckFlagsIngress`);
3. the congestion control (``claw/bpf/claw_cc.bpf.c``) registered under the run's own name,
   ``claw_<run id>`` (``claw_<run id>_<instance>`` for another UE's instance;
   :attr:`Claw.server_cc`; the user-facing scheme name stays ``claw``), and made the server
   namespace's default unless ``namespace_default`` is off (it is non-restricted, and the
   default goes back before it is unregistered);
4. a key (``<run_dir>/claw-key``, 32 random bytes, mode 0600) shared with the clients;
5. the agent (``python -m clawbed.claw.server.agent``), its socket in the server namespace, each UE id
   bound to its address: started right after the bpffs and the key, so that its interpreter
   starts while 2 and 3 load (it opens the maps once they are pinned); setup returns once it
   says ``ready agent`` on the scheme's readiness FIFO (``<run_dir>/claw-ready``).

Client side: each UE's ACK marker loaded by the scheme (``<run_dir>/cb<run id>m<ue>``), then
the client engineer's daemon, one per UE — the compiled client started directly, or
``python -m clawbed.claw.client`` for the reference — given the agent's address, the key,
the diag port, the marker's map and the readiness FIFO; ``start_clients`` returns once each
said ``ready ue=<id>`` there (feedback socket open, diag feed connected), not at its first
estimate.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from clawbed.claw.client.fast import client_command
from clawbed.claw.client.marking import CONFIG_MAP, AckMarker, marker_name
from clawbed.claw.schemes.base import (
    CLIENT_READY_TIMEOUT_S,
    ClientAgent,
    ReadySignal,
    Scheme,
    SchemeContext,
    UeEndpoint,
    log_tail,
    register_scheme,
    stop_together,
)
from clawbed.claw.server.loader import AckFlagsIngress, BpffsMount, CongestionControl, cc_name
from clawbed.netns import OwnedProcess, ResourceError

#: How long the agent may take to bind and open the maps, s.
AGENT_READY_TIMEOUT_S = 10.0
KEY_BYTES = 32


def ensure_key(path: Path) -> Path:
    """Create the shared feedback key at ``path`` unless it exists (mode 0600)."""
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
    return path


@register_scheme
class Claw(Scheme):
    name = "claw"
    needs_ue = True
    description = "CLAW: W_claw from the UE's PHY view, hybrid mode, bottleneck detector, loss flags"
    #: Which congestion control is loaded (``<variant>_cc.bpf.o``); its name in the kernel is
    #: ``cc_name(cc_variant, run id)``.
    cc_variant = "claw"
    #: ``--variant`` of the client.
    client_variant = "claw"
    #: Further client flags that make this variant.
    client_flags: tuple[str, ...] = ()
    #: The role in the names of this scheme's bpffs (``cb<run id><role><instance>``): one per
    #: scheme, so that CLAW variants can share a run.
    bpffs_role = "bp"

    def __init__(self) -> None:
        super().__init__()
        self.cc: CongestionControl | None = None

    @property
    def server_cc(self) -> str:  # type: ignore[override]  # a class attribute there, named per run here
        """The congestion control's name in the kernel, ``<variant>_<run id>[_<instance>]``
        (names are machine-wide, so each run and instance registers its own): known once
        :meth:`setup` ran."""
        if self.cc is None:
            raise RuntimeError(f"scheme {self.name}: its congestion control is named per run "
                               f"({self.cc_variant}_<run id>); set the scheme up first")
        return self.cc.name

    def ready_path(self, ctx: SchemeContext) -> Path:
        """The readiness FIFO the agent and the clients say ``ready`` on (:class:`ReadySignal`)."""
        return ctx.run_dir / f"{self.name}{'-' + ctx.instance if ctx.instance else ''}-ready"

    def _setup_server(self, ctx: SchemeContext) -> None:
        res = ctx.resources
        self.ready = ReadySignal(self.ready_path(ctx))
        self.stack.callback(self.ready.close)
        # Named for the run and instance, one per scheme so that claw and its variants could
        # share a run, and per instance so that other UEs can too.
        role = self.bpffs_role + ctx.instance
        bpffs = BpffsMount(ctx.run_dir / res.name(role), res.name(role), ledger=res.ledger)
        self.stack.callback(bpffs.close)
        self.bpffs = bpffs
        self.key_path = ensure_key(ctx.run_dir / "claw-key")
        # The agent first: its interpreter starts while the BPF objects load, and it opens
        # the maps once the CC has pinned them.
        self.agent = self._start_agent(ctx)
        # The ACK-flag reader before the CC: when another instance of the run already reads
        # this device, this one shares its flag map, which the CC must then find pinned.
        ingress = AckFlagsIngress(bpffs, ctx.server_ns, ctx.server_device, ledger=res.ledger)
        self.stack.callback(ingress.close)
        cc = CongestionControl(bpffs, self.cc_variant, name=cc_name(self.cc_variant, res.run_id, ctx.instance),
                               ledger=res.ledger)
        self.stack.callback(cc.close)
        self.cc = cc
        # The default is set here, by the CC, so that it is restored before unregistering.
        if ctx.namespace_default:
            cc.set_namespace_default(ctx.server_ns)
        self.ready.wait({"agent": (f"the {self.name} agent", self.agent, self._agent_log(ctx))},
                        time.monotonic() + AGENT_READY_TIMEOUT_S)

    def _set_default_cc(self, ctx: SchemeContext) -> None:
        pass  # done by CongestionControl.set_namespace_default in _setup_server

    def _agent_log(self, ctx: SchemeContext) -> Path:
        return ctx.run_dir / f"{self.name}-agent.log"

    def _start_agent(self, ctx: SchemeContext) -> OwnedProcess:
        """Start the agent (ready once it says so on :meth:`ready_path`)."""
        stats = ctx.run_dir / f"{self.name}-agent.json"
        if stats.exists():
            stats.unlink()
        argv = [sys.executable, "-m", "clawbed.claw.server.agent",
                "--listen", f"{ctx.server_address}:{ctx.agent_port}",
                "--bpffs", str(self.bpffs.path), "--key-file", str(self.key_path),
                "--period-ms", str(ctx.feedback_period_ms), "--stats-file", str(stats),
                "--ready-file", str(self.ready_path(ctx)), "--wait-maps-s", str(AGENT_READY_TIMEOUT_S)]
        for ue in ctx.ues:
            argv += ["--ue", f"{ue.index}={ue.address}"]
        # It opens its socket in the server namespace itself (the maps are reached by their
        # pins): no ip netns exec process before it.
        cmd = [*argv, "--netns", ctx.server_ns.name]
        proc = OwnedProcess(cmd, name=f"{self.name}-agent", log_path=self._agent_log(ctx))
        ctx.resources.record_process(proc.pid, name=f"{self.name}-agent", argv=cmd)
        self.stack.callback(proc.close)
        return proc

    @property
    def cc_maps_dir(self) -> Path | None:
        return self.bpffs.path if self.cc is not None else None

    def client_log(self, ctx: SchemeContext, ue: UeEndpoint) -> Path:
        """The client's estimates, one row per feedback period (``claw/client/daemon.py``)."""
        return ctx.run_dir / f"{self.name}-client-ue{ue.index}.csv"

    def start_clients(self, ctx: SchemeContext, timeout_s: float = CLIENT_READY_TIMEOUT_S) -> list[OwnedProcess]:
        # Each UE's ACK marker is loaded here, in this process, for this load (recorded in the
        # run's ledger, removed at teardown after its client stopped): a client process of
        # its own would start Python and load it again on every load.
        for ue in ctx.ues:
            marker = AckMarker(netns=ue.ns.name, dev=ue.device, run_id=ctx.resources.run_id, run_dir=ctx.run_dir,
                               ue_id=ue.index, ledger=ctx.resources.ledger)
            self.stack.callback(marker.close)
        procs = super().start_clients(ctx, timeout_s)
        # Pushed last, so it runs first: the clients and the agent are asked to stop together
        # and waited for at once, rather than one after the other.
        self.stack.callback(stop_together, [*procs, self.agent])
        return procs

    def wait_clients_ready(self, ctx: SchemeContext, agents: Sequence[ClientAgent], procs: Sequence[OwnedProcess],
                           deadline: float) -> None:
        """Each client says ``ready ue=<id>`` on the scheme's FIFO once it can do its job: its
        ACK marker attached, its feedback socket open, its diag feed connected. Its first
        estimate comes later, with the feed's first message (the phone's feed timing sends
        the first at its first flush, up to 300 ms on); until a report arrives the CC runs
        as it does without feedback (Cubic)."""
        wanted = {f"ue={a.ue.index}": (a.name, p, a.log_path) for a, p in zip(agents, procs)}
        # The agent too: it must still serve (it said ready during setup).
        if not self.agent.alive():
            raise ResourceError(f"the {self.name} agent exited with status {self.agent.popen.returncode}"
                                f"{log_tail(self._agent_log(ctx))}")
        self.ready.wait(wanted, deadline)

    def marker_map(self, ctx: SchemeContext, ue: UeEndpoint) -> Path:
        """The pinned config map of ``ue``'s ACK marker (loaded by :meth:`start_clients`),
        which its client writes loss events into."""
        return ctx.run_dir / marker_name(ctx.resources.run_id, ue.index) / CONFIG_MAP

    def client_agents(self, ctx: SchemeContext) -> list[ClientAgent]:
        """Each UE's client: the compiled one started directly (``--client-impl``,
        ``CLAWBED_CLAW_CLIENT``: :func:`~clawbed.claw.client.fast.client_command`), else the
        Python launcher; given the agent's address, the key, the diag port, its marker's map,
        its log and the readiness FIFO."""
        agents = []
        for ue in ctx.ues:
            cli = ["--ue-id", str(ue.index), "--netns", ue.ns.name,
                   "--server", f"{ctx.server_address}:{ctx.agent_port}",
                   "--key-file", str(self.key_path), "--period-ms", str(ctx.feedback_period_ms),
                   "--variant", self.client_variant, *self.client_flags,
                   "--ack-map", str(self.marker_map(ctx, ue)),
                   "--log", str(self.client_log(ctx, ue)), "--ready-file", str(self.ready_path(ctx))]
            if ue.diag_port is not None:
                cli += ["--diag-port", str(ue.diag_port)]
            cli += ctx.client_args
            agents.append(ClientAgent(name=f"{self.name}-client-ue{ue.index}", ue=ue, argv=client_command(cli),
                                      log_path=ctx.run_dir / f"{self.name}-client-ue{ue.index}.log"))
        return agents
