"""Where a load's time went on the air, from the emulator's ground truth: how much of it a
congestion control could have saved at all.

A PHY-informed sender such as CLAW shortens a load only where the cell had room for the UE and
the base station had nothing of the UE's to send *because the sender's window was full*. Each
1 ms subframe of a load's data phase (its first connection to its end) falls in exactly one
class:

- ``queued``: the UE's base-station queue held data (``queue_bytes`` > 0): the air, not the
  sender, set the pace (the UE got the share the scheduler gives it).
- ``window``: the queue was empty while the server's sender held data back (a flow, at its
  last ``tcp.csv`` sample, with bytes written but not sent — ``notsent_bytes`` > 0: its
  congestion window, pacing or the receiver's window stopped it — or, in runs recorded before
  that column, with data in flight up to its congestion window less one segment): a sender
  that sent sooner would have put data there. This is the room a sender like CLAW has.
- ``app``: the queue was empty and no flow held data back: the server had nothing to send (a
  request, the browser's parsing, a handshake round trip); no congestion control helps.

The sums are ms. A sender that filled every window-limited subframe would still wait out the
``app`` time, so ``window_ms`` bounds what any congestion control can take off the load (the
``queued`` time it could shorten only by a larger share of the cell).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from clawbed.errors import InputError
from clawbed.replay.records import LoadRecord
from clawbed.replay.rundir import read_csv, read_results

#: A flow counts as window-limited when its packets in flight reach its cwnd less this many.
WINDOW_SLACK_PKTS = 1


@dataclass(frozen=True)
class Airtime:
    """One load's data phase split by what held it up, ms (1 ms subframes)."""

    scheme: str
    plt_ms: float
    queued_ms: int
    window_ms: int
    app_ms: int


class _FlowStates:
    """Per flow, the (time, window-limited) samples of ``tcp.csv``, looked up at a time."""

    def __init__(self, tcp: dict[str, list[str]]) -> None:
        self._times: dict[str, list[float]] = {}
        self._limited: dict[str, list[bool]] = {}
        times, flows = tcp.get("t_unix_s", []), tcp.get("flow", [])
        notsent = tcp.get("notsent_bytes") or [""] * len(times)
        for t, flow, unacked, cwnd, held in zip(times, flows, tcp.get("unacked_pkts", []), tcp.get("cwnd_pkts", []),
                                                notsent):
            try:
                at, in_flight, window = float(t), int(unacked or 0), int(cwnd or 0)
                limited = int(held) > 0 if held else window > 0 and in_flight >= window - WINDOW_SLACK_PKTS
            except ValueError:
                continue  # a sample the sampler could not complete
            self._times.setdefault(flow, []).append(at)
            self._limited.setdefault(flow, []).append(limited)

    def window_limited(self, t: float) -> bool:
        for flow, times in self._times.items():
            i = bisect.bisect_right(times, t) - 1
            if i >= 0 and self._limited[flow][i]:
                return True
        return False


def load_airtime(run_dir: Path, record: LoadRecord) -> Airtime | None:
    """The airtime split of one finished load (None: failed, or its series were not kept)."""
    if not record.ok or record.plt_ms is None or record.t_end_unix_s is None or not record.load_dir:
        return None
    load_dir = run_dir / record.load_dir
    truth_path = load_dir / "truth.csv"
    truth, tcp = read_csv(truth_path), read_csv(load_dir / "tcp.csv")
    if not truth.get("t_unix_s"):
        return None
    if "queue_bytes" not in truth:
        raise InputError(f"{truth_path}: no queue_bytes column (not a replay's ground truth)")
    start = record.t_first_flow_unix_s or record.t_start_unix_s or 0.0
    flows = _FlowStates(tcp)
    queued = window = app = 0
    for line, (t, queue_text) in enumerate(zip(truth["t_unix_s"], truth["queue_bytes"]), start=2):
        try:
            at, queue = float(t), int(queue_text)
        except ValueError:
            raise InputError(f"{truth_path}:{line}: t_unix_s {t!r} / queue_bytes {queue_text!r} is not a "
                             f"number") from None
        if at < start or at > record.t_end_unix_s:
            continue
        if queue > 0:
            queued += 1
        elif flows.window_limited(at):
            window += 1
        else:
            app += 1
    return Airtime(record.scheme, record.plt_ms, queued, window, app)


def run_airtime(run_dir: Path) -> dict[int, Airtime]:
    """Every finished load of a run directory by its index in the run (``LoadRecord.load``)."""
    out = {}
    for record in read_results(run_dir):
        split = load_airtime(run_dir, record)
        if split is not None:
            out[record.load] = split
    return out
