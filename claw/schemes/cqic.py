"""CQIC (baseline): CLAW's code path with N_f = N_s (the UE's own allocation only), no hybrid
mode and no bottleneck detector — the ``cqic`` congestion control (``claw_cc.bpf.c`` built
with ``-DCLAW_VARIANT_CQIC``, which applies W_claw whatever mode a report asks for) and the
client with ``--variant cqic``."""

from __future__ import annotations

from clawbed.claw.schemes.base import register_scheme
from clawbed.claw.schemes.claw import Claw


@register_scheme
class Cqic(Claw):
    name = "cqic"
    description = "CQIC: W_claw from the UE's own resource blocks only; no hybrid mode, no bottleneck detector"
    cc_variant = "cqic"
    client_variant = "cqic"
    bpffs_role = "bq"
