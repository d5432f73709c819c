"""A synthetic phone diag log with a long gap, written with the project's own encoder
(traces/diaglog/encode.py): the UE is scheduled at MCS 10 while its SNR is 5 dB and at MCS 20
while it is 15 dB, gets an 88-bit signalling block at MCS 0 last before a 12 s gap in which the
phone only measures (every 1.28 s, as an idle phone does: SNR 15 dB), then 4 s with no
measurement at all, then data again (10 MHz cell)."""

from __future__ import annotations

from pathlib import Path

from clawbed.lte import tbs_bits
from clawbed.traces.diaglog.encode import encode_message

T0_UNIX_S = 1_700_000_000.0
N_RB = 50  # 10 MHz
#: (from ms, to ms, SNR dB or None: no measurement, UE's MCS or None: not scheduled,
#: measurement period ms)
PHASES = ((0, 4000, 5.0, 10, 10), (4000, 8000, 15.0, 20, 10), (8000, 20000, 15.0, None, 1280),
          (20000, 24000, None, None, 0), (24000, 26000, 5.0, 10, 10))
GAP = (8000, 20000)
UNMEASURED = (20000, 24000)
SIGNALLING_BITS = 88


def record(k: int, rbs: int, mcs: int, bits: int) -> dict:
    return {"Subframe Num": k % 10, "Frame Num": (k // 10) % 1024, "Num RBs": rbs, "Num Layers": 1,
            "Serving Cell Index": "PCell",
            "Transport Blocks": [{"HARQ ID": k % 8, "TB Size": bits // 8 + 3, "MCS": mcs, "Num RBs": rbs}]}


def synthetic_log(path: Path) -> Path:
    """The module doc's log: 0xB173 v24 records batched ten to a packet (stamped at the last
    record, as a phone does) and 0xB193 v22 measurements, at 10 MHz."""
    records: list[tuple[int, dict]] = []
    measurements: list[tuple[int, float]] = []
    for a, b, snr, mcs, period in PHASES:
        for k in range(a, b):
            if mcs is not None and k % 2 == 0:
                if k % 50 == 0:  # a signalling block: payload-sized, at MCS 0
                    records.append((k, record(k, 4, 0, SIGNALLING_BITS)))
                else:
                    records.append((k, record(k, 25, mcs, tbs_bits(mcs, 25))))
            if snr is not None and period and (k - a) % period == 0:
                measurements.append((k, snr))
    # The last block before the gap is a signalling one.
    records.append((GAP[0] - 2, record(GAP[0] - 2, 4, 0, SIGNALLING_BITS)))
    records.sort(key=lambda r: r[0])
    messages = []
    for i in range(0, len(records), 10):
        batch = records[i:i + 10]
        messages.append((batch[-1][0], {"type_id": "LTE_PHY_PDSCH_Stat_Indication",
                                        "timestamp": T0_UNIX_S + batch[-1][0] / 1000,
                                        "Records": [r for _, r in batch]}))
    for k, snr in measurements:
        messages.append((k, {"type_id": "LTE_PHY_Serv_Cell_Measurement", "timestamp": T0_UNIX_S + k / 1000,
                             "Subpackets": [{"Current SFN": (k // 10) % 1024, "Current Subframe Number": k % 10,
                                             "Serving Cell Index": "PCell", "RSRP": -100.0, "RSRQ": -11.0,
                                             "FTL SNR Rx[0]": snr}]}))
    messages.sort(key=lambda m: m[0])
    path.write_bytes(b"".join(encode_message(m) for _, m in messages))
    return path
