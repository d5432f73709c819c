"""Benchmark of the diag-log codec and importer: MB/s of log and subframes/s.

``python -m clawbed.traces.diaglog.bench`` encodes a synthetic busy log (the UE scheduled in
every subframe, one or two blocks, 0xB173 v24 packets of 10 records, a 0xB063 packet per
0xB173 packet, and, between them, as many bytes of other log packets as the shared Pixel XL
log has: ~95 % of its bytes are codes the importer skips), then measures

- ``decode``: the whole codec (frames, CRC, every known message decoded to dicts);
- ``import``: ``import_mobileinsight`` (the columnar 0xB173 path), subframes of trace/s;

and, when the shared data folder is present, the same on each shared real log. Prints a
table and writes ``bench-results/diaglog.json`` under the repository root.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from clawbed.errors import ClawbedError
from clawbed.paths import REPO_ROOT, shared_dir
from clawbed.traces.diaglog.encode import encode_message
from clawbed.traces.diaglog.frames import encode_frame
from clawbed.traces.diaglog.importer import import_mobileinsight
from clawbed.traces.diaglog.log import decode_bytes

RESULTS = REPO_ROOT / "bench-results" / "diaglog.json"
RECORDS_PER_PACKET = 10
#: Bytes of skipped log packets per 0xB173 packet (the Pixel XL log: ~2.4 MB of others
#: for 56 0xB173 packets, scaled to packets of 10 records).
FILLER_BYTES_PER_PACKET = 2000
REPEATS = 3


def synthetic_log(seconds: float, seed: int = 1) -> bytes:
    """A log of ``seconds`` with the UE scheduled in every subframe."""
    rng = random.Random(seed)
    t0 = 1_600_000_000.0
    out = bytearray()
    filler = encode_frame(bytes((0x10, 0)) + (FILLER_BYTES_PER_PACKET - 8).to_bytes(2, "little") * 2
                          + (0xB0C0).to_bytes(2, "little") + bytes(FILLER_BYTES_PER_PACKET - 8))
    n = int(seconds * 1000)
    for start in range(0, n, RECORDS_PER_PACKET):
        records, samples = [], []
        for k in range(start, min(start + RECORDS_PER_PACKET, n)):
            s = k % 10_240
            two = rng.random() < 0.3
            rbs = rng.randrange(1, 51)
            tbs = [{"HARQ ID": k % 8, "RV": 0, "NDI": 1, "CRC Result": "Pass" if rng.random() > 0.07
                    else "Fail", "TB Index": i, "TB Size": rng.randrange(100, 6000),
                    "MCS": rng.randrange(29), "Num RBs": rbs} for i in range(2 if two else 1)]
            records.append({"Subframe Num": s % 10, "Frame Num": s // 10, "Num RBs": rbs,
                            "Num Layers": 2 if two else 1, "Transport Blocks": tbs})
            samples.append({"SFN": s // 10, "Sub-FN": s % 10, "HARQ ID": k % 8,
                            "DL TBS (bytes)": int(tbs[0]["TB Size"]) - 3, "RLC PDUs": 1})
        t = t0 + (start + len(records) - 1) / 1000
        out += encode_message({"type_id": "LTE_PHY_PDSCH_Stat_Indication", "timestamp": t,
                               "Records": records})
        out += encode_message({"type_id": "LTE_MAC_DL_Transport_Block", "timestamp": t,
                               "Samples": samples})
        out += filler
    return bytes(out)


def _best_s(fn: Any) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    mb = len(data) / 1e6
    decode_s = _best_s(lambda: decode_bytes(data))
    result: dict[str, Any] = {"file": path.name, "mb": round(mb, 3),
                              "decode_s": round(decode_s, 4),
                              "decode_mb_per_s": round(mb / decode_s, 1)}
    try:
        trace = import_mobileinsight(path)
    except ClawbedError as e:
        result["import"] = f"not importable: {str(e)[:120]}"
        return result
    import_s = _best_s(lambda: import_mobileinsight(path))
    result.update({"import_s": round(import_s, 4), "import_mb_per_s": round(mb / import_s, 1),
                   "subframes": trace.duration_ms,
                   "subframes_per_s": round(trace.duration_ms / import_s)})
    return result


@click.command()
@click.option("--seconds", type=float, default=600.0, show_default=True,
              help="Length of the synthetic log (its figures scale to an hour).")
def main(seconds: float) -> None:
    """Measure decode and import speed; write bench-results/diaglog.json."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"synthetic-{seconds:g}s.mi2log"
        path.write_bytes(synthetic_log(seconds))
        row = measure(path)
        row["file"] = f"synthetic busy log, {seconds:g} s (UE scheduled every subframe)"
        row["one_hour_import_s_projected"] = round(row["import_s"] * 3600 / seconds, 1)
        rows.append(row)
    try:
        logs = sorted(p for p in (shared_dir() / "data" / "real-logs").glob("*")
                      if p.suffix in (".mi2log", ".qmdl"))
    except ClawbedError:
        logs = []
    rows += [measure(p) for p in logs]
    for r in rows:
        line = f"{r['file'][:60]:60} {r['mb']:8.2f} MB  decode {r['decode_mb_per_s']:7.1f} MB/s"
        if "import_s" in r:
            line += f"  import {r['import_mb_per_s']:7.1f} MB/s {r['subframes_per_s']:>10,} subframes/s"
        click.echo(line)
    click.echo(f"one hour of a busy log imports in about {rows[0]['one_hour_import_s_projected']} s")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"benchmark": "diaglog", "repeats_best_of": REPEATS,
                                   "results": rows}, indent=2) + "\n")
    click.echo(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
