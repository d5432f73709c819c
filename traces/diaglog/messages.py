"""Decoders of the log packets the importers use, one function per log code, by version.

Each decoder takes the log body (``body[0]`` is the packet version) and returns the fields
MobileInsight's decoded message has, with its names and value names (see
``shared/docs/diag-log-format.md`` §2–4 for offsets; the 2017 log's decoded XML is the
oracle). A body too short for its layout raises :class:`BodyError` (kind
``truncated_packet``); a version with no known layout raises it with kind
``unknown_version``. Values MobileInsight leaves unnamed are written as it writes them,
``"(MI)Unknown"``, except serving-cell indices above 1, written ``"SCell<n>"`` so that an
importer can still select carrier ``n``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

LTE_PHY_PDSCH_STAT = 0xB173
LTE_PHY_SERV_CELL_MEAS = 0xB193
LTE_MAC_DL_TB = 0xB063
LTE_RLC_DL_STATS = 0xB087
LTE_PDCP_DL_STATS = 0xB0A4

TYPE_NAMES: dict[int, str] = {
    LTE_PHY_PDSCH_STAT: "LTE_PHY_PDSCH_Stat_Indication",
    LTE_PHY_SERV_CELL_MEAS: "LTE_PHY_Serv_Cell_Measurement",
    LTE_MAC_DL_TB: "LTE_MAC_DL_Transport_Block",
    LTE_RLC_DL_STATS: "LTE_RLC_DL_Stats",
    LTE_PDCP_DL_STATS: "LTE_PDCP_DL_Stats",
}

UNKNOWN = "(MI)Unknown"
PDSCH_RNTI_TYPES = {0: "C-RNTI", 2: "P-RNTI", 3: "RA-RNTI", 4: "Temporary-C-RNTI", 5: "SI-RNTI"}
MAC_RNTI_TYPES = {0: "C-RNTI", 1: "SPS-RNTI", 2: "P-RNTI", 3: "RA-RNTI", 4: "Temporary-C-RNTI",
                  5: "SI-RNTI", 6: "TPC-PUSCH-RNTI", 7: "TPC-PUCCH-RNTI", 8: "MBMS RNTI"}
MODULATIONS = {2: "QPSK", 4: "16QAM", 6: "64QAM", 8: "256QAM"}
CRC_RESULTS = ("Fail", "Pass")
ACK_NACK = ("NACK", "ACK")
DISCARDED_PRESENT = ("None", "Present")
DID_RECOMBINING = ("No", "Yes")
HSIC = {0: "Disabled", 1: "Enabled"}
DISCARDED_RETX = {0: "NO_DISCARD", 1: "DISCARD_AND_ACK"}
MAC_SUBPACKET_NAMES = {7: "DL Transport Block"}
B193_SUBPACKET_NAMES = {25: "Serving_Cell_Measurement_Result"}
RLC_MODES = {1: "AM"}


class BodyError(Exception):
    """A log body that cannot be decoded: ``kind`` is ``truncated_packet``,
    ``unknown_version`` or ``bad_value``; ``version`` the version that was met."""

    def __init__(self, kind: str, detail: str, version: int | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.version = version


def cell_index_name(index: int) -> str:
    """MobileInsight's name of a serving-cell index (0 PCell, 1 SCell); ``SCell<n>`` above."""
    return "PCell" if index == 0 else "SCell" if index == 1 else f"SCell{index}"


def cell_index_of(name: str) -> int:
    """Inverse of :func:`cell_index_name` (-1 for a name it does not make)."""
    if name == "PCell":
        return 0
    if name == "SCell":
        return 1
    if name.startswith("SCell") and name[5:].isdigit():
        return int(name[5:])
    return -1


def _need(body: bytes, end: int, what: str, version: int | None) -> None:
    if len(body) < end:
        raise BodyError("truncated_packet", f"{what} needs {end} bytes, body has {len(body)}", version)


# --- 0xB173 LTE PHY PDSCH Stat Indication ---------------------------------------------------

