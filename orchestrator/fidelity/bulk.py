"""The purpose-built experiments: bulk flows, pings and handshakes over the emulated cell,
scored from the server's ``TCP_INFO`` samples, the flows' own end-of-flow ``TCP_INFO`` and
the emulator's ground truth (``truth.cbcol``, ``packets.cbcol``).

Each experiment is a function of a :class:`~.harness.RowContext` that fills the row's
:class:`~.results.Outcome` (checks, metrics, figure); :data:`EXPERIMENTS` maps the names the
row files use to them.

The experiments live by what they study: :mod:`.queueing` (LTE-1, BB-1, BB-2), :mod:`.cellstats`
(LTE-2, LTE-4), :mod:`.observers` (CLAW-3, LTE-6), :mod:`.radio` (LTE-3, WWAN-3) and :mod:`.rwnd`
(LTE-8, BB-3, BB-4, BB-6); the cell they share is :func:`.harness._rate_cell`.
"""

from __future__ import annotations

from collections.abc import Callable

from clawbed.orchestrator.fidelity.cellstats import distributions, transport_loss
from clawbed.orchestrator.fidelity.harness import RowContext
from clawbed.orchestrator.fidelity.observers import diag_fidelity, passive_bw
from clawbed.orchestrator.fidelity.observers import estimate_bias_cause as estimate_bias_cause
from clawbed.orchestrator.fidelity.queueing import bufferbloat, inflight_vs_bdp, rtt_vs_inflight
from clawbed.orchestrator.fidelity.radio import _shift_ci as _shift_ci
from clawbed.orchestrator.fidelity.radio import rrc_promotion, stall_spurious
from clawbed.orchestrator.fidelity.radio import stall_runs as stall_runs
from clawbed.orchestrator.fidelity.results import Outcome
from clawbed.orchestrator.fidelity.rwnd import drwa, flat_tcp, long_path_caps, rwnd_throttle

EXPERIMENTS: dict[str, Callable[[RowContext], Outcome]] = {
    "rtt_vs_inflight": rtt_vs_inflight, "inflight_vs_bdp": inflight_vs_bdp, "bufferbloat": bufferbloat,
    "distributions": distributions, "transport_loss": transport_loss, "diag_fidelity": diag_fidelity,
    "rrc_promotion": rrc_promotion, "rwnd_throttle": rwnd_throttle, "flat_tcp": flat_tcp,
    "long_path_caps": long_path_caps, "drwa": drwa, "passive_bw": passive_bw, "stall_spurious": stall_spurious,
}
