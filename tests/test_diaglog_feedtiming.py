"""The phone's feed timing measured from diag logs (traces/diaglog/feedtiming.py): on a log
written by a simulated phone whose packing and lateness are known, and on the real logs
against the committed result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_diaglog import real_log_files, real_logs_dir

from clawbed.traces.diaglog import feedtiming
from clawbed.traces.diaglog.encode import encode_message

#: The simulated phone's clock: timestamp = this + SFN time (ms), a constant the
#: measurement must not need to know.
CLOCK_OFFSET_MS = 1_500_000_000_000.0 + 3_217.0


def _pdsch(t_ms: int, sent_ms: float) -> list[dict[str, Any]]:
    """0xB173 records of subframe ``t_ms`` (absolute ms) as a message stamped ``sent_ms``."""
    sfn = t_ms % feedtiming.SFN_PERIOD_MS
    return [{"Frame Num": sfn // 10, "Subframe Num": sfn % 10, "Num RBs": 10, "Num Layers": 1,
             "Transport Blocks": [{"HARQ ID": 0, "TB Size": 100, "MCS": 10, "Num RBs": 10}]}]


def simulated_phone(scheduled: list[int], capacity: int, period_ms: int,
                    step_at_ms: int | None = None, step_ms: float = 0.0) -> tuple[bytes, list[tuple[int, float]]]:
    """A log as a phone writes it: 0xB173 packets sent when they hold ``capacity`` records
    (at once) or at a flush tick every ``period_ms`` (then as late as their last record is
    old). From ``step_at_ms`` on the clock jumps by ``step_ms``. Returns the bytes and each
    packet's (records, true delay ms)."""
    out = bytearray()
    truth: list[tuple[int, float]] = []
    held: list[int] = []

    def send(at_ms: float) -> None:
        stamp = at_ms + CLOCK_OFFSET_MS + (step_ms if step_at_ms is not None and at_ms >= step_at_ms else 0.0)
        records = [r for t in held for r in _pdsch(t, at_ms)]
        out.extend(encode_message({"type_id": "LTE_PHY_PDSCH_Stat_Indication", "timestamp": stamp / 1000.0,
                                   "Records": records}))
        truth.append((len(held), at_ms - held[-1]))
        held.clear()

    scheduled_set = set(scheduled)
    for t in range(max(scheduled) + period_ms + 1):
        if t in scheduled_set:
            held.append(t)
            if len(held) == capacity:
                send(float(t))
        if (t + 1) % period_ms == 0 and held:
            send(float(t + 1))
    return bytes(out), truth


def test_a_simulated_phone_is_measured_as_it_was_written() -> None:
    # Sparse records (timer flushes, late), a busy stretch (full packets, at once), an SFN
    # wrap (10 240 ms) inside, and a clock step of 700 ms (a new alignment segment, with a
    # busy stretch of its own: a segment's delays count from its promptest packet).
    scheduled = (list(range(0, 9000, 37)) + list(range(9000, 9400)) + list(range(9400, 12500, 53))
                 + list(range(12500, 12800)) + list(range(12800, 15000, 41)))
    data, truth = simulated_phone(scheduled, capacity=21, period_ms=300, step_at_ms=12_000, step_ms=700.0)
    packets, info = feedtiming.packet_timings(data)
    assert len(packets) == len(truth)
    assert len(info["segments"]) == 2
    # Delays are measured from the promptest packet of each segment: here a full packet,
    # sent at once (true delay 0).
    for p, (records, delay) in zip(packets, truth):
        assert p.records == records
        assert p.delay_ms == pytest.approx(delay, abs=0.05)
    s = feedtiming.summarize(packets)
    assert s["capacity_records"] == 21
    assert s["flush_period_ms"] == 300.0
    assert s["full_packets"] == sum(1 for r, _ in truth if r == 21) > 10
    assert s["full_packet_delay_ms"]["p100"] <= 0.05
    assert 0 < s["flushed_packet_delay_ms"]["p50"] < 300


def test_the_packing_rule_replayed_over_a_phones_records_gives_its_packets() -> None:
    scheduled = list(range(0, 3000, 29)) + list(range(3000, 3300)) + list(range(3300, 8000, 61))
    data, truth = simulated_phone(scheduled, capacity=21, period_ms=300)
    packets, _ = feedtiming.packet_timings(data)
    check = feedtiming.replay_packing(packets, 21, 300)
    assert check is not None
    assert check["packets_modelled"] == len(truth)
    assert check["records_per_packet_modelled"] == check["records_per_packet_measured"]
    for q, measured in check["delay_ms_measured"].items():
        assert check["delay_ms_modelled"][q] == pytest.approx(measured, abs=1.0)


def test_a_packet_carries_its_distinct_subframes_and_span() -> None:
    # Two records of one subframe (two cells) and one 40 ms later: 3 records, 2 subframes.
    recs = _pdsch(100, 0) + [{**_pdsch(100, 0)[0], "Serving Cell Index": "SCell"}] + _pdsch(140, 0)
    data = encode_message({"type_id": "LTE_PHY_PDSCH_Stat_Indication",
                           "timestamp": (CLOCK_OFFSET_MS + 145) / 1000, "Records": recs})
    (p,), _ = feedtiming.packet_timings(data)
    assert (p.records, p.subframes, p.span_ms, p.delay_ms) == (3, 2, 41, 0.0)


def test_the_cli_prints_the_figures_and_writes_the_result(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from clawbed.cli import cli

    data, truth = simulated_phone(list(range(0, 5000, 23)) + list(range(5000, 5200)), capacity=21, period_ms=300)
    log = tmp_path / "phone.mi2log"
    log.write_bytes(data)
    out = tmp_path / "timing.json"
    result = CliRunner().invoke(cli, ["trace", "feed-timing", str(log), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"0xB173: {len(truth)} packets" in result.output and "flush tick 300 ms" in result.output
    assert json.loads(out.read_text())["phone_feed"]["records_per_packet"] == 21
    result = CliRunner().invoke(cli, ["trace", "feed-timing", str(tmp_path / "absent.mi2log")])
    assert result.exit_code != 0 and "absent.mi2log" in result.output


def test_an_unreadable_log_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.mi2log"
    assert feedtiming.main([str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_the_committed_result_is_what_the_real_logs_give() -> None:
    real_logs_dir()
    result = feedtiming.measure(real_log_files())
    committed = json.loads(feedtiming.RESULT_FILE.read_text())
    assert result == committed, "re-run: python -m clawbed.traces.diaglog.feedtiming <real logs> -o " \
                                "traces/diaglog/phone-feed-timing.json"
    pdsch = result["pooled"]["0xB173"]
    # The two parameters the emulator's phone feed uses, and the check of the alignment:
    # full packets go at once.
    assert result["phone_feed"]["records_per_packet"] == 21
    assert result["phone_feed"]["flush_period_ms"] == 300.0
    assert pdsch["full_packet_delay_ms"]["p100"] <= 1.5
    assert pdsch["delay_ms"]["p100"] <= 310
    # The rule replayed over the 2017 log's own records gives its packets (sizes, delays).
    check = next(lg for lg in result["logs"] if lg["file"].startswith("adrianfeng"))["packing_rule_check"]
    assert check["records_per_packet_modelled"] == check["records_per_packet_measured"]
    for q in ("p25", "p50", "p75", "p90"):
        assert abs(check["delay_ms_modelled"][q] - check["delay_ms_measured"][q]) <= 10