#: version → (record bytes, P1 bytes, TB slot bytes)
B173_LAYOUTS: dict[int, tuple[int, int, int]] = {
    5: (20, 6, 6), 16: (20, 6, 6),
    24: (24, 6, 8), 32: (24, 6, 8), 34: (24, 6, 8),
    36: (40, 12, 12), 37: (40, 12, 12), 40: (40, 12, 12),
}
B173_HEADER_BYTES = 4


def _b173_tb(version: int, b: bytes, o: int) -> dict[str, Any]:
    """One transport-block slot at ``b[o:]``, MobileInsight's field order."""
    b0 = b[o]
    tb: dict[str, Any] = {"HARQ ID": b0 & 0x0F, "RV": (b0 >> 4) & 3, "NDI": (b0 >> 6) & 1,
                          "CRC Result": CRC_RESULTS[b0 >> 7]}
    if version in (5, 16, 24, 32, 34, 36):
        b1 = b[o + 1]
        tb["RNTI Type"] = PDSCH_RNTI_TYPES.get(b1 & 0x0F, UNKNOWN)
        tb["TB Index"] = (b1 >> 4) & 1
        if version == 34:
            tb["Discarded ReTx"] = DISCARDED_RETX.get((b1 >> 5) & 1, UNKNOWN)
        else:
            tb["Discarded reTx Present"] = DISCARDED_PRESENT[(b1 >> 5) & 1]
        tb["Did Recombining"] = DID_RECOMBINING[(b1 >> 6) & 1]
    elif version == 37:
        b1 = b[o + 1]
        tb["RNTI Type"] = PDSCH_RNTI_TYPES.get(b1 & 0x0F, UNKNOWN)
        tb["TB Index"] = (b1 >> 4) & 1
        tb["Discarded reTx Present"] = DISCARDED_PRESENT[(b1 >> 5) & 1]
        tb["Discarded ReTx"] = DISCARDED_RETX.get(b1 >> 6, UNKNOWN)
        tb["Did Recombining"] = DID_RECOMBINING[b[o + 2] & 1]
    else:  # 40
        w = b[o + 1] | (b[o + 2] << 8)
        tb["RNTI Type"] = PDSCH_RNTI_TYPES.get(w & 0x0F, UNKNOWN)
        tb["TB Index"] = (w >> 4) & 1
        tb["Discarded reTx Present"] = DISCARDED_PRESENT[(w >> 5) & 1]
        tb["Discarded ReTx"] = DISCARDED_RETX.get((w >> 6) & 0x0F, UNKNOWN)
        tb["Did Recombining"] = DID_RECOMBINING[(w >> 10) & 1]
    if version <= 34:
        tb["TB Size"] = b[o + 2] | (b[o + 3] << 8)
        tb["MCS"] = b[o + 4]
        tb["Num RBs"] = b[o + 5]
        if version >= 24:
            tb["Modulation Type"] = MODULATIONS.get(b[o + 6], UNKNOWN)
        if version == 34:
            tb["QED2 Interim Status"] = b[o + 7] & 3
            tb["QED Iteration"] = b[o + 7] >> 2
    else:
        tb["TB Size"] = b[o + 4] | (b[o + 5] << 8)
        tb["MCS"] = b[o + 6]
        tb["Num RBs"] = b[o + 7]
        tb["Modulation Type"] = MODULATIONS.get(b[o + 8], UNKNOWN)
        tb["QED2 Interim Status"] = b[o + 9] & 3
        tb["QED Iteration"] = b[o + 9] >> 2
    tb["ACK/NACK Decision"] = ACK_NACK[b0 >> 7]
    return tb


