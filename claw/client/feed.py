"""From the diag feed's messages (MobileInsight's decoded names, ``docs/diag-feed.md``;
the emulator's ``emulator/cell/src/diag.rs`` is the source of the exact fields) to what the
CLAW client needs: per subframe the UE's own RBs, MCS and layers; RSRQ measurements; the
channel-quality MCS; and loss events from the cumulative RLC / PDCP counters.

Fields and units read:

- ``LTE_PHY_PDSCH_Stat_Indication``: per record ``Frame Num`` (SFN), ``Subframe Num``,
  ``Num RBs`` (S_k, RBs of the subframe), ``Num Layers``, ``Serving Cell Index`` (only the
  PCell counts) and the ``Transport Blocks`` (``MCS``, ``RNTI Type`` C-RNTI). The UE is
  scheduled in a subframe when ``Num RBs`` > 0 and it has a C-RNTI transport block (an
  open-loop feed reports a byte budget on 0 RBs: not a scheduling decision).
- ``LTE_PHY_Serv_Cell_Measurement``: ``Current SFN``, ``Current Subframe Number``,
  ``RSRQ`` (dB), ``RSRP`` (dBm), ``RSSI`` (dBm), ``FTL SNR Rx[0]`` (dB or null).
- ``LTE_RLC_DL_Stats``: ``RB Stats`` (radio bearers) → ``Num Dropped PDU`` (RLC losses),
  ``RLC PDCP Q Full Count`` (BS buffer overflows); cumulative.
- ``LTE_PDCP_DL_Stats``: ``Num Offload Q Full Count`` (overflows); cumulative.

The channel-quality MCS: a ``channel_mcs`` field when a message carries one (a clawbed
extension), else ``FTL SNR Rx[0]`` + 6 dB — the inverse of the emulator's SNR indication
(SNR = MCS − 6 dB, ``SNR_BELOW_MCS_DB`` in ``emulator/cell/src/cell.rs``). An SNR of
−20.0 dB, the diag format's floor (raw 0), is no indication: it is what the emulator's
mi2log feed writes when it has none (open-loop modes).

Two shapes of the same messages are read alike: the emulator's JSON feed (``Samples`` of
the MAC message at the top level, ``RB Stats`` of the RLC statistics, the PDCP counter at the
top level) and MobileInsight's decoding of log packets (:func:`mi2log_messages`, through
the codec ``clawbed.traces.diaglog``: ``Subpackets`` → ``Samples`` / ``RBs``, the queue-full
counters in the sub-packets). So a client reading the emulator's byte stream
(``--feed mi2log``) or a phone's diag port gets the same subframes, measurements and events
as from the JSON feed; only the timestamps differ, by the rounding to diag ticks (1/52 428 800 s) and back
(at most a few tenths of a microsecond).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from clawbed import lte
from clawbed.claw.client.analyzer import SfnClock
from clawbed.traces.diaglog.emufeed import Mi2logStream

PDSCH_STAT = "LTE_PHY_PDSCH_Stat_Indication"
SERV_CELL_MEASUREMENT = "LTE_PHY_Serv_Cell_Measurement"
MAC_DL_TRANSPORT_BLOCK = "LTE_MAC_DL_Transport_Block"
RLC_DL_STATS = "LTE_RLC_DL_Stats"
PDCP_DL_STATS = "LTE_PDCP_DL_Stats"
#: dB between the emulator's channel MCS and the SNR it reports for it.
SNR_BELOW_MCS_DB = 6.0
#: The FTL SNR field's floor (raw 0): no indication.
SNR_FLOOR_DB = -20.0


class FeedFormatError(ValueError):
    """A message lacks a field the client needs, or holds a value of the wrong kind."""


class LossKind(str, enum.Enum):
    """The diag events the client turns into ACK flags."""

    WIRELESS = "rlc-loss"   #: RLC gave up on a packet (flag 0x02)
    OVERFLOW = "overflow"   #: the BS buffer dropped a packet (flag 0x04)


@dataclass(frozen=True)
class PdschSubframe:
    """The UE's PDSCH in one subframe."""

    t_ms: int
    own_rbs: int
    #: MCS of the UE's transport block, None when it was not scheduled.
    mcs: int | None
    layers: int


