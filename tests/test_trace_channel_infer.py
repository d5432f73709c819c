"""The channel of a phone log where the UE was not scheduled (traces/diaglog/channelfit.py
through the importer; ``trace info``'s per-second view and ``trace import --segment``,
traces/segments.py).

The synthetic log (tests/gaplog.py, the project's own encoder) has a 12 s gap after a
signalling block at MCS 0, with only idle measurements in it; the old rule held that MCS 0
through the whole gap.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gaplog import GAP, T0_UNIX_S, UNMEASURED, record, synthetic_log

from clawbed.errors import ClawbedError, InputError
from clawbed.lte import tbs_bits
from clawbed.paths import shared_dir
from clawbed.traces.diaglog import channelfit
from clawbed.traces.diaglog.encode import encode_message
from clawbed.traces.importers import import_mobileinsight
from clawbed.traces.io import read_trace
from clawbed.traces.segments import channel_summary, cut, informative_segments, parse_segment, per_second
from clawbed.traces.synth import synthesize
from clawbed.traces.validate import check_trace

CLAWBED = Path(sys.executable).parent / "clawbed"
@pytest.fixture(scope="module")
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_log(tmp_path_factory.mktemp("gap") / "gap.mi2log")


def test_the_gap_follows_the_measurements_not_the_last_block(log_path: Path) -> None:
    trace = import_mobileinsight(log_path, bandwidth_mhz=10)
    assert check_trace(trace, "t") == []
    mcs, source = trace["mcs"], trace["mcs_source"]
    gap = slice(*GAP)
    # The gap: every subframe inferred from the idle measurements (SNR 15 dB → the UE's MCS 20
    # there), none at the signalling block's MCS 0.
    assert (source[gap] == channelfit.INFERRED).all()
    assert (mcs[gap] == 20).all(), np.unique(mcs[gap])
    # Scheduled link-adapted blocks keep the log's MCS; the signalling blocks are inferred.
    own, tbs = trace["own_rbs"], trace["own_tbs_bits"]
    link = (own > 0) & (tbs >= channelfit.MIN_FIT_TBS_BITS)
    assert (source[link] == channelfit.MEASURED).all()
    assert (source[(own > 0) & ~link] == channelfit.INFERRED).all()
    assert set(np.unique(mcs[(own > 0) & ~link][:50])) == {10}  # the first signalling blocks sit at 5 dB
    # The span without any measurement: held at the last value, marked and listed, never MCS 0.
    hole = slice(UNMEASURED[0] + channelfit.MEAS_NEAR_MS + 1, UNMEASURED[1] - channelfit.MEAS_NEAR_MS)
    assert (source[hole] == channelfit.HELD).all() and (mcs[hole] == 20).all()
    channel = trace.metadata["provenance"]["channel"]
    spans = channel["longest_held_spans_ms"]
    assert spans and spans[0][0] > UNMEASURED[0] and spans[0][0] + spans[0][1] < UNMEASURED[1], spans
    # The fit and its error in the provenance: two SNR bins, MCS 10 and 20; wrong only for the
    # few blocks just before an SNR step, whose nearest measurement is the next phase's.
    fit = channel["fit"]
    assert fit["predictor"] == "snr_db"
    assert {b[2] for b in fit["bins"] if b[3]} == {10, 20}
    assert channel["error_held_out"]["mae_mcs"] < 0.01 and channel["error_in_sample"]["mae_mcs"] < 0.01
    assert channel["inferred_share"] == pytest.approx(float(np.mean(source == channelfit.INFERRED)), abs=1e-4)
    assert channel["measured_subframes"] + channel["inferred_subframes"] + channel["held_subframes"] == len(mcs)
    assert "mcs_source" in trace.metadata["provenance"]["mapping"]


def test_a_log_without_measurements_says_so_and_holds_the_blocks_mcs(tmp_path: Path) -> None:
    path = tmp_path / "nomeas.mi2log"
    recs = [record(k, 25, 12, tbs_bits(12, 25)) for k in range(0, 3000, 2)]
    path.write_bytes(b"".join(encode_message({"type_id": "LTE_PHY_PDSCH_Stat_Indication",
                                              "timestamp": T0_UNIX_S + (i + 9) * 2 / 1000,
                                              "Records": recs[i:i + 10]}) for i in range(0, len(recs), 10)))
    trace = import_mobileinsight(path, bandwidth_mhz=10)
    channel = trace.metadata["provenance"]["channel"]
    assert channel["fit"] is None and "no serving-cell measurement" in channel["no_fit_reason"]
    assert set(np.unique(trace["mcs_source"])) == {channelfit.MEASURED, channelfit.HELD}
    assert (trace["mcs"] == 12).all()


def test_fit_pools_thin_bins_and_clamps_outside_its_range() -> None:
    x = np.concatenate([np.full(40, 7.0), np.full(5, 9.0), np.full(40, 15.0)])
    mcs = np.concatenate([np.full(40, 8), np.full(5, 28), np.full(40, 18)])
    model = channelfit.fit("snr_db", x, mcs, np.zeros(len(x), dtype=bool))
    assert model is not None
    # The 5-block bin at 8…10 dB pools its nearest neighbours (6…8 and 10…12 dB: 40 blocks at
    # MCS 8) and takes their median, not its own 28; the empty 12…14 dB bin pools out to both
    # sides (8…10 and 14…16, then 6…8: median 18).
    pred, layers = model.predict(np.array([-10.0, 7.5, 9.0, 13.0, 15.0, 40.0]))
    assert pred.tolist() == [8, 8, 8, 18, 18, 18]
    assert layers.tolist() == [1] * 6
    assert channelfit.fit("snr_db", x[:10], mcs[:10], np.zeros(10, dtype=bool)) is None


def test_info_shows_the_shares_per_second_and_segments(log_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "gap.cbt"
    done = subprocess.run([CLAWBED, "trace", "import", "--from", "mobileinsight", log_path, "--bandwidth-mhz", "10",
                           "-o", out], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    info = json.loads(subprocess.run([CLAWBED, "trace", "info", "--json", out], capture_output=True,
                                     text=True, check=True).stdout)
    ch = info["channel"]
    assert ch["inferred_share"] > 0.5 and ch["held_share"] > 0 and ch["measured_share"] > 0.3 * 14 / 26
    per = ch["per_second"]
    assert per["measured"][10] == 0 and per["inferred"][10] == 1000 and per["held"][21] == 1000
    # Two informative segments: 0–8 s (the longer, first) and 24–26 s.
    assert [(s["start_s"], s["end_s"]) for s in ch["segments"]] == [(0, 8), (24, 26)]
    text = subprocess.run([CLAWBED, "trace", "info", out], capture_output=True, text=True, check=True).stdout
    assert "inferred from the UE's measurements" in text and "--segment 0:8" in text and "?" in text
    # --segment best cuts the first of them; the cut keeps the SFNs and says what it is.
    best = tmp_path / "best.cbt"
    done = subprocess.run([CLAWBED, "trace", "import", "--from", "mobileinsight", log_path, "--bandwidth-mhz", "10",
                           "--segment", "best", "-o", best], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    whole, part = read_trace(out), read_trace(best)
    assert part.duration_ms == 8000 and part.metadata["provenance"]["segment"]["of_ms"] == whole.duration_ms
    np.testing.assert_array_equal(part["mcs"], whole["mcs"][:8000])
    bad = subprocess.run([CLAWBED, "trace", "import", "--from", "mobileinsight", log_path, "--segment", "30:10",
                          "-o", tmp_path / "x.cbt"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--segment '30:10'" in bad.stderr and "Traceback" not in bad.stderr


def test_segment_cut_moves_the_start_sfn_by_whole_frames(log_path: Path) -> None:
    trace = import_mobileinsight(log_path, bandwidth_mhz=10)
    a, b = parse_segment("12.345:14", trace)
    assert (a, b) == (12340, 14000)
    part = cut(trace, a, b)
    np.testing.assert_array_equal(part.sfn_subframe()[0], trace.sfn_subframe()[0][a:b])
    assert part["t_ms"][0] == 0 and check_trace(part, "t") == []
    assert parse_segment(":2", trace) == (0, 2000) and parse_segment("25:", trace) == (25000, trace.duration_ms)
    for bad in ("x", "5", "30:", "3:3"):
        with pytest.raises(InputError, match="--segment"):
            parse_segment(bad, trace)
    seconds = per_second(trace)
    assert seconds is not None and informative_segments(seconds)[0]["basis"] == "measured"
    assert channel_summary(cut(trace, 8000, 20000)) is not None
    # A trace that does not mark its MCS (a synthetic one) has no channel part, and no 'best'.
    synth = synthesize("idle-cell", duration_ms=3000, seed=1)
    assert per_second(synth) is None and channel_summary(synth) is None
    with pytest.raises(InputError, match="mcs_source"):
        parse_segment("best", synth)
    assert parse_segment("1:2", synth) == (1000, 2000)


# --- the real logs (skipped without the shared data folder) ---------------------------------


def real(name: str) -> Path:
    try:
        path = shared_dir() / "data" / "real-logs" / name
    except ClawbedError as e:
        pytest.skip(f"shared data folder absent ({e}); set CLAWBED_SHARED to run this test")
    if not path.is_file():
        pytest.skip(f"{path} absent: the real logs are in the shared data folder")
    return path


def test_pixel_xl_gaps_follow_its_measurements() -> None:
    trace = import_mobileinsight(real("hackathon2018_PixelXL_2018-08-25.mi2log"), bandwidth_mhz=10)
    mcs, source = trace["mcs"], trace["mcs_source"]
    channel = trace.metadata["provenance"]["channel"]
    assert channel["fit"]["predictor"] == "snr_db" and channel["held_subframes"] == 0
    # No second of the inferred channel at MCS 0 (the old hold gave runs of it after
    # payload-sized blocks), and the inferred values stay within the log's own blocks' range.
    zero = (mcs == 0).astype(np.int8)
    starts, lengths = channelfit.runs_of(zero.astype(bool))
    assert (lengths < 1000).all(), lengths.max()
    own = mcs[source == channelfit.MEASURED]
    inferred = mcs[source == channelfit.INFERRED]
    assert own.min() <= inferred.min() and inferred.max() <= own.max()
    assert 0 < channel["error_held_out"]["mae_mcs"] < 6


def test_held_out_error_beside_the_hold_rule_and_the_floor() -> None:
    # Four seconds of blocks, the MCS steady within each second (10, 12, 14, 16) and the
    # measurement saying nothing (one SNR): the floor (each second's own median) is exact; the
    # hold of the previous rule is off by the step from the last visible second; the model and
    # the constant are the median of the other seconds.
    rows = np.concatenate([np.arange(s * 1000, s * 1000 + 500, 5) for s in range(4)])
    mcs = np.repeat([10, 12, 14, 16], 100)
    err = channelfit.held_out_error(np.full(len(rows), 8.0), mcs, np.zeros(len(rows), dtype=bool), rows,
                                    predictor="snr_db", logged=(rows, mcs), folds=4)
    assert err["folds"] == 4 and err["blocks"] == 400 and err["second_median_mae_mcs"] == 0.0
    assert err["mae_mcs"] == err["median_mae_mcs"] > 0
    assert err["hold_mae_mcs"] == 2.0  # one step: the neighbouring second's MCS