def decode_b173(body: bytes) -> dict[str, Any]:
    """0xB173: ``Version``, ``Num Records``, ``Records`` (one per subframe and cell)."""
    version = body[0]
    layout = B173_LAYOUTS.get(version)
    if layout is None:
        raise BodyError("unknown_version", f"no known layout for 0xB173 version {version}", version)
    rec_bytes, p1_bytes, slot_bytes = layout
    _need(body, B173_HEADER_BYTES, "header", version)
    n = body[1]
    _need(body, B173_HEADER_BYTES + n * rec_bytes, f"{n} records of {rec_bytes} bytes", version)
    records = []
    for i in range(n):
        o = B173_HEADER_BYTES + i * rec_bytes
        sf = body[o] | (body[o + 1] << 8)
        n_tbs = body[o + 4]
        rec: dict[str, Any] = {"Subframe Num": sf & 0x0F, "Frame Num": sf >> 4,
                               "Num RBs": body[o + 2], "Num Layers": body[o + 3],
                               "Num Transport Blocks Present": n_tbs,
                               "Serving Cell Index": cell_index_name(body[o + 5] & 7)}
        if version not in (5, 37, 40):
            rec["HSIC Enabled"] = HSIC.get((body[o + 5] >> 3) & 0x0F, UNKNOWN)
        if version == 37:
            rec["Alt TBS Enabled"] = body[o + 7]
        # Two slots are always reserved; only the first n_tbs hold blocks.
        rec["Transport Blocks"] = [_b173_tb(version, body, o + p1_bytes + k * slot_bytes)
                                   for k in range(min(n_tbs, 2))]
        p2 = o + p1_bytes + 2 * slot_bytes
        rec["PMCH ID"] = body[p2]
        rec["Area ID"] = body[p2 + 1]
        records.append(rec)
    return {"Version": version, "Num Records": n, "Records": records}


# --- 0xB063 LTE MAC DL Transport Block ------------------------------------------------------

B063_SAMPLE_FIXED_BYTES = {2: 12, 4: 14}


def decode_b063(body: bytes) -> dict[str, Any]:
    """0xB063: ``Version``, ``Num SubPkt``, ``Subpackets`` each with ``Samples``."""
    _need(body, 4, "header", None)
    version = body[0]
    if version != 1:
        raise BodyError("unknown_version", f"no known layout for 0xB063 version {version}", version)
    n_sub = body[1]
    subpackets = []
    o = 4
    for _ in range(n_sub):
        _need(body, o + 5, "sub-packet header", version)
        sub_id, sub_ver, size, n_samples = body[o], body[o + 1], body[o + 2] | (body[o + 3] << 8), body[o + 4]
        if size < 5:
            raise BodyError("bad_value", f"sub-packet size {size} < its 5-byte header", version)
        _need(body, o + size, f"sub-packet of {size} bytes", version)
        fixed = B063_SAMPLE_FIXED_BYTES.get(sub_ver)
        if fixed is None:
            raise BodyError("unknown_version", f"no known layout for 0xB063 sub-packet version "
                            f"{sub_ver}", sub_ver)
        end = o + size
        s = o + 5
        samples = []
        for _k in range(n_samples):
            if s + fixed > end:
                raise BodyError("truncated_packet", f"sample {_k} of {n_samples} ends beyond its "
                                f"{size}-byte sub-packet", sub_ver)
            sample: dict[str, Any] = {}
            if sub_ver == 4:
                sample["Sub Id"] = body[s]
                sample["Cell Id"] = body[s + 1]
                s += 2
            sf = body[s] | (body[s + 1] << 8)
            harq = body[s + 3]
            hdr_len = body[s + 11]
            sample.update({
                "Sub-FN": sf & 0x0F, "SFN": sf >> 4,
                "RNTI Type": MAC_RNTI_TYPES.get(body[s + 2], UNKNOWN),
                # MobileInsight reads the whole byte as HARQ ID and leaves Area ID a
                # placeholder (0): no bits of the sample carry it.
                "HARQ ID": harq, "Area ID": 0,
                "PMCH ID": body[s + 4] | (body[s + 5] << 8),
                "DL TBS (bytes)": body[s + 6] | (body[s + 7] << 8),
                "RLC PDUs": body[s + 8],
                "Padding (bytes)": body[s + 9] | (body[s + 10] << 8),
                "HDR LEN": hdr_len,
            })
            samples.append(sample)
            s += 12 + hdr_len
            if s > end:
                raise BodyError("truncated_packet", f"sample {_k}'s {hdr_len} header bytes end "
                                f"beyond its {size}-byte sub-packet", sub_ver)
        subpackets.append({"SubPacket ID": MAC_SUBPACKET_NAMES.get(sub_id, UNKNOWN),
                           "Version": sub_ver, "SubPacket Size": size,
                           "Num Samples": n_samples, "Samples": samples})
        o = end  # the declared size, not the fields read: sub-packets may end in padding
    return {"Version": version, "Num SubPkt": n_sub, "Subpackets": subpackets}


