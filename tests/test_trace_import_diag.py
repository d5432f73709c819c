"""Importers of phone diag logs and control-channel (DCI) logs (traces/diaglog importer and
dci, through traces/importers.py and ``clawbed trace import``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clawbed.errors import ClawbedError, InputError
from clawbed.lte import tbs_bits
from clawbed.paths import shared_dir
from clawbed.traces.diaglog import read_log
from clawbed.traces.diaglog.encode import encode_message
from clawbed.traces.importers import import_dci_log, import_mobileinsight
from clawbed.traces.io import read_trace, write_trace
from clawbed.traces.validate import check_trace

CLAWBED = Path(sys.executable).parent / "clawbed"
LOG_2017 = "adrianfeng_cr_dl_full_2017-11-16.mi2log"
PIXEL_XL = "hackathon2018_PixelXL_2018-08-25.mi2log"
PIXEL5 = "mobileinsight-core_Pixel5_2023-02-12_113941.qmdl"
TMOBILE = "mobileinsight-core_unit-test_tmobile.mi2log"
FALCON = "falcon_zikangS-RCA_falconeye_capture_2162.4MHz.tsv"


def real(name: str) -> Path:
    try:
        path = shared_dir() / "data" / "real-logs" / name
    except ClawbedError as e:
        pytest.skip(f"shared data folder absent ({e}); set CLAWBED_SHARED to run this test")
    if not path.is_file():
        pytest.skip(f"{path} absent: the real logs are in the shared data folder")
    return path


def test_2017_log_columns_follow_the_records() -> None:
    path = real(LOG_2017)
    trace = import_mobileinsight(path)
    assert check_trace(trace, "x.cbt") == []
    assert 72_000 <= trace.duration_ms <= 73_000  # the README: 72 s
    prov = trace.metadata["provenance"]
    cov = prov["coverage"]
    assert cov["versions"] == {"0xB173 v16": 228} and cov["timing_reanchors"] == 0
    assert prov["crc_failures"] == 97  # the README: 97 of 1492 blocks
    assert trace["harq_fail"].sum() <= prov["first_transmission_failures"]
    assert cov["other_rbs"] == "none (0)" and not trace["other_rbs"].any()  # no RSRQ in this log
    # Each subframe's SFN in the trace is the record's: compare with the decoded records.
    sfn, sf = trace.sfn_subframe()
    recs = [r for m in read_log(path).messages(0xB173) for r in m["Records"]]
    by_sfn = {(r["Frame Num"], r["Subframe Num"]) for r in recs}
    scheduled = np.flatnonzero(trace["own_rbs"])
    assert all((int(sfn[i]), int(sf[i])) in by_sfn for i in scheduled)
    # One-block subframes: TB Size − 3 bytes is the 36.213 TBS of (MCS, RBs) almost always.
    single = [(r["Transport Blocks"][0]["MCS"], r["Num RBs"], r["Transport Blocks"][0]["TB Size"])
              for r in recs if r["Num Transport Blocks Present"] == 1
              and r["Transport Blocks"][0]["RNTI Type"] == "C-RNTI"
              and r["Transport Blocks"][0]["MCS"] <= 28 and 0 < r["Num RBs"] <= 100]
    match = sum(tbs_bits(m, n) == (size - 3) * 8 for m, n, size in single)
    assert match / len(single) > 0.95


def test_pixel_xl_rsrq_gives_estimated_other_rbs(tmp_path: Path) -> None:
    trace = import_mobileinsight(real(PIXEL_XL), bandwidth_mhz=20, n_antennas=2)
    prov = trace.metadata["provenance"]
    assert prov["other_rbs_estimated"] is True and "CLAW" in prov["mapping"]
    assert prov["coverage"]["other_rbs"] == "estimated (RSRQ load model)"
    assert prov["coverage"]["versions"] == {"0xB173 v24": 56, "0xB193 v1/22": 845}
    assert -20 <= trace["rsrq_db"].min() and trace["rsrq_db"].max() <= -7
    assert (trace["own_rbs"] + trace["other_rbs"] <= trace.n_rb).all()
    assert set(np.unique(trace["layers"]).tolist()) <= {1, 2}
    out = tmp_path / "pxl.cbt"
    write_trace(trace, out)
    assert read_trace(out).metadata["provenance"]["coverage"] == prov["coverage"]


def test_logs_without_usable_records_say_what_they_hold() -> None:
    with pytest.raises(InputError, match=r"unknown versions: 0xB063 v49 ×3, 0xB173 v48 ×3.*"
                                         r"--infer-b173-v48.*byte 4402"):
        import_mobileinsight(real(PIXEL5))
    with pytest.raises(InputError, match="serving cell 1.*no C-RNTI 0xB063 sample"):
        import_mobileinsight(real(PIXEL_XL), cell=1)


ALL_LOGS = {LOG_2017: {}, PIXEL_XL: {}, TMOBILE: {}, PIXEL5: {"infer_v48": True},
            "mobileinsight-core_offline_log_example.mi2log": {}}


@pytest.mark.parametrize("name", sorted(ALL_LOGS))
def test_every_shared_log_imports(name: str, tmp_path: Path) -> None:
    """Every shared diag log gives a valid trace (the Pixel 5's with the inferred v48 layout
    asked for: without it, the test above), and the provenance names the path taken and the
    columns estimated."""
    trace = import_mobileinsight(real(name), **ALL_LOGS[name])
    assert check_trace(trace, "x.cbt") == []
    prov = trace.metadata["provenance"]
    assert prov["path"] in ("pdsch", "mac-fallback")
    assert isinstance(prov["estimated_columns"], list)
    assert prov["coverage"]["ue_scheduled_subframes"] > 0
    write_trace(trace, tmp_path / "t.cbt")


def test_tmobile_log_takes_the_lossy_mac_path() -> None:
    """No 0xB173 in the T-Mobile log: the UE's blocks come from 0xB063 (exact TBS), its RBs
    and MCS are estimated, CRC failures unknown; the provenance says so."""
    path = real(TMOBILE)
    trace = import_mobileinsight(path, bandwidth_mhz=20)
    prov = trace.metadata["provenance"]
    assert prov["path"] == "mac-fallback" and "LOSSY PATH" in prov["mapping"]
    assert prov["estimated_columns"][:3] == ["mcs", "own_rbs", "layers"] and "other_rbs" in prov["estimated_columns"]
    assert prov["c_rnti_blocks"] == 171 and prov["crc_failures"] is None
    assert 295_000 < trace.duration_ms < 298_000  # the README: 296 s
    # own_tbs_bits is exact: the C-RNTI samples' MAC TBS × 8, all of them, each in one row.
    samples = [s for m in read_log(path).messages(0xB063) for sp in m["Subpackets"] for s in sp["Samples"]
               if s["RNTI Type"] == "C-RNTI"]
    assert trace["own_tbs_bits"].sum() == 8 * sum(s["DL TBS (bytes)"] for s in samples)
    scheduled = trace["own_tbs_bits"] > 0
    assert (trace["own_rbs"][scheduled] > 0).all() and not trace["own_rbs"][~scheduled].any()
    assert not trace["harq_fail"].any()
    # Every estimated (MCS, RBs) carries its block, with the fewest RBs at that MCS.
    for k in np.flatnonzero(scheduled):
        m, n, b = int(trace["mcs"][k]), int(trace["own_rbs"][k]), int(trace["own_tbs_bits"][k])
        layers = int(trace["layers"][k])
        assert tbs_bits(m, n, layers) >= b and (n == 1 or tbs_bits(m, n - 1, layers) < b)
    # The channel MCS: the measurements' SNR + 6 dB (v19 carries FTL SNR).
    assert 0 <= trace["mcs"].min() and trace["mcs"].max() <= 28 and len(np.unique(trace["mcs"])) > 3


def test_pixel5_v48_layout_is_opt_in_and_marked() -> None:
    trace = import_mobileinsight(real(PIXEL5), infer_v48=True)
    prov = trace.metadata["provenance"]
    assert prov["path"] == "pdsch" and "0xB173 v48" in prov["inferred_layouts"]
    assert prov["coverage"]["versions"] == {"0xB173 v48": 3}
    assert prov["coverage"]["unknown_versions"] == {"0xB193 v1/48": 13}
    # The doc's check: MCS 1 on 4 RBs, TB Size 22 = 152/8 + 3.
    assert (trace["own_tbs_bits"][trace["own_rbs"] == 4] == 152).any()


def test_garbage_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.mi2log"
    path.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(InputError, match=r"junk.mi2log: no 0xB173 record.*defects, first: byte \d+"):
        import_mobileinsight(path)


def test_falcon_import() -> None:
    path = real(FALCON)
    trace = import_dci_log(path, kind="falcon")
    prov = trace.metadata["provenance"]
    assert check_trace(trace, "x.cbt") == []
    assert trace.n_rb == 75  # the README: a 75-PRB cell, inferred
    assert prov["rnti"] == 6970 and prov["uplink_rows_skipped"] == 82
    assert 4400 <= trace.duration_ms <= 4500  # 4.46 s
    assert trace.metadata["start_sfn"] == 932
    # Own RBs of the UE = its rows' nof_prb; the cell's = every downlink row's (≤ 75).
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    ue_prbs = sum(int(r[6]) for r in rows if r[4] == "1" and r[3] == "6970")
    assert trace["own_rbs"].sum() == ue_prbs
    cell_prbs = sum(int(r[6]) for r in rows if r[4] == "1")
    clipped = prov["coverage"]["clipped_subframes"]
    total = int(trace["own_rbs"].sum() + trace["other_rbs"].sum())
    assert total <= cell_prbs and (clipped or total == cell_prbs)
    other = import_dci_log(path, kind="falcon", rnti=56893, bandwidth_mhz=15)
    assert other.metadata["provenance"]["rnti_rule"] == "given (--rnti)"
    with pytest.raises(InputError, match="RNTI 12345 has no downlink row; most active: 6970"):
        import_dci_log(path, kind="falcon", rnti=12345)


def write_ngscope(path: Path, rows: list[tuple[int, ...]]) -> None:
    path.write_text("".join("\t".join(str(v) for v in r) + "\n" for r in rows))


def ng_row(tti: int, rnti: int, cell: int, ue: int, mcs: int, tbs: int, ts_us: int,
           tbs1: int = 0) -> tuple[int, ...]:
    return (tti, rnti, cell, ue, mcs, 0, tbs, mcs if tbs1 else 0, 0, tbs1, 0, ts_us, 1, 0)


def test_ngscope_import_with_wrap_empty_ttis_and_broadcast(tmp_path: Path) -> None:
    t_us = 1_700_000_000_000_000
    rows = []
    for k in range(30):
        tti = (10_230 + k) % 10_240  # wraps after 10 subframes
        ts = t_us + k * 1000
        if k == 12:
            continue  # a lost TTI: filled with the previous one
        if k % 3 == 0:
            rows.append(ng_row(tti, 0, 0, 0, 0, 0, ts))  # empty TTI
            continue
        rows.append(ng_row(tti, 1234, 40, 10, 20, 5000, ts, tbs1=4000 if k == 4 else 0))
        rows.append(ng_row(tti, 4321, 40, 26, 15, 9000, ts))
        rows.append(ng_row(tti, 65535, 40, 4, 5, 200, ts))  # SI-RNTI: load, not a user
    path = tmp_path / "dci_raw_log_dl.dciLog"
    write_ngscope(path, rows)
    trace = import_dci_log(path, kind="ngscope", rnti=1234, bandwidth_mhz=10)
    assert trace.duration_ms == 30
    assert trace.metadata["start_sfn"] == 1023
    assert trace["own_rbs"].tolist()[:3] == [0, 10, 10]
    assert trace["other_rbs"].tolist()[:3] == [0, 30, 30]
    assert trace["other_users"].tolist()[:3] == [0, 1, 1]  # 4321 only: SI-RNTI is not a user
    assert trace["layers"][4] == 2 and trace["layers"][5] == 1 and trace["layers"][1] == 1
    assert trace["own_rbs"][12] == trace["own_rbs"][11]
    assert trace.metadata["provenance"]["coverage"]["filled_subframes"] == 1
    assert (trace["mcs"] == 20).all()
    auto = import_dci_log(path, kind="ngscope", bandwidth_mhz=10)
    assert auto.metadata["provenance"]["rnti"] in (1234, 4321)


def test_dci_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    good = "1736781011.502040\t0932\t5\t65535\t1\t8\t4\t224\t-1\t-1\t4\t0\t-1\t0\t8\t2\t1\t0\t14\t0020\n"
    path.write_text(good + good.replace("\t8\t4\t", "\tx\t4\t", 1))
    with pytest.raises(InputError, match=r"bad.tsv:2: column 'mcs_idx': expected an integer"):
        import_dci_log(path, kind="falcon")
    path.write_text(good + "1\t2\t3\n")
    with pytest.raises(InputError, match=r"bad.tsv:2: 3 tab-separated fields, expected 20"):
        import_dci_log(path, kind="falcon")


def synthetic_pair(tmp_path: Path, clock_skew_s: float) -> tuple[Path, Path, dict[int, int]]:
    """A diag log scheduling the UE in some subframes and a FALCON log of the same cell whose
    clock is off by ``clock_skew_s``; returns the files and the cell's RBs per SFN-ms."""
    t0 = 1_700_000_000.0
    start = 10_200  # SFN 1020: the SFN wraps inside
    records, falcon, cell = [], [], {}
    rng = np.random.default_rng(5)
    for k in range(0, 300):
        s = (start + k) % 10_240
        own = int(rng.integers(0, 30)) if k % 2 == 0 else 0
        others = int(rng.integers(0, 50))
        cell[s] = own + others
        if own:
            records.append({"Subframe Num": s % 10, "Frame Num": s // 10, "Num RBs": own,
                            "Num Layers": 1, "Serving Cell Index": "PCell",
                            "Transport Blocks": [{"HARQ ID": 0, "TB Size": tbs_bits(10, own) // 8 + 3,
                                                  "MCS": 10, "Num RBs": own}]})
            falcon.append((t0 + k / 1000 + clock_skew_s, s // 10, s % 10, 7000, own))
        if others:
            falcon.append((t0 + k / 1000 + clock_skew_s, s // 10, s % 10, 9000, others))
    data = b""
    for i in range(0, len(records), 10):  # one packet per 10 records, stamped at its last
        batch = records[i:i + 10]
        last = batch[-1]
        k = (last["Frame Num"] * 10 + last["Subframe Num"] - start) % 10_240
        data += encode_message({"type_id": "LTE_PHY_PDSCH_Stat_Indication",
                                "timestamp": t0 + k / 1000 + 0.1, "Records": batch})
    diag = tmp_path / "phone.mi2log"
    diag.write_bytes(data)
    dci = tmp_path / "falcon.tsv"
    dci.write_text("".join(f"{t:.6f}\t{sfn:04d}\t{sf}\t{rnti}\t1\t10\t{n}\t1000\t1000\t-1\t4\t0\t-1"
                           f"\t0\t8\t2\t1\t0\t14\t0020\n" for t, sfn, sf, rnti, n in falcon))
    return diag, dci, cell


@pytest.mark.parametrize("skew_s", [0.0, 2.5])
def test_dci_log_gives_exact_other_rbs_aligned_by_sfn(tmp_path: Path, skew_s: float) -> None:
    diag, dci, cell = synthetic_pair(tmp_path, skew_s)
    trace = import_mobileinsight(diag, bandwidth_mhz=20, dci_path=dci)
    sfn, sf = trace.sfn_subframe()
    s = sfn * 10 + sf
    expected = np.array([cell.get(int(x), 0) for x in s]) - trace["own_rbs"]
    assert (trace["other_rbs"] == expected).all()
    prov = trace.metadata["provenance"]
    assert prov["coverage"]["other_rbs"] == "exact (DCI log)" and prov["other_rbs_estimated"] is False
    assert prov["dci_exact_subframes"] == trace.duration_ms


def test_cli_import_and_info_report_coverage(tmp_path: Path) -> None:
    path = real(PIXEL_XL)
    out = tmp_path / "pxl.cbt"
    done = subprocess.run([CLAWBED, "trace", "import", "--from", "mobileinsight", path, "-o", out],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    info = subprocess.run([CLAWBED, "trace", "info", "--json", out], capture_output=True, text=True)
    cov = json.loads(info.stdout)["coverage"]
    assert cov["versions"]["0xB173 v24"] == 56 and cov["subframes_with_data"] > 0
    text = subprocess.run([CLAWBED, "trace", "info", out], capture_output=True, text=True).stdout
    assert "versions decoded: " in text and "estimated (RSRQ load model)" in text
    bad = subprocess.run([CLAWBED, "trace", "import", "--from", "mobileinsight", real(PIXEL5),
                          "-o", tmp_path / "p5.cbt"], capture_output=True, text=True)
    assert bad.returncode != 0 and "0xB173 v48" in bad.stderr and "Traceback" not in bad.stderr
