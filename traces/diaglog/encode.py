"""Encoder of diag logs: log packets in HDLC frames, and the bodies of 0xB173 (version 24),
0xB063 (version 1, sub-packet version 4), 0xB193 (version 1, sub-packet version 22), 0xB087
(version 1, sub-packet 0x42 version 3) and 0xB0A4 (version 1, sub-packet 0xC4 version 2)
from MobileInsight-shaped dicts.

The versions are those of the 2018 Pixel XL log (the newest set a public decoder reads
and a real log carries together). ``TB Size`` is written as given: bytes *including* the
3-byte transport-block CRC, as real logs have it (36.213 TBS bits / 8 + 3); ``DL TBS
(bytes)`` of 0xB063 is the MAC PDU without it. A field missing from a dict takes the
value a phone logs for a plain unicast block (``HSIC Enabled`` Disabled, ``RNTI Type``
C-RNTI, ``PMCH ID``/``Area ID`` 0, ``Did Recombining`` Yes for a retransmission (RV ≠ 0)
and No for a first transmission, …); a value that does not fit its bits is a ValueError
naming the field, never silently cut. The exceptions are the measurements of 0xB193, which
are quantised to the format's steps and clamped to its ranges (a phone reports no more), and
the RLC/PDCP counters, which wrap at 2**32 as a modem's 32-bit counters do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

from clawbed.traces.diaglog.frames import encode_frame
from clawbed.traces.diaglog.log import LOG_HEADER_BYTES, LOG_PACKET, unix_s_to_ticks
from clawbed.traces.diaglog.messages import (
    ACK_NACK,
    B193_SUBPACKET_ID,
    CRC_RESULTS,
    DID_RECOMBINING,
    DISCARDED_PRESENT,
    HSIC,
    LTE_MAC_DL_TB,
    LTE_PDCP_DL_STATS,
    LTE_PHY_PDSCH_STAT,
    LTE_PHY_SERV_CELL_MEAS,
    LTE_RLC_DL_STATS,
    MAC_RNTI_TYPES,
    MODULATIONS,
    PDCP_DL_PAYLOAD_FMT,
    PDCP_DL_RB_FMT,
    PDCP_DL_SUBPACKET_ID,
    PDSCH_RNTI_TYPES,
    RLC_DL_PAYLOAD_FMT,
    RLC_DL_RB_FMT,
    RLC_DL_SUBPACKET_ID,
    RLC_MODES,
    TYPE_NAMES,
    cell_index_of,
)

B173_VERSION = 24
B063_VERSION = 1
B063_SUBPACKET_VERSION = 4
B063_SUBPACKET_ID = 7
B193_VERSION = 1
B193_SUBPACKET_VERSION = 22
#: Declared size of a v22 sub-packet (header included), fixed per version (the Pixel XL's).
B193_SUBPACKET_BYTES = 492
STATS_VERSION = 1
B087_SUBPACKET_VERSION = 3
B0A4_SUBPACKET_VERSION = 2
MAX_LOG_ITEM_BYTES = 0xFFFF


def _inverse(names: Mapping[int, str] | tuple[str, ...]) -> dict[str, int]:
    items = names.items() if isinstance(names, Mapping) else enumerate(names)
    return {v: k for k, v in items}


_PDSCH_RNTI = _inverse(PDSCH_RNTI_TYPES)
_MAC_RNTI = _inverse(MAC_RNTI_TYPES)
_MODULATION = _inverse(MODULATIONS)
_CRC = _inverse(CRC_RESULTS)
_DISCARDED = _inverse(DISCARDED_PRESENT)
_RECOMBINING = _inverse(DID_RECOMBINING)
_HSIC = _inverse(HSIC)
_ACK = _inverse(ACK_NACK)


def _uint(d: Mapping[str, Any], name: str, bits: int, default: int | None = None) -> int:
    value = d.get(name, default)
    if value is None:
        raise ValueError(f"field {name!r} missing")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (1 << bits):
        raise ValueError(f"field {name!r} = {value!r} does not fit {bits} bits")
    return value


def _named(d: Mapping[str, Any], name: str, table: dict[str, int], default: str) -> int:
    value = d.get(name, default)
    if value not in table:
        raise ValueError(f"field {name!r} = {value!r}: not one of {sorted(table)}")
    return table[value]


def _modulation_for(mcs: int) -> str:
    """Modulation of a new transmission at ``mcs`` (36.213 Table 7.1.7.1-1, 64QAM table)."""
    return "QPSK" if mcs < 10 else "16QAM" if mcs < 17 else "64QAM"


def encode_log_packet(log_code: int, ticks: int, body: bytes) -> bytes:
    """A log packet payload (not yet framed): 0x10 0x00, len, len, code, timestamp, body."""
    length = LOG_HEADER_BYTES - 4 + len(body)
    if length > MAX_LOG_ITEM_BYTES:
        raise ValueError(f"log body of {len(body)} bytes is too long for one packet")
    header = bytes((LOG_PACKET, 0)) + length.to_bytes(2, "little") * 2
    return header + log_code.to_bytes(2, "little") + ticks.to_bytes(8, "little") + body


def _b173_tb(tb: Mapping[str, Any]) -> bytes:
    crc = _named(tb, "CRC Result", _CRC, "Pass")
    if "ACK/NACK Decision" in tb and _named(tb, "ACK/NACK Decision", _ACK, "ACK") != crc:
        raise ValueError("field 'ACK/NACK Decision' disagrees with 'CRC Result' (it is its copy)")
    b0 = _uint(tb, "HARQ ID", 4) | _uint(tb, "RV", 2, 0) << 4 | _uint(tb, "NDI", 1, 0) << 6 | crc << 7
    rv = _uint(tb, "RV", 2, 0)
    b1 = (_named(tb, "RNTI Type", _PDSCH_RNTI, "C-RNTI") | _uint(tb, "TB Index", 1, 0) << 4
          | _named(tb, "Discarded reTx Present", _DISCARDED, "None") << 5
          | _named(tb, "Did Recombining", _RECOMBINING, "Yes" if rv else "No") << 6)
    mcs = _uint(tb, "MCS", 8)
    modulation = _named(tb, "Modulation Type", _MODULATION, _modulation_for(mcs))
    return (bytes((b0, b1)) + _uint(tb, "TB Size", 16).to_bytes(2, "little")
            + bytes((mcs, _uint(tb, "Num RBs", 8), modulation, 0)))


def encode_b173(records: Iterable[Mapping[str, Any]]) -> bytes:
    """Body of a 0xB173 version-24 packet holding ``records`` (MobileInsight's record dicts)."""
    out = bytearray()
    n = 0
    for rec in records:
        n += 1
        tbs = list(rec.get("Transport Blocks", ()))
        if len(tbs) > 2:
            raise ValueError(f"record {n}: {len(tbs)} transport blocks (at most 2)")
        n_tbs = _uint(rec, "Num Transport Blocks Present", 8, len(tbs))
        if n_tbs != len(tbs):
            raise ValueError(f"record {n}: 'Num Transport Blocks Present' {n_tbs} but "
                             f"{len(tbs)} blocks given")
        cell = cell_index_of(rec.get("Serving Cell Index", "PCell"))
        if not 0 <= cell <= 7:
            raise ValueError(f"record {n}: field 'Serving Cell Index' = "
                             f"{rec.get('Serving Cell Index')!r}")
        sf = _uint(rec, "Subframe Num", 4) | _uint(rec, "Frame Num", 12) << 4
        out += sf.to_bytes(2, "little")
        out += bytes((_uint(rec, "Num RBs", 8), _uint(rec, "Num Layers", 8, 1), n_tbs,
                      cell | _named(rec, "HSIC Enabled", _HSIC, "Disabled") << 3))
        for k in range(2):  # two slots always; an absent block is zeros
            out += _b173_tb(tbs[k]) if k < len(tbs) else bytes(8)
        out += bytes((_uint(rec, "PMCH ID", 8, 0), _uint(rec, "Area ID", 8, 0)))
    if n > 255:
        raise ValueError(f"{n} records: at most 255 in one packet")
    return bytes((B173_VERSION, n, 0, 0)) + bytes(out)


def encode_b063(samples: Iterable[Mapping[str, Any]]) -> bytes:
    """Body of a 0xB063 packet (version 1, one sub-packet of version 4) holding ``samples``.

    The MAC sub-headers are not known here, so each sample is written with ``HDR LEN`` 0.
    """
    out = bytearray()
    n = 0
    for s in samples:
        n += 1
        if s.get("HDR LEN", 0) != 0:
            raise ValueError(f"sample {n}: 'HDR LEN' must be 0 (MAC sub-headers are not encoded)")
        sf = _uint(s, "Sub-FN", 4) | _uint(s, "SFN", 12) << 4
        out += bytes((_uint(s, "Sub Id", 8, 0), _uint(s, "Cell Id", 8, 0)))
        out += sf.to_bytes(2, "little")
        if s.get("Area ID", 0) != 0:
            raise ValueError(f"sample {n}: 'Area ID' must be 0 (the layout has no bits for it)")
        out += bytes((_named(s, "RNTI Type", _MAC_RNTI, "C-RNTI"), _uint(s, "HARQ ID", 8)))
        out += _uint(s, "PMCH ID", 16, 0).to_bytes(2, "little")
        out += _uint(s, "DL TBS (bytes)", 16).to_bytes(2, "little")
        out += bytes((_uint(s, "RLC PDUs", 8, 0),))
        out += _uint(s, "Padding (bytes)", 16, 0).to_bytes(2, "little")
        out += b"\x00"  # HDR LEN
    size = 5 + len(out)
    if n > 255 or size > 0xFFFF:
        raise ValueError(f"{n} samples do not fit one sub-packet")
    sub = bytes((B063_SUBPACKET_ID, B063_SUBPACKET_VERSION)) + size.to_bytes(2, "little") + bytes((n,))
    return bytes((B063_VERSION, 1, 0, 0)) + sub + bytes(out)


# --- 0xB193 ----------------------------------------------------------------------------------
# v22 fields: (name, offset in the sub-packet body, lo bit, hi bit, kind); as messages.B193_FIELDS.
_B193_V22 = (("RSRP Rx[0]", 24, 10, 21, "rsrp"), ("RSRP Rx[1]", 28, 12, 23, "rsrp"),
             ("RSRP", 36, 12, 23, "rsrp"), ("RSRQ Rx[0]", 40, 12, 21, "rsrq"),
             ("RSRQ Rx[1]", 44, 0, 9, "rsrq"), ("RSRQ", 44, 10, 19, "rsrq"),
             ("RSSI", 60, 0, 10, "rssi"),
             ("FTL SNR Rx[0]", 84, 0, 8, "snr"), ("FTL SNR Rx[1]", 84, 9, 17, "snr"))
#: kind → (offset, step): raw = value's steps above the offset (messages._scaled inverted).
_SCALES = {"rsrp": (-180.0, 0.0625), "rsrq": (-30.0, 0.0625), "rssi": (-110.0, 0.0625), "snr": (-20.0, 0.1)}
#: Where a combined value stands in for a per-antenna one the message does not give.
_FALLBACK = {"RSRP Rx[0]": "RSRP", "RSRP Rx[1]": "RSRP", "RSRQ Rx[0]": "RSRQ", "RSRQ Rx[1]": "RSRQ",
             "FTL SNR Rx[1]": "FTL SNR Rx[0]"}


def quantise(value: Any, kind: str, bits: int) -> int:
    """The raw field of a measurement: ⌊(value − offset) / step + ½⌋ clamped to [0, 2**bits − 1];
    a missing or non-finite value is raw 0 (the format's floor: e.g. FTL SNR −20 dB). The
    emulator's Rust writer computes the same expression in the same order (IEEE-754 doubles),
    so both give the same raw value."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    x = (float(value) - _SCALES[kind][0]) / _SCALES[kind][1] + 0.5
    if not x == x or x <= 0.0:  # NaN, or below the floor
        return 0
    top = (1 << bits) - 1
    return top if x >= top + 1 else min(int(x), top)


def _b193_v22(sp: Mapping[str, Any]) -> bytes:
    body = bytearray(B193_SUBPACKET_BYTES - 4)
    body[0:4] = _uint(sp, "E-ARFCN", 32, 0).to_bytes(4, "little")
    body[4:6] = _uint(sp, "Num-of-cells", 16, 1).to_bytes(2, "little")
    cell = cell_index_of(sp.get("Serving Cell Index", "PCell"))
    if not 0 <= cell <= 7:
        raise ValueError(f"field 'Serving Cell Index' = {sp.get('Serving Cell Index')!r}")
    pci = _uint(sp, "Physical Cell ID", 9, 0) | cell << 9 | _uint(sp, "Is Serving Cell", 1, 1) << 12
    body[8:10] = pci.to_bytes(2, "little")
    sfn = _uint(sp, "Current SFN", 10) | _uint(sp, "Current Subframe Number", 4) << 10
    body[12:14] = sfn.to_bytes(2, "little")
    for name, off, lo, hi, kind in _B193_V22:
        value = sp.get(name, sp.get(_FALLBACK.get(name, name)))
        word = int.from_bytes(body[off:off + 4], "little") | quantise(value, kind, hi - lo + 1) << lo
        body[off:off + 4] = word.to_bytes(4, "little")
    return bytes((B193_SUBPACKET_ID, B193_SUBPACKET_VERSION)) + B193_SUBPACKET_BYTES.to_bytes(2, "little") + body


def encode_b193(subpackets: Iterable[Mapping[str, Any]]) -> bytes:
    """Body of a 0xB193 packet (version 1) holding ``subpackets``, each written as a
    Serving_Cell_Measurement_Result of sub-packet version 22 (492 bytes)."""
    subs = [_b193_v22(sp) for sp in subpackets]
    if len(subs) > 255:
        raise ValueError(f"{len(subs)} sub-packets: at most 255 in one packet")
    return bytes((B193_VERSION, len(subs), 0, 0)) + b"".join(subs)


# --- 0xB087 and 0xB0A4: cumulative statistics, from the decoders' format tables -------------------

_RLC_MODE = _inverse(RLC_MODES)


def _by_fmt(fmt: tuple[tuple[str | None, int], ...], d: Mapping[str, Any], out: bytearray) -> None:
    for name, size in fmt:
        value = 0 if name is None else d.get(name, 0)
        if name == "Mode":
            value = _named(d, "Mode", _RLC_MODE, "AM")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"field {name!r} = {value!r}: not a counter")
        out += (value % (1 << (8 * size))).to_bytes(size, "little")


def _stats_body(subpackets: Iterable[Mapping[str, Any]], sub_id: int, sub_ver: int,
                payload_fmt: tuple[tuple[str | None, int], ...],
                rb_fmt: tuple[tuple[str | None, int], ...]) -> bytes:
    out = bytearray()
    n = 0
    for sp in subpackets:
        n += 1
        rbs = list(sp.get("RBs", ()))
        if sp.get("Num RBs", len(rbs)) != len(rbs):
            raise ValueError(f"sub-packet {n}: 'Num RBs' {sp.get('Num RBs')} but {len(rbs)} given")
        body = bytearray()
        _by_fmt(payload_fmt, {**sp, "Num RBs": len(rbs)}, body)
        for rb in rbs:
            _by_fmt(rb_fmt, rb, body)
        body += bytes(-(len(body) + 4) % 4)  # sizes are multiples of 4 (the Pixel XL's are)
        size = 4 + len(body)
        if size > 0xFFFF:
            raise ValueError(f"sub-packet {n} is too long")
        out += bytes((sub_id, sub_ver)) + size.to_bytes(2, "little") + body
    if n > 255:
        raise ValueError(f"{n} sub-packets: at most 255 in one packet")
    return bytes((STATS_VERSION, n, 0, 0)) + bytes(out)


def encode_b087(subpackets: Iterable[Mapping[str, Any]]) -> bytes:
    """Body of a 0xB087 LTE RLC DL Stats packet (version 1, sub-packets 0x42 version 3)."""
    return _stats_body(subpackets, RLC_DL_SUBPACKET_ID, B087_SUBPACKET_VERSION, RLC_DL_PAYLOAD_FMT,
                       RLC_DL_RB_FMT[B087_SUBPACKET_VERSION])


def encode_b0a4(subpackets: Iterable[Mapping[str, Any]]) -> bytes:
    """Body of a 0xB0A4 LTE PDCP DL Stats packet (version 1, sub-packets 0xC4 version 2)."""
    return _stats_body(subpackets, PDCP_DL_SUBPACKET_ID, B0A4_SUBPACKET_VERSION, PDCP_DL_PAYLOAD_FMT,
                       PDCP_DL_RB_FMT[B0A4_SUBPACKET_VERSION])


_ENCODERS = {
    TYPE_NAMES[LTE_PHY_PDSCH_STAT]: (LTE_PHY_PDSCH_STAT, lambda m: encode_b173(m.get("Records", ()))),
    TYPE_NAMES[LTE_MAC_DL_TB]: (LTE_MAC_DL_TB, lambda m: encode_b063(
        m["Samples"] if "Samples" in m else
        [x for sp in m.get("Subpackets", ()) for x in sp.get("Samples", ())])),
    TYPE_NAMES[LTE_PHY_SERV_CELL_MEAS]: (LTE_PHY_SERV_CELL_MEAS, lambda m: encode_b193(m.get("Subpackets", ()))),
    TYPE_NAMES[LTE_RLC_DL_STATS]: (LTE_RLC_DL_STATS, lambda m: encode_b087(m.get("Subpackets", ()))),
    TYPE_NAMES[LTE_PDCP_DL_STATS]: (LTE_PDCP_DL_STATS, lambda m: encode_b0a4(m.get("Subpackets", ()))),
}
#: Message names (``type_id``) the encoder writes.
ENCODED_TYPES = frozenset(_ENCODERS)


def encode_message(message: Mapping[str, Any]) -> bytes:
    """One framed log packet from a MobileInsight-shaped message (``type_id``, ``timestamp``
    in Unix s, and its fields; a 0xB063 message may give ``Samples`` at the top level as the
    project's JSON feed does, or inside ``Subpackets``)."""
    entry = _ENCODERS.get(message.get("type_id", ""))
    if entry is None:
        raise ValueError(f"cannot encode message type {message.get('type_id')!r} "
                         f"(encoded: {', '.join(sorted(_ENCODERS))})")
    code, body_of = entry
    return encode_frame(encode_log_packet(code, unix_s_to_ticks(float(message["timestamp"])),
                                          body_of(message)))


def write_mi2log(messages: Iterable[Mapping[str, Any]], out: BinaryIO) -> int:
    """Write the messages MobileInsight's types of which are encoded here to ``out`` as a
    ``.mi2log`` stream, skipping the others; returns how many were written."""
    n = 0
    for m in messages:
        if m.get("type_id") in ENCODED_TYPES:
            out.write(encode_message(m))
            n += 1
    return n