# --- 0xB193 LTE PHY Serving Cell Measurement -------------------------------------------------


def _bits(word: int, lo: int, hi: int) -> int:
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


RSRP_SCALE_DB, RSRP_OFFSET_DBM = 0.0625, -180.0
RSRQ_SCALE_DB, RSRQ_OFFSET_DB = 0.0625, -30.0
RSSI_SCALE_DB, RSSI_OFFSET_DBM = 0.0625, -110.0
#: v35/v40 combined RSRP is (raw + 640) × 0.0625 − 180 (MobileInsight's rule).
COMBINED_RSRP_RAW_OFFSET = 640

# Per sub-packet version, the measurement fields: (name, offset in the sub-packet body,
# lo bit, hi bit, bytes read at the offset, scale kind).
_Field = tuple[str, int, int, int, int, str]
B193_FIELDS: dict[int, tuple[_Field, ...]] = {
    4: (("RSRP Rx[0]", 12, 10, 21, 4, "rsrp"), ("RSRP Rx[1]", 16, 12, 23, 4, "rsrp"),
        ("RSRP", 20, 12, 23, 4, "rsrp"), ("RSRQ Rx[0]", 24, 12, 21, 4, "rsrq"),
        ("RSRQ Rx[1]", 28, 0, 9, 4, "rsrq"), ("RSRQ", 28, 20, 29, 4, "rsrq"),
        ("RSSI Rx[0]", 32, 10, 20, 4, "rssi"), ("RSSI Rx[1]", 32, 21, 31, 4, "rssi"),
        ("RSSI", 36, 0, 10, 4, "rssi"),
        ("FTL SNR Rx[0]", 60, 0, 8, 4, "snr"), ("FTL SNR Rx[1]", 60, 9, 17, 4, "snr")),
    7: (("RSRP Rx[0]", 16, 10, 21, 4, "rsrp"), ("RSRP Rx[1]", 20, 12, 23, 4, "rsrp"),
        ("RSRP", 24, 12, 23, 4, "rsrp"), ("RSRQ Rx[0]", 28, 12, 21, 4, "rsrq"),
        ("RSRQ Rx[1]", 32, 0, 9, 4, "rsrq"), ("RSRQ", 32, 20, 29, 4, "rsrq"),
        ("RSSI", 40, 0, 10, 4, "rssi"),
        ("FTL SNR Rx[0]", 64, 0, 8, 4, "snr"), ("FTL SNR Rx[1]", 64, 9, 17, 4, "snr")),
    18: (("RSRP Rx[0]", 21, 2, 12, 4, "rsrp"), ("RSRP Rx[1]", 25, 4, 14, 4, "rsrp"),
         ("RSRP", 29, 4, 14, 4, "rsrp"), ("RSRQ Rx[0]", 33, 4, 12, 4, "rsrq"),
         ("RSRQ Rx[1]", 37, 2, 11, 4, "rsrq"), ("RSRQ", 37, 12, 21, 4, "rsrq"),
         ("RSSI", 41, 13, 23, 4, "rssi"),
         ("FTL SNR Rx[0]", 68, 0, 8, 4, "snr"), ("FTL SNR Rx[1]", 68, 9, 17, 4, "snr")),
    19: (("RSRP Rx[0]", 24, 10, 21, 4, "rsrp"), ("RSRP Rx[1]", 28, 12, 23, 4, "rsrp"),
         ("RSRP", 32, 12, 23, 4, "rsrp"), ("RSRQ Rx[0]", 36, 12, 21, 4, "rsrq"),
         ("RSRQ Rx[1]", 40, 0, 9, 4, "rsrq"), ("RSRQ", 40, 20, 29, 4, "rsrq"),
         ("RSSI", 48, 0, 10, 4, "rssi"),
         ("FTL SNR Rx[0]", 72, 0, 8, 4, "snr"), ("FTL SNR Rx[1]", 72, 9, 17, 4, "snr")),
    22: (("RSRP Rx[0]", 24, 10, 21, 4, "rsrp"), ("RSRP Rx[1]", 28, 12, 23, 4, "rsrp"),
         ("RSRP", 36, 12, 23, 4, "rsrp"), ("RSRQ Rx[0]", 40, 12, 21, 4, "rsrq"),
         ("RSRQ Rx[1]", 44, 0, 9, 4, "rsrq"), ("RSRQ", 44, 10, 19, 4, "rsrq"),
         ("RSSI", 60, 0, 10, 4, "rssi"),
         ("FTL SNR Rx[0]", 84, 0, 8, 4, "snr"), ("FTL SNR Rx[1]", 84, 9, 17, 4, "snr")),
    24: (("RSRP Rx[0]", 25, 3, 14, 4, "rsrp"), ("RSRP Rx[1]", 29, 4, 15, 4, "rsrp"),
         ("RSRP", 33, 4, 15, 4, "rsrp"), ("RSRQ Rx[0]", 37, 4, 13, 2, "rsrq"),
         ("RSRQ Rx[1]", 40, 0, 9, 2, "rsrq"), ("RSRQ", 42, 4, 13, 2, "rsrq"),
         ("RSSI", 48, 0, 10, 4, "rssi"),
         ("FTL SNR Rx[0]", 72, 0, 8, 4, "snr"), ("FTL SNR Rx[1]", 72, 9, 17, 4, "snr")),
    35: (("RSRP Rx[0]", 24, 10, 21, 4, "rsrp"), ("RSRP Rx[1]", 28, 12, 23, 4, "rsrp"),
         ("RSRP", 36, 12, 23, 4, "rsrp640"), ("RSRQ Rx[0]", 44, 0, 9, 4, "rsrq"),
         ("RSRQ Rx[1]", 44, 20, 29, 4, "rsrq"), ("RSRQ", 52, 0, 9, 4, "rsrq"),
         ("RSSI", 64, 0, 10, 4, "rssi"),
         ("FTL SNR Rx[0]", 88, 0, 8, 4, "snr"), ("FTL SNR Rx[1]", 88, 9, 17, 4, "snr")),
    # v36: MobileInsight's "RSRQ" is bits 0-9 of the RSRQ Rx[0] word, reproduced here so the
    # names mean what they mean in its output (the word @52 holds a different value).
    36: (("RSRP Rx[0]", 24, 10, 21, 4, "rsrp"), ("RSRP Rx[1]", 28, 12, 23, 4, "rsrp"),
         ("RSRP", 40, 0, 11, 4, "rsrp"), ("RSRQ Rx[0]", 44, 0, 9, 4, "rsrq"),
         ("RSRQ Rx[1]", 44, 20, 29, 4, "rsrq"), ("RSRQ", 44, 0, 9, 4, "rsrq")),
    40: (("RSRP Rx[0]", 24, 10, 21, 4, "rsrp"), ("RSRP Rx[1]", 28, 12, 23, 4, "rsrp"),
         ("RSRP", 40, 12, 23, 4, "rsrp640"), ("RSRQ Rx[0]", 48, 0, 9, 4, "rsrq"),
         ("RSRQ Rx[1]", 48, 20, 29, 4, "rsrq"), ("RSRQ", 56, 0, 9, 4, "rsrq"),
         ("RSSI", 68, 0, 10, 4, "rssi"),
         ("FTL SNR Rx[0]", 92, 0, 8, 4, "snr"), ("FTL SNR Rx[1]", 92, 9, 17, 4, "snr")),
}


