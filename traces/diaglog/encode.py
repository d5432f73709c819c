"""Encoder of diag logs: log packets in HDLC frames, and the bodies of 0xB173 (version 24)
and 0xB063 (version 1, sub-packet version 4) from MobileInsight-shaped dicts.

The versions are those of the 2018 Pixel XL log (the newest pair a public decoder reads
and a real log carries together). ``TB Size`` is written as given: bytes *including* the
3-byte transport-block CRC, as real logs have it (36.213 TBS bits / 8 + 3); ``DL TBS
(bytes)`` of 0xB063 is the MAC PDU without it. A field missing from a dict takes the
value a phone logs for a plain unicast block (``HSIC Enabled`` Disabled, ``RNTI Type``
C-RNTI, ``PMCH ID``/``Area ID`` 0, …); a value that does not fit its bits is a ValueError
naming the field, never silently cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

from clawbed.traces.diaglog.frames import encode_frame
from clawbed.traces.diaglog.log import LOG_HEADER_BYTES, LOG_PACKET, unix_s_to_ticks
from clawbed.traces.diaglog.messages import (
    ACK_NACK,
    CRC_RESULTS,
    DID_RECOMBINING,
    DISCARDED_PRESENT,
    HSIC,
    LTE_MAC_DL_TB,
    LTE_PHY_PDSCH_STAT,
    MAC_RNTI_TYPES,
    MODULATIONS,
    PDSCH_RNTI_TYPES,
    TYPE_NAMES,
    cell_index_of,
)

B173_VERSION = 24
B063_VERSION = 1
B063_SUBPACKET_VERSION = 4
B063_SUBPACKET_ID = 7
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
    b1 = (_named(tb, "RNTI Type", _PDSCH_RNTI, "C-RNTI") | _uint(tb, "TB Index", 1, 0) << 4
          | _named(tb, "Discarded reTx Present", _DISCARDED, "None") << 5
          | _named(tb, "Did Recombining", _RECOMBINING, "No") << 6)
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


_ENCODERS = {
    TYPE_NAMES[LTE_PHY_PDSCH_STAT]: (LTE_PHY_PDSCH_STAT, lambda m: encode_b173(m.get("Records", ()))),
    TYPE_NAMES[LTE_MAC_DL_TB]: (LTE_MAC_DL_TB, lambda m: encode_b063(
        m["Samples"] if "Samples" in m else
        [x for sp in m.get("Subpackets", ()) for x in sp.get("Samples", ())])),
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
