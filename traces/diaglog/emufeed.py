"""The emulator's diag feed in the phone's format: its JSON messages as MobileInsight shapes,
as ``.mi2log`` bytes, and back from a byte stream.

``clawbed-emu`` writes each UE's feed twice: JSON lines (``diag-ue<N>.jsonl``, the cell's
records in MobileInsight's names) and log packets in HDLC frames (``diag-ue<N>.mi2log``,
served live on a TCP port and optionally a pseudo-terminal; ``emulator/DIAG_FEED.md``). The
Rust writer (``emulator/dataplane/src/diag/mi2log.rs``) and this module agree byte for byte:
:func:`encode_feed_message` of a JSON line gives exactly the frame the emulator wrote for it
(``tests/test_diag_mi2log_crosslang.py``). The mapping, message by message (versions are the
2018 Pixel XL log's):

- ``LTE_PHY_PDSCH_Stat_Indication`` → 0xB173 v24, one record: ``TB Size`` + 3 (the 24-bit
  transport-block CRC, as real logs count it; capped at 65 535), ``HARQ ID`` mod 16 (4 bits),
  ``Did Recombining`` Yes for a retransmission (RV ≠ 0), RNTI C-RNTI, PCell, the rest 0.
- ``LTE_PHY_Serv_Cell_Measurement`` → 0xB193 v1, one sub-packet of version 22 (492 bytes):
  E-ARFCN 0, one cell, PCI 0, PCell, serving; RSRP/RSRQ/RSSI quantised to 1/16 dB and
  clamped to the format's ranges (RSRQ −30 … +33.9 dB), the per-antenna fields equal to the
  combined ones; ``FTL SNR`` to 0.1 dB, and a null SNR (open-loop modes) as raw 0 (−20 dB,
  the format's floor), which :mod:`clawbed.claw.client.feed` reads as "no indication". The
  clawbed extra ``channel_mcs`` has no field in the format; a reader gets it back from the
  SNR (the emulator reports SNR = channel MCS − 6 dB exactly).
- ``LTE_MAC_DL_Transport_Block`` → 0xB063 v1, one sub-packet (id 7) of version 4 with the
  message's 0 or 1 sample; ``DL TBS (bytes)`` (without the CRC) and ``Padding`` capped at
  65 535, ``RLC PDUs`` at 255, ``HDR LEN`` 0.
- ``LTE_RLC_DL_Stats`` → 0xB087 v1, one sub-packet 0x42 of version 3 (276 bytes): one radio
  bearer (``Rb Cfg Idx`` 33, AM) with the feed's counters, the same in the "Rst" copies;
  ``RLC PDCP Q Full Count`` (per bearer in the JSON feed) summed into the sub-packet's field.
- ``LTE_PDCP_DL_Stats`` → 0xB0A4 v1, one sub-packet 0xC4 of version 2 (184 bytes): one bearer
  (``PDCP Hdr Len`` 1) with ``Num PDU Dups`` and ``Num PDU Out of Win``; ``Num Offload Q Full
  Count`` in the sub-packet. Counters wrap at 2**32 (the format's 32-bit fields).

Each message is one log packet stamped with the JSON ``timestamp`` (the subframe's start) in
diag ticks: ``round((timestamp − 315 964 800) × 52 428 800)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO

from clawbed.traces.diaglog.encode import encode_message
from clawbed.traces.diaglog.frames import FLAG_BYTE, Defect
from clawbed.traces.diaglog.log import DecodeStats, LogPacket, decode_bytes

U16_MAX = 0xFFFF
TB_CRC_BYTES = 3
#: ``Rb Cfg Idx`` of the one data bearer (the Pixel XL log's value).
RB_CFG_IDX = 33
PDCP_HDR_LEN = 1
COUNTER_MOD = 1 << 32

PDSCH_STAT = "LTE_PHY_PDSCH_Stat_Indication"
SERV_CELL_MEASUREMENT = "LTE_PHY_Serv_Cell_Measurement"
MAC_DL_TRANSPORT_BLOCK = "LTE_MAC_DL_Transport_Block"
RLC_DL_STATS = "LTE_RLC_DL_Stats"
PDCP_DL_STATS = "LTE_PDCP_DL_Stats"


def _tb(tb: Mapping[str, Any]) -> dict[str, Any]:
    rv = int(tb.get("RV", 0))
    return {**tb, "HARQ ID": int(tb["HARQ ID"]) % 16,
            "TB Size": min(int(tb["TB Size"]) + TB_CRC_BYTES, U16_MAX),
            "Did Recombining": "Yes" if rv else "No"}


def _measurement(sp: Mapping[str, Any]) -> dict[str, Any]:
    return {"E-ARFCN": 0, "Num-of-cells": 1, "Physical Cell ID": 0, "Serving Cell Index": "PCell",
            "Is Serving Cell": 1, "Current SFN": sp["Current SFN"],
            "Current Subframe Number": sp["Current Subframe Number"],
            "RSRP": sp.get("RSRP"), "RSRQ": sp.get("RSRQ"), "RSSI": sp.get("RSSI"),
            "FTL SNR Rx[0]": sp.get("FTL SNR Rx[0]")}


def _mac_sample(s: Mapping[str, Any]) -> dict[str, Any]:
    return {"Sub Id": 0, "Cell Id": 0, "SFN": s["SFN"], "Sub-FN": s["Sub-FN"], "RNTI Type": "C-RNTI",
            "HARQ ID": int(s["HARQ ID"]) % 256, "PMCH ID": 0,
            "DL TBS (bytes)": min(int(s["DL TBS (bytes)"]), U16_MAX),
            "RLC PDUs": min(int(s.get("RLC PDUs", 0)), 255),
            "Padding (bytes)": min(int(s.get("Padding (bytes)", 0)), U16_MAX), "HDR LEN": 0}


def feed_to_mobileinsight(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message of the emulator's JSON feed in the shape the encoder (and MobileInsight's
    decoder) has for the chosen versions (the module doc says what is set how)."""
    kind = message.get("type_id")
    head = {"type_id": kind, "timestamp": message["timestamp"]}
    if kind == PDSCH_STAT:
        records = [{**r, "Transport Blocks": [_tb(tb) for tb in r.get("Transport Blocks", ())]}
                   for r in message["Records"]]
        return {**head, "Records": records}
    if kind == SERV_CELL_MEASUREMENT:
        return {**head, "Subpackets": [_measurement(sp) for sp in message["Subpackets"]]}
    if kind == MAC_DL_TRANSPORT_BLOCK:
        return {**head, "Subpackets": [{"Samples": [_mac_sample(s) for s in message["Samples"]]}]}
    if kind == RLC_DL_STATS:
        bearers = message["RB Stats"]
        rbs = [{**{k: int(v) % COUNTER_MOD for k, v in b.items() if k != "RLC PDCP Q Full Count"},
                "Rb Cfg Idx": RB_CFG_IDX, "Mode": "AM"} for b in bearers]
        for rb in rbs:  # the "since reset" copies: never reset
            rb.update({f"{k} Rst": v for k, v in list(rb.items()) if k not in ("Rb Cfg Idx", "Mode")})
        q_full = sum(int(b.get("RLC PDCP Q Full Count", 0)) for b in bearers) % COUNTER_MOD
        return {**head, "Subpackets": [{"RLC PDCP Q Full Count": q_full, "RLCDL Error Count": 0, "RBs": rbs}]}
    if kind == PDCP_DL_STATS:
        rb = {"Rb Cfg Idx": RB_CFG_IDX, "Mode": "AM", "PDCP Hdr Len": PDCP_HDR_LEN}
        for name in ("Num PDU Dups", "Num PDU Out of Win"):
            rb[name] = rb[f"{name} Rst"] = int(message.get(name, 0)) % COUNTER_MOD
        return {**head, "Subpackets": [{
            "Num Errors": 0, "Num Offload Q Full Count": int(message["Num Offload Q Full Count"]) % COUNTER_MOD,
            "Num Packet Dropped Offload Q Full": 0, "RBs": [rb]}]}
    raise ValueError(f"not a message of the emulator's diag feed: type {kind!r}")