def _scaled(raw: int, kind: str) -> float:
    if kind == "rsrp":
        return raw * RSRP_SCALE_DB + RSRP_OFFSET_DBM
    if kind == "rsrp640":
        return (raw + COMBINED_RSRP_RAW_OFFSET) * RSRP_SCALE_DB + RSRP_OFFSET_DBM
    if kind == "rsrq":
        return raw * RSRQ_SCALE_DB + RSRQ_OFFSET_DB
    if kind == "rssi":
        return raw * RSSI_SCALE_DB + RSSI_OFFSET_DBM
    return round(raw * 0.1 - 20.0, 1)  # FTL SNR, dB


def _b193_subpacket(ver: int, b: bytes, o: int, end: int) -> dict[str, Any]:
    """Fields of one Serving_Cell_Measurement_Result sub-packet body at ``b[o:end]``."""
    fields = B193_FIELDS[ver]
    need = max(off + width for _, off, _, _, width, _ in fields)
    need = max(need, 14)
    if o + need > end:
        raise BodyError("truncated_packet", f"sub-packet version {ver} needs {need} bytes, has "
                        f"{end - o}", ver)
    out: dict[str, Any] = {}
    if ver == 4:
        out["E-ARFCN"] = b[o] | (b[o + 1] << 8)
        pci_w = b[o + 2] | (b[o + 3] << 8)
        sfn_w = b[o + 4] | (b[o + 5] << 8)
    elif ver in (7, 18):
        out["E-ARFCN"] = struct.unpack_from("<I", b, o)[0]
        pci_w = b[o + 4] | (b[o + 5] << 8)
        sfn_w = b[o + 8] | (b[o + 9] << 8)
    else:
        out["E-ARFCN"] = struct.unpack_from("<I", b, o)[0]
        if ver == 40:
            out["Valid Rx"] = b[o + 6] | (b[o + 7] << 8)
        else:
            out["Num-of-cells"] = b[o + 4] | (b[o + 5] << 8)
        pci_w = b[o + 8] | (b[o + 9] << 8)
        sfn_w = b[o + 12] | (b[o + 13] << 8)
    out["Physical Cell ID"] = pci_w & 0x1FF
    out["Serving Cell Index"] = cell_index_name((pci_w >> 9) & 7)
    if ver >= 19:
        out["Is Serving Cell"] = (pci_w >> 12) & 1
    out["Current SFN"] = sfn_w & 0x3FF
    out["Current Subframe Number"] = (sfn_w >> 10) & 0x0F
    for name, off, lo, hi, width, kind in fields:
        word = int.from_bytes(b[o + off:o + off + width], "little")
        out[name] = _scaled(_bits(word, lo, hi), kind)
    return out