@dataclass(frozen=True)
class Measurement:
    """A serving-cell measurement."""

    t_ms: int
    rsrq_db: float
    rsrp_dbm: float | None
    rssi_dbm: float | None
    #: Channel-quality MCS derived from the message, if any.
    channel_mcs: int | None

    def n_rb(self) -> int | None:
        """The cell's N_rb by Eq. 1 (RSRQ = N_rb·RSRP/RSSI), snapped to an LTE cell size,
        or None when RSRP or RSSI is missing or the result is no cell size."""
        if self.rsrp_dbm is None or self.rssi_dbm is None:
            return None
        n = 10.0 ** ((self.rsrq_db + self.rssi_dbm - self.rsrp_dbm) / 10.0)
        best = min(lte.VALID_N_RB, key=lambda v: abs(v - n))
        return best if abs(best - n) <= 0.1 * best else None


@dataclass(frozen=True)
class LossEvent:
    """Loss counters went up: ``count`` more packets of ``kind``, reported at diag time
    ``t_ms`` (the latest subframe seen) and Unix time ``unix_s`` (the message's timestamp)."""

    kind: LossKind
    count: int
    t_ms: int | None
    unix_s: float | None


def _get(message: dict[str, Any], key: str) -> Any:
    try:
        return message[key]
    except (KeyError, TypeError):
        raise FeedFormatError(f"{message.get('type_id', '?') if isinstance(message, dict) else '?'}: "
                              f"no field {key!r}") from None


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
        raise FeedFormatError(f"{what}: expected an integer, found {value!r}")
    return int(value)


def _float_or_none(value: Any) -> float | None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def channel_mcs_from_snr_db(snr_db: float) -> int:
    """The emulator's channel MCS back from its SNR indication, clamped to 0..28."""
    return min(max(int(math.floor(snr_db + SNR_BELOW_MCS_DB + 0.5)), 0), lte.MAX_MCS)