def encode_feed_message(message: Mapping[str, Any]) -> bytes:
    """The framed log packet the emulator writes for one message of its JSON feed."""
    return encode_message(feed_to_mobileinsight(message))


def write_feed_mi2log(messages: Iterable[Mapping[str, Any]], out: BinaryIO) -> int:
    """Write the JSON feed's messages as ``.mi2log`` bytes; returns how many."""
    n = 0
    for m in messages:
        out.write(encode_feed_message(m))
        n += 1
    return n


class Mi2logStream:
    """Incremental decoder of a diag byte stream (a phone's diag port, the emulator's mi2log
    feed): give it bytes as they arrive, get the decoded messages of every frame completed.

    A frame cut by the start of the stream (a reader that connected mid-frame would not:
    the emulator starts every subscriber at a frame boundary) or damaged on the way is a
    defect, counted and named as :func:`log.decode_bytes` names it, and decoding goes on."""

    def __init__(self, codes: Iterable[int] | None = None) -> None:
        self._codes = None if codes is None else set(codes)
        self._pending = b""
        self._offset = 0  # stream offset of _pending[0]
        self.stats = DecodeStats()
        self.defects: list[Defect] = []

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The messages of the frames ``data`` completes, in order."""
        buf = self._pending + data
        end = buf.rfind(FLAG_BYTE)
        if end < 0:
            self._pending = buf
            return []
        whole, self._pending = buf[:end + 1], buf[end + 1:]
        out: list[dict[str, Any]] = []

        def keep(p: LogPacket) -> None:
            out.append(p.message)

        log = decode_bytes(whole, codes=self._codes, on_packet=keep)
        base = self._offset
        self._offset += len(whole)
        for d in log.defects:
            self.defects.append(Defect(d.offset + base, d.kind, d.detail, d.log_code, d.version))
        self._add(log.stats)
        return out

    def _add(self, s: DecodeStats) -> None:
        t = self.stats
        t.bytes += s.bytes
        for name in ("frames", "empty", "bad_crc", "bad_escape", "short", "truncated"):
            setattr(t.frames, name, getattr(t.frames, name) + getattr(s.frames, name))
        for name in ("log_packets", "debug_frames", "custom_frames", "command_frames",
                     "multi_sim_unwrapped", "other_subscription"):
            setattr(t, name, getattr(t, name) + getattr(s, name))
        for name in ("decoded", "not_decoded", "unknown_versions", "defects_by_kind"):
            getattr(t, name).update(getattr(s, name))

    @property
    def pending_bytes(self) -> int:
        """Bytes of a frame not yet terminated."""
        return len(self._pending)


def read_feed_mi2log(data: bytes) -> Iterator[dict[str, Any]]:
    """The decoded messages of a whole ``.mi2log`` feed file."""
    stream = Mi2logStream()
    yield from stream.feed(data)