B193_SUBPACKET_ID = 25


def decode_b193(body: bytes) -> dict[str, Any]:
    """0xB193: ``Version``, ``Number of SubPackets``, ``Subpackets`` (measurement results)."""
    _need(body, 4, "header", None)
    version = body[0]
    if version != 1:
        raise BodyError("unknown_version", f"no known layout for 0xB193 version {version}", version)
    n_sub = body[1]
    subpackets = []
    o = 4
    for _ in range(n_sub):
        _need(body, o + 4, "sub-packet header", version)
        sub_id, sub_ver, size = body[o], body[o + 1], body[o + 2] | (body[o + 3] << 8)
        if size < 4:
            raise BodyError("bad_value", f"sub-packet size {size} < its 4-byte header", sub_ver)
        _need(body, o + size, f"sub-packet of {size} bytes", sub_ver)
        sub: dict[str, Any] = {"SubPacket ID": B193_SUBPACKET_NAMES.get(sub_id, UNKNOWN),
                               "SubPacket Version": sub_ver, "SubPacket Size": size}
        if sub_id == B193_SUBPACKET_ID:
            if sub_ver not in B193_FIELDS:
                raise BodyError("unknown_version", f"no known layout for 0xB193 sub-packet "
                                f"version {sub_ver}", sub_ver)
            sub.update(_b193_subpacket(sub_ver, body, o + 4, o + size))
        subpackets.append(sub)
        o += size
    return {"Version": version, "Number of SubPackets": n_sub, "Subpackets": subpackets}