class FeedDecoder:
    """Stateful decoder of one UE's feed: unwraps time and differentiates the counters."""

    def __init__(self) -> None:
        self.clock = SfnClock()
        self._rlc_dropped = _Counter()
        # The RLC and PDCP messages count the same overflow drops: an overflow event is an
        # increase of the larger of the two, so one drop is never two events.
        self._rlc_q_full = _Counter()
        self._pdcp_q_full = _Counter()
        self._overflow_reported = 0

    def pdsch(self, message: dict[str, Any]) -> list[PdschSubframe]:
        """The PCell subframes of a PDSCH statistics message."""
        out = []
        for record in _get(message, "Records"):
            if record.get("Serving Cell Index", "PCell") not in ("PCell", 0):
                continue
            t = self.clock.unwrap(_int(_get(record, "Frame Num"), "Frame Num"),
                                  _int(_get(record, "Subframe Num"), "Subframe Num"))
            own = _int(_get(record, "Num RBs"), "Num RBs")
            layers = _int(record.get("Num Layers", 1), "Num Layers")
            mcs_values = [_int(_get(tb, "MCS"), "MCS") for tb in record.get("Transport Blocks", [])
                          if tb.get("RNTI Type", "C-RNTI") == "C-RNTI"]
            mcs = max(mcs_values) if mcs_values and own > 0 else None
            out.append(PdschSubframe(t, own if mcs is not None else 0, mcs, layers))
        return out

    def measurements(self, message: dict[str, Any]) -> list[Measurement]:
        """The measurements of a serving-cell measurement message (those without RSRQ skipped)."""
        out = []
        for sub in _get(message, "Subpackets"):
            rsrq = _float_or_none(sub.get("RSRQ"))
            if rsrq is None:
                continue
            t = self.clock.unwrap(_int(_get(sub, "Current SFN"), "Current SFN"),
                                  _int(_get(sub, "Current Subframe Number"), "Current Subframe Number"))
            channel = message.get("channel_mcs", sub.get("channel_mcs"))
            if channel is None:
                snr = _float_or_none(sub.get("FTL SNR Rx[0]"))
                channel = channel_mcs_from_snr_db(snr) if snr is not None and snr != SNR_FLOOR_DB else None
            else:
                channel = _int(channel, "channel_mcs")
            out.append(Measurement(t, rsrq, _float_or_none(sub.get("RSRP")), _float_or_none(sub.get("RSSI")), channel))
        return out

    @staticmethod
    def subframe_of(message: dict[str, Any]) -> tuple[int, int] | None:
        """(SFN, subframe) a message is about, for the types that say; else None."""
        kind = message.get("type_id")
        try:
            if kind == PDSCH_STAT:
                r = message["Records"][0]
                return int(r["Frame Num"]), int(r["Subframe Num"])
            if kind == SERV_CELL_MEASUREMENT:
                s = message["Subpackets"][0]
                return int(s["Current SFN"]), int(s["Current Subframe Number"])
            if kind == MAC_DL_TRANSPORT_BLOCK:
                samples = message["Samples"] if "Samples" in message else \
                    [x for sp in message.get("Subpackets", ()) for x in sp.get("Samples", ())]
                if samples:
                    return int(samples[0]["SFN"]), int(samples[0]["Sub-FN"])
        except (KeyError, IndexError, TypeError, ValueError):
            return None
        return None

    def loss_events(self, message: dict[str, Any]) -> list[LossEvent]:
        """Events from a cumulative RLC or PDCP statistics message: one per kind whose
        counter went up since the previous report (the first report is the baseline; a
        counter that went down was reset and becomes the new baseline)."""
        kind = message.get("type_id")
        t = self.clock.latest_ms
        unix_s = _float_or_none(message.get("timestamp"))
        events = []
        if kind == RLC_DL_STATS:
            if "RB Stats" in message or "Subpackets" not in message:  # the JSON feed's shape
                bearers = _get(message, "RB Stats")
                counted = bearers
            else:  # MobileInsight's: the queue-full counter is the sub-packet's
                counted = _get(message, "Subpackets")
                bearers = [b for sp in counted for b in sp.get("RBs", ())]
            dropped = sum(_int(_get(b, "Num Dropped PDU"), "Num Dropped PDU") for b in bearers)
            q_full = sum(_int(b.get("RLC PDCP Q Full Count", 0), "RLC PDCP Q Full Count") for b in counted)
            delta = self._rlc_dropped.update(dropped)
            if delta:
                events.append(LossEvent(LossKind.WIRELESS, delta, t, unix_s))
            self._rlc_q_full.update(q_full)
        elif kind == PDCP_DL_STATS:
            holders = [message] if "Subpackets" not in message else message["Subpackets"]
            self._pdcp_q_full.update(sum(_int(_get(h, "Num Offload Q Full Count"), "Num Offload Q Full Count")
                                         for h in holders))
        else:
            return events
        overflow = max(self._rlc_q_full.level, self._pdcp_q_full.level)
        if overflow > self._overflow_reported:
            events.append(LossEvent(LossKind.OVERFLOW, overflow - self._overflow_reported, t, unix_s))
            self._overflow_reported = overflow
        return events


class _Counter:
    """A cumulative counter made continuous: ``level`` counts increases since the first
    report; a report below the previous one is a reset, and counting resumes from it."""

    def __init__(self) -> None:
        self._last: int | None = None
        self.level = 0

    def update(self, value: int) -> int:
        """Take a report; return the increase it shows."""
        last, self._last = self._last, value
        if last is None or value < last:
            return 0
        self.level += value - last
        return value - last


#: Log codes the client reads from a byte stream (0xB173, 0xB193, 0xB063, 0xB087, 0xB0A4).
MI2LOG_CODES = (0xB173, 0xB193, 0xB063, 0xB087, 0xB0A4)


def mi2log_stream() -> Mi2logStream:
    """An incremental decoder of a diag byte stream for the client: feed it bytes, get
    MobileInsight-shaped messages (:class:`FeedDecoder` reads them as the JSON feed's)."""
    return Mi2logStream(codes=MI2LOG_CODES)


def mi2log_messages(data: bytes) -> list[dict[str, Any]]:
    """The messages of a whole ``.mi2log`` byte string (a file of the emulator's feed)."""
    return mi2log_stream().feed(data)
