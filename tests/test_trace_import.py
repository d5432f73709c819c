"""Importers of Mahimahi and decoder-CSV traces, and the Mahimahi exporter (traces/importers.py)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clawbed.errors import InputError
from clawbed.lte import capacity_bits
from clawbed.traces.importers import (
    MAHIMAHI_PACKET_BITS,
    export_mahimahi,
    import_decoder_csv,
    import_mahimahi,
)
from clawbed.traces.io import read_trace, write_trace

CLAWBED = Path(sys.executable).parent / "clawbed"


def bytes_per_100ms(path: Path, n_bins: int) -> np.ndarray:
    """Bytes a Mahimahi trace delivers in each 100-ms bin from 0 (1500 bytes per line)."""
    ms = np.array(path.read_text().split(), dtype=np.int64)
    return np.bincount(ms // 100, minlength=n_bins) * 1500


def assert_round_trip_within_stated(original: Path, exported: Path, stated_bytes: int) -> int:
    """Compare per-100-ms bytes of two Mahimahi files; return the largest difference."""
    n_bins = max(int(p.read_text().split()[-1]) for p in (original, exported)) // 100 + 1
    diff = np.abs(bytes_per_100ms(original, n_bins) - bytes_per_100ms(exported, n_bins))
    assert diff.max() <= stated_bytes, f"{diff.max()} bytes in 100 ms > stated {stated_bytes}"
    return int(diff.max())


@pytest.mark.parametrize("name", ["Verizon-LTE-short.down", "ATT-LTE-driving.down"])
def test_mahimahi_round_trip_within_stated_error(name: str, tmp_path: Path, mahimahi_traces: Path) -> None:
    source = mahimahi_traces / name
    trace = import_mahimahi(source, bandwidth_mhz=20, n_antennas=2)
    prov = trace.metadata["provenance"]

    lines = source.read_text().split()
    assert prov["input_file"] == name
    assert prov["input_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert prov["input_lines"] == len(lines)
    assert prov["input_span_ms"] == [int(lines[0]), int(lines[-1])]
    assert trace.duration_ms == int(lines[-1]) + 1
    for words in ("background-first", "mahimahi", "proportional-fair"):
        assert words in prov["mapping"]
    assert isinstance(prov["max_error_bytes_per_100ms"], int)

    out = tmp_path / "exported.down"
    n = export_mahimahi(trace, out)
    assert n == len(out.read_text().split())
    assert_round_trip_within_stated(source, out, prov["max_error_bytes_per_100ms"])


def test_mahimahi_round_trip_through_cli(tmp_path: Path, mahimahi_traces: Path) -> None:
    source = mahimahi_traces / "Verizon-LTE-short.down"
    cbt, out = tmp_path / "x.cbt", tmp_path / "y.down"
    for args in (["import", "--from", "mahimahi", source, "-o", cbt],
                 ["export", "--mahimahi", cbt, "-o", out]):
        run = subprocess.run([CLAWBED, "trace", *args], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
    stated = import_mahimahi(source, bandwidth_mhz=20, n_antennas=2).metadata["provenance"]
    assert_round_trip_within_stated(source, out, stated["max_error_bytes_per_100ms"])


def test_mahimahi_idle_ms_two_layers_and_clipping(tmp_path: Path) -> None:
    # ms 0: 1 packet; ms 1: idle; ms 2: 7 packets (84000 bits > 75376, the one-layer maximum
    # of 100 RBs); ms 3: 13 packets (156000 > 149776, the two-layer maximum); ms 4..5: idle.
    source = tmp_path / "t.down"
    source.write_text("0\n" + "2\n" * 7 + "3\n" * 13 + "5\n")
    trace = import_mahimahi(source, bandwidth_mhz=20, n_antennas=2)
    assert trace["other_rbs"][1] == 100
    assert trace["mcs"][1] == trace["mcs"][0]  # idle: the last MCS is kept
    assert list(trace["layers"][:4]) == [1, 1, 2, 2]
    bits = capacity_bits(trace["mcs"], 100 - trace["other_rbs"].astype(int), 100, trace["layers"])
    recorded = np.array([1, 0, 7, 13, 0, 1]) * MAHIMAHI_PACKET_BITS
    drift = np.cumsum(bits) - np.cumsum(recorded)
    assert drift[2] >= 0 and drift[3] < 0  # ms 3 is clipped ...
    assert drift[4] >= 0  # ... and its deficit made up in the idle ms after it
    assert trace.metadata["provenance"]["clipped_ms"] == 1

    one = import_mahimahi(source, bandwidth_mhz=20, n_antennas=1)
    assert "layers" not in one.columns
    assert one.metadata["provenance"]["clipped_ms"] >= 2


def test_decoder_csv_wrap_gap_and_rbs(tmp_path: Path) -> None:
    source = tmp_path / "owl.csv"
    # SFN*10 + subframe wrapping 10239 → 0; subframe 2 after the wrap is missing; "rnti" is
    # not a trace column; row 10238 does not schedule the UE.
    source.write_text(
        "SFN_SF, Cell PRBs ,UE_PRB,MCS,TBS (bits),rnti\n"
        "10238,30,0,0,0,61\n"
        "10239,40,10,17,7736,61\n"
        "0,50,0,0,0,61\n"
        "\n"
        "1,45,20,9,3240,61\n"
        "3,25,25,28,18336,61\n"
    )
    trace = import_decoder_csv(source, bandwidth_mhz=10, n_antennas=2)
    assert list(trace["t_ms"]) == [0, 1, 2, 3, 4, 5]
    assert list(trace["own_rbs"]) == [0, 10, 0, 20, 20, 25]
    assert list(trace["other_rbs"]) == [30, 30, 50, 25, 25, 0]
    assert list(trace["own_tbs_bits"]) == [0, 7736, 0, 3240, 3240, 18336]
    # Unscheduled rows carry the last scheduled MCS (the first one before any).
    assert list(trace["mcs"]) == [17, 17, 17, 9, 9, 28]
    prov = trace.metadata["provenance"]
    assert (prov["tti_wraps"], prov["filled_ms"], prov["ignored_columns"]) == (1, 1, ["rnti"])
    assert trace.n_rb == 50
    write_trace(trace, tmp_path / "owl.cbt")  # checks the trace against the format first
    assert list(read_trace(tmp_path / "owl.cbt")["other_rbs"]) == [30, 30, 50, 25, 25, 0]


@pytest.mark.parametrize(("text", "where"), [
    ("0\n1\nabc\n2\n", ":3:"),
    ("0\n5\n\n6\n", ":3:"),
    ("0\n5\n4\n", ":3:"),
    ("0\n-1\n", ":2:"),
    ("", "empty"),
])
def test_malformed_mahimahi(text: str, where: str, tmp_path: Path) -> None:
    source = tmp_path / "bad.down"
    source.write_text(text)
    with pytest.raises(InputError, match=f"bad.down{where}" if where.startswith(":") else where) as e:
        import_mahimahi(source, bandwidth_mhz=20, n_antennas=2)
    assert str(source) in str(e.value)


@pytest.mark.parametrize(("rows", "where"), [
    ("0,50,10,5,1000\n1,50,x,5,1000\n", ":3: column 'ue_prbs'"),
    ("0,50,10,5,1000\n1,40,45,5,1000\n", ":3: column 'ue_prbs'"),
    ("0,60,10,5,1000\n", ":2: column 'cell_prbs'"),
    ("0,50,10,5,1000\n0,50,10,5,1000\n", ":3: column 'tti'"),
    ("0,50,10,5,1000\n20000,50,10,5,1000\n100,50,10,5,1000\n", ":4: column 'tti'"),
    ("0,50,10,5,1000\n1,50,10,5\n", ":3: column 'tbs'"),
])
def test_malformed_decoder_csv(rows: str, where: str, tmp_path: Path) -> None:
    source = tmp_path / "bad.csv"
    source.write_text("tti,cell_prbs,ue_prbs,mcs,tbs\n" + rows)
    with pytest.raises(InputError, match=f"bad.csv{where}"):
        import_decoder_csv(source, bandwidth_mhz=10, n_antennas=2)


def test_decoder_csv_missing_column(tmp_path: Path) -> None:
    source = tmp_path / "bad.csv"
    source.write_text("tti,cell_prbs,mcs,tbs\n0,50,5,1000\n")
    with pytest.raises(InputError, match=r"bad.csv:1: missing column\(s\) ue_prbs"):
        import_decoder_csv(source, bandwidth_mhz=10, n_antennas=2)