# --- 0xB087 LTE RLC DL Stats and 0xB0A4 LTE PDCP DL Stats ------------------------------------
# Layouts as MobileInsight's format tables give them (sub-packet versions with a known
# table only). Fields are (name, bytes); None names a skipped word.

_Fmt = tuple[tuple[str | None, int], ...]


def _u32s(*names: str | None) -> _Fmt:
    return tuple((n, 4) for n in names)


_RLC_V2_COUNTS = ("Num Data PDU", "Data PDU Bytes", "Num Status Rxed", "Status Rxed Bytes",
                  "Num Invalid PDU", "Invalid PDU Bytes", "Num Retx PDU", "Retx PDU Bytes",
                  "Num Dup PDU", "Dup PDU Bytes", "Num Dropped PDU", "Dropped PDU Bytes",
                  "Num Dropped PDU FC", "Dropped PDU Bytes FC", "Num SDU", "Num SDU Bytes",
                  "Num NonSeq SDU", "Num Ctrl PDU", "Num Complete NACK", "Num Segments NACK",
                  "Num t_reorder Expired")
RLC_DL_RB_FMT: dict[int, _Fmt] = {
    2: (("Rb Cfg Idx", 1), ("Mode", 1), ("Num RST", 4), *_u32s(*_RLC_V2_COUNTS), (None, 4),
        *_u32s(*(f"{n} Rst" for n in _RLC_V2_COUNTS)), (None, 4)),
}


def _rlc_v3_counts(suffix: str) -> _Fmt:
    # v3 widens the byte counters to u64 and adds two counters.
    out: list[tuple[str | None, int]] = []
    for name in (*_RLC_V2_COUNTS, "Num t_reorder Start", "Num Missed UM PDU"):
        out.append((name + suffix, 8 if "Bytes" in name else 4))
    return tuple(out)


RLC_DL_RB_FMT[3] = (("Rb Cfg Idx", 1), ("Mode", 1), ("Num RST", 4), *_rlc_v3_counts(""),
                    (None, 4), *_rlc_v3_counts(" Rst"), (None, 4))
RLC_DL_PAYLOAD_FMT: _Fmt = (("Num RBs", 1), ("RLC PDCP Q Full Count", 4), ("RLCDL Error Count", 4))
RLC_DL_SUBPACKET_ID = 0x42

_PDCP_COUNTS = ("Num Flow Ctrl Trigger", "Num Data PDU Rx", "Num Data PDU Rx Bytes",
                "Control PDU Bytes Rx", None, "Num Control PDU Gen", "Num Control PDU Gen Bytes",
                "Num Stat Rprt Ctrl PDU Rx", "Num ROHC Ctrl PDU Rx", "Num PDU ROHC Fail",
                "Num PDU Integrity Fail", "Num Missing SDU To UL", "Num Missing SDU From UL",
                "Num PDU Dups", "Num PDU Dups Bytes", "Num PDU Out of Win",
                "Num PDU Out of Win Bytes", "Num PDU Invalid", "Num PDU Invalid Bytes", None)
