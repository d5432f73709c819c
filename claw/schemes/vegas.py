"""TCP Vegas (delay-based): ``claw/bpf/vegas_cc.bpf.c``, the kernel's tcp_vegas algorithm as a
BPF congestion control (this kernel has no vegas), nothing beside it.

Server side (undone in reverse): a bpffs in the run directory (``<run_dir>/cb<run id>bv<instance>``)
for the struct_ops link's pin, then the CC registered under the run's own name,
``vegas_<run id>`` (``vegas_<run id>_<instance>`` for another UE's or a cross-traffic host's
instance; :attr:`Vegas.server_cc`), made the server namespace's default unless
``namespace_default`` is off (it is non-restricted; the default goes back before it is
unregistered). No part on the UE, so it drives wired cross traffic and other UEs too.
"""

from __future__ import annotations

from clawbed.claw.schemes.base import Scheme, SchemeContext, register_scheme
from clawbed.claw.server.loader import BpffsMount, CongestionControl, cc_name


@register_scheme
class Vegas(Scheme):
    name = "vegas"
    description = "TCP Vegas (delay-based; the kernel's algorithm as a BPF CC): low RTT, less throughput"
    needs_ue = False
    #: The object ``<cc_variant>_cc.bpf.o`` and the prefix of its per-run kernel name.
    cc_variant = "vegas"

    def __init__(self) -> None:
        super().__init__()
        self.cc: CongestionControl | None = None

    @property
    def server_cc(self) -> str:  # type: ignore[override]  # a class attribute there, named per run here
        """``vegas_<run id>[_<instance>]``, known once :meth:`setup` ran."""
        if self.cc is None:
            raise RuntimeError(f"scheme {self.name}: its congestion control is named per run "
                               f"({self.cc_variant}_<run id>); set the scheme up first")
        return self.cc.name

    def _setup_server(self, ctx: SchemeContext) -> None:
        res = ctx.resources
        role = "bv" + ctx.instance
        bpffs = BpffsMount(ctx.run_dir / res.name(role), res.name(role), ledger=res.ledger)
        self.stack.callback(bpffs.close)
        cc = CongestionControl(bpffs, self.cc_variant, name=cc_name(self.cc_variant, res.run_id, ctx.instance),
                               ledger=res.ledger)
        self.stack.callback(cc.close)
        self.cc = cc
        # Set by the CC, so that the namespace leaves it before it is unregistered.
        if ctx.namespace_default:
            cc.set_namespace_default(ctx.server_ns)

    def _set_default_cc(self, ctx: SchemeContext) -> None:
        pass  # done by CongestionControl.set_namespace_default in _setup_server
