"""0xB173 records as columns (numpy), for importing long logs fast.

The dict decoder (:func:`messages.decode_b173`) costs microseconds per record; a one-hour
log has up to 3.6 million. Here each packet is only checked (version, length) and its
record bytes appended to one buffer per version; the fields are then read for all records
at once through a numpy structured dtype built from the same layout table. Tests check
that both decoders agree on every record of the shared logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from clawbed.traces.diaglog.frames import Defect
from clawbed.traces.diaglog.messages import B173_HEADER_BYTES, B173_LAYOUTS

#: Highest MCS index of a new transmission; 29..31 signal a retransmission's modulation.
MAX_NEW_TX_MCS = 28
#: Layouts no public decoder defines, read only when asked (``infer_v48``): 0xB173 v48 as
#: v36 (40-byte records, 12-byte TB slots), inferred in ``docs/diag-log-format.md`` §2.5.
INFERRED_LAYOUTS: dict[int, tuple[int, int, int]] = {48: B173_LAYOUTS[36]}


def _record_dtype(version: int) -> np.dtype:
    rec_bytes, p1, slot = B173_LAYOUTS.get(version) or INFERRED_LAYOUTS[version]
    names = ["sf_word", "num_rbs", "num_layers", "num_tbs", "cell_byte"]
    formats: list[str] = ["<u2", "u1", "u1", "u1", "u1"]
    offsets = [0, 2, 3, 4, 5]
    wide = version >= 36  # 12-byte TB slots: size at +4, MCS at +6, RBs at +7
    for k in range(2):
        o = p1 + k * slot
        names += [f"tb{k}_b0", f"tb{k}_b1", f"tb{k}_b2", f"tb{k}_size", f"tb{k}_mcs", f"tb{k}_rbs"]
        formats += ["u1", "u1", "u1", "<u2", "u1", "u1"]
        offsets += [o, o + 1, o + 2, o + (4 if wide else 2), o + (6 if wide else 4),
                    o + (7 if wide else 5)]
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": rec_bytes})


@dataclass
class PdschColumns:
    """Every 0xB173 record of a log, one entry per record, in file order.

    ``tb_*`` arrays have shape (records, 2); slot 1 is meaningful only where ``num_tbs`` is 2.
    """

    ticks: np.ndarray          #: diag timestamp of the record's packet (int64)
    packet_last: np.ndarray    #: True on the last record of its packet (bool)
    sfn_ms: np.ndarray         #: Frame Num × 10 + Subframe Num (int64)
    cell: np.ndarray           #: serving cell index (0 = PCell)
    num_rbs: np.ndarray
    num_layers: np.ndarray
    num_tbs: np.ndarray
    tb_crc_pass: np.ndarray    #: bool
    tb_rnti_type: np.ndarray   #: 0 = C-RNTI (see messages.PDSCH_RNTI_TYPES)
    tb_recombined: np.ndarray  #: "Did Recombining" Yes: a retransmission combined (bool)
    tb_rv: np.ndarray
    tb_size_bytes: np.ndarray  #: TB Size as logged: bytes including the 3-byte CRC
    tb_mcs: np.ndarray
    tb_rbs: np.ndarray
    versions: dict[int, int] = field(default_factory=dict)  #: version → records

    def __len__(self) -> int:
        return len(self.sfn_ms)


class PdschCollector:
    """A raw handler for :func:`log.decode_bytes` gathering 0xB173 record bytes by version."""

    def __init__(self, extra_layouts: dict[int, tuple[int, int, int]] | None = None) -> None:
        #: version → layout: the known ones and any inferred ones asked for.
        self._layouts = {**B173_LAYOUTS, **(extra_layouts or {})}
        self._bufs: dict[int, bytearray] = {}
        self._ticks: dict[int, list[tuple[int, int]]] = {}  # version → (ticks, records)
        self._order: list[tuple[int, int]] = []  # (version, records) in file order

    def __call__(self, offset: int, code: int, ticks: int, body: bytes) -> Defect | None:
        if not body:
            return Defect(offset, "truncated_packet", "empty body", code)
        version = body[0]
        layout = self._layouts.get(version)
        if layout is None:
            return Defect(offset, "unknown_version", f"no known layout for 0xB173 version "
                          f"{version}", code, version)
        if len(body) < B173_HEADER_BYTES:
            return Defect(offset, "truncated_packet", "header needs 4 bytes", code, version)
        n = body[1]
        end = B173_HEADER_BYTES + n * layout[0]
        if len(body) < end:
            return Defect(offset, "truncated_packet", f"{n} records of {layout[0]} bytes need "
                          f"{end} bytes, body has {len(body)}", code, version)
        self._bufs.setdefault(version, bytearray()).extend(body[B173_HEADER_BYTES:end])
        self._ticks.setdefault(version, []).append((ticks, n))
        self._order.append((version, n))
        return None

    def columns(self) -> PdschColumns:
        """The records gathered so far, in file order."""
        per_version: dict[int, dict[str, np.ndarray]] = {}
        for version, buf in sorted(self._bufs.items()):
            r = np.frombuffer(bytes(buf), dtype=_record_dtype(version))
            counts = np.array([n for _, n in self._ticks[version]], dtype=np.int64)
            last = np.zeros(len(r), dtype=bool)
            ends = np.cumsum(counts)
            last[ends[counts > 0] - 1] = True
            sf = r["sf_word"].astype(np.int64)
            cols = {
                "ticks": np.repeat(np.array([t for t, _ in self._ticks[version]], dtype=np.int64), counts),
                "packet_last": last,
                "sfn_ms": (sf >> 4) * 10 + (sf & 0x0F),
                "cell": r["cell_byte"].astype(np.int64) & 7,
                "num_rbs": r["num_rbs"].astype(np.int64),
                "num_layers": r["num_layers"].astype(np.int64),
                "num_tbs": r["num_tbs"].astype(np.int64),
            }
            for what in ("crc", "rnti", "recomb", "rv", "size", "mcs", "rbs"):
                cols[what] = np.stack([_tb_field(version, r, k, what) for k in range(2)], axis=1)
            per_version[version] = cols
        # File order: the records of each version are in file order; interleave them back.
        seq = np.array([v for v, n in self._order for _ in range(n)], dtype=np.int64)
        where = np.argsort(seq, kind="stable")  # i-th record of the version-sorted concat
        n = len(seq)

        def merged(name: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
            out: np.ndarray = np.zeros((n, *shape), dtype=dtype)
            if n:
                out[where] = np.concatenate([c[name] for c in per_version.values()])
            return out

        return PdschColumns(
            ticks=merged("ticks", (), np.int64), packet_last=merged("packet_last", (), bool),
            sfn_ms=merged("sfn_ms", (), np.int64), cell=merged("cell", (), np.int64),
            num_rbs=merged("num_rbs", (), np.int64), num_layers=merged("num_layers", (), np.int64),
            num_tbs=merged("num_tbs", (), np.int64),
            tb_crc_pass=merged("crc", (2,), np.int64).astype(bool),
            tb_rnti_type=merged("rnti", (2,), np.int64),
            tb_recombined=merged("recomb", (2,), np.int64).astype(bool),
            tb_rv=merged("rv", (2,), np.int64), tb_size_bytes=merged("size", (2,), np.int64),
            tb_mcs=merged("mcs", (2,), np.int64), tb_rbs=merged("rbs", (2,), np.int64),
            versions={v: len(c["sfn_ms"]) for v, c in per_version.items()},
        )


def _tb_field(version: int, r: np.ndarray, k: int, what: str) -> np.ndarray:
    b0 = r[f"tb{k}_b0"].astype(np.int64)
    b1 = r[f"tb{k}_b1"].astype(np.int64)
    if what == "crc":
        return b0 >> 7
    if what == "rv":
        return (b0 >> 4) & 3
    if what == "rnti":
        return b1 & 0x0F
    if what == "recomb":
        if version == 37:
            return r[f"tb{k}_b2"].astype(np.int64) & 1
        if version == 40:
            return (r[f"tb{k}_b2"].astype(np.int64) >> 2) & 1  # bit 10 of the u16 at +1
        return (b1 >> 6) & 1
    if what == "size":
        return r[f"tb{k}_size"].astype(np.int64)
    if what == "mcs":
        return r[f"tb{k}_mcs"].astype(np.int64)
    return r[f"tb{k}_rbs"].astype(np.int64)