PDCP_DL_RB_FMT: dict[int, _Fmt] = {
    2: (("Rb Cfg Idx", 1), ("Mode", 1), ("PDCP Hdr Len", 1), ("Num RST", 4), *_u32s(*_PDCP_COUNTS),
        *_u32s(*(None if n is None else f"{n} Rst" for n in _PDCP_COUNTS))),
}
PDCP_DL_PAYLOAD_FMT: _Fmt = (("Num RBs", 1), ("Num Errors", 4), ("Num Offload Q Full Count", 4),
                             ("Num Packet Dropped Offload Q Full", 4))
PDCP_DL_SUBPACKET_ID = 0xC4


def _by_fmt(fmt: _Fmt, b: bytes, o: int, end: int, out: dict[str, Any], ver: int) -> int:
    """Read ``fmt`` at ``b[o:]`` into ``out``; the offset after it."""
    for name, size in fmt:
        if o + size > end:
            raise BodyError("truncated_packet", f"field {name or 'reserved'} ends beyond its "
                            "sub-packet", ver)
        if name is not None:
            out[name] = int.from_bytes(b[o:o + size], "little")
        o += size
    return o


def _decode_stats(body: bytes, code: int, sub_id_known: int, payload_fmt: _Fmt,
                  rb_fmts: dict[int, _Fmt], rb_list_name: str) -> dict[str, Any]:
    _need(body, 4, "header", None)
    version = body[0]
    if version != 1:
        raise BodyError("unknown_version", f"no known layout for 0x{code:04X} version {version}", version)
    subpackets = []
    o = 4
    for _ in range(body[1]):
        _need(body, o + 4, "sub-packet header", version)
        sub_id, sub_ver, size = body[o], body[o + 1], body[o + 2] | (body[o + 3] << 8)
        if size < 4:
            raise BodyError("bad_value", f"sub-packet size {size} < its 4-byte header", sub_ver)
        _need(body, o + size, f"sub-packet of {size} bytes", sub_ver)
        sub: dict[str, Any] = {"Subpacket ID": sub_id, "Subpacket Version": sub_ver,
                               "Subpacket Size": size}
        if sub_id == sub_id_known:
            rb_fmt = rb_fmts.get(sub_ver)
            if rb_fmt is None:
                raise BodyError("unknown_version", f"no known layout for 0x{code:04X} sub-packet "
                                f"version {sub_ver}", sub_ver)
            end = o + size
            p = _by_fmt(payload_fmt, body, o + 4, end, sub, sub_ver)
            rbs = []
            for _k in range(sub["Num RBs"]):
                rb: dict[str, Any] = {}
                p = _by_fmt(rb_fmt, body, p, end, rb, sub_ver)
                rb["Mode"] = RLC_MODES.get(rb["Mode"], UNKNOWN)
                rbs.append(rb)
            sub[rb_list_name] = rbs
        subpackets.append(sub)
        o += size
    return {"Version": version, "Num Subpkt": body[1], "Subpackets": subpackets}


def decode_b087(body: bytes) -> dict[str, Any]:
    """0xB087 LTE RLC DL Stats (sub-packet 0x42, versions 2 and 3): cumulative per-bearer counters."""
    return _decode_stats(body, LTE_RLC_DL_STATS, RLC_DL_SUBPACKET_ID, RLC_DL_PAYLOAD_FMT,
                         RLC_DL_RB_FMT, "RBs")


def decode_b0a4(body: bytes) -> dict[str, Any]:
    """0xB0A4 LTE PDCP DL Stats (sub-packet 0xC4, version 2): cumulative per-bearer counters."""
    return _decode_stats(body, LTE_PDCP_DL_STATS, PDCP_DL_SUBPACKET_ID, PDCP_DL_PAYLOAD_FMT,
                         PDCP_DL_RB_FMT, "RBs")


DECODERS: dict[int, Callable[[bytes], dict[str, Any]]] = {
    LTE_PHY_PDSCH_STAT: decode_b173,
    LTE_PHY_SERV_CELL_MEAS: decode_b193,
    LTE_MAC_DL_TB: decode_b063,
    LTE_RLC_DL_STATS: decode_b087,
    LTE_PDCP_DL_STATS: decode_b0a4,
}
