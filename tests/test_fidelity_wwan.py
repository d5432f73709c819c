"""WWAN-1's pure parts: the row's profiles build valid emulator configs, the chosen channel-access
quartiles give the paper's first-packet latency range, the throughput arithmetic, the quick
plan, and the criterion's verdicts on synthetic numbers. Fast, no namespaces."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clawbed.emulator.config import EmulatorConfig
from clawbed.orchestrator.fidelity import wwan
from clawbed.orchestrator.fidelity.definitions import ROWS_DIR, load_row
from clawbed.orchestrator.fidelity.runner import experiment_for

ROW = load_row(ROWS_DIR / "WWAN-1.yaml")
Z75 = 0.6744897501960817


def _config(tmp_path: Path, prof: dict[str, Any]) -> EmulatorConfig:
    ue, fields = wwan.cell_settings(prof, queue_bytes=3 << 20)
    return EmulatorConfig.build(output_dir=tmp_path / "out", core={"netns": "cbtcore"},
                                ues=[{"netns": "cbtu0", **ue}], **fields)


def test_the_row_names_the_registered_experiment() -> None:
    assert ROW.experiment in wwan.EXPERIMENTS
    assert experiment_for(ROW.experiment) is wwan.web_vs_bulk
    assert ROW.quick_skip is None
    assert ROW.full_minutes > ROW.quick_minutes > 0


def test_every_profile_builds_a_valid_emulator_config(tmp_path: Path) -> None:
    profiles = ROW.params["profiles"]
    assert set(profiles) == {"gprs", "cdma1x", "dialup"}
    configs = {name: _config(tmp_path, prof) for name, prof in profiles.items()}
    gprs, dialup = configs["gprs"], configs["dialup"]
    assert gprs.ues[0].rate == "39.6kbit" and gprs.ues[0].uplink_rate == "13.2kbit"
    assert gprs.delays.core_down_ms == gprs.delays.core_up_ms == 200
    assert gprs.cell.rrc["kind"] == "lte" and gprs.cell.rrc["tail_ms"] < 400  # below the core RTT
    assert gprs.cell.stall["kind"] == "poisson" and gprs.cell.stall["max_ms"] == 3000
    assert configs["cdma1x"].ues[0].rate == "144kbit"
    # Dial-up: no RRC, no stalls, 100–150 ms.
    assert dialup.cell.rrc == {"kind": "off"} and dialup.cell.stall == {"kind": "off"}
    assert 100 <= dialup.delays.core_down_ms + dialup.delays.core_up_ms <= 150


def test_a_profile_without_rrc_or_stall_gets_both_off(tmp_path: Path) -> None:
    ue, fields = wwan.cell_settings({"rate": "56kbit", "core_rtt_ms": 120}, queue_bytes=1000)
    assert fields["cell"] == {"rrc": {"kind": "off"}, "stall": {"kind": "off"}}
    assert ue == {"rate": "56kbit", "cell": {"queue_limit_bytes": 1000}}
    with pytest.raises(ValueError, match="core_rtt_ms"):
        wwan.cell_settings({"rate": "56kbit"}, queue_bytes=1000)


def _quartile_draws(rrc: dict[str, Any], n: int, rng: np.random.Generator) -> np.ndarray:
    """The emulator's promotion delay (rrc.rs, QuartileDelay): a two-piece lognormal."""
    p25, p50, p75 = rrc["promotion_p25_ms"], rrc["promotion_ms"], rrc["promotion_p75_ms"]
    lo, hi = math.log(p50 / p25) / Z75, math.log(p75 / p50) / Z75
    z = rng.standard_normal(n)
    return p50 * np.exp(np.where(z < 0, z * lo, z * hi))


@pytest.mark.parametrize("name", ["gprs", "cdma1x"])
def test_first_packet_round_trip_after_idle_spans_the_papers_600_ms_to_3_s(name: str) -> None:
    prof = ROW.params["profiles"][name]
    rng = np.random.default_rng(7)
    # A 64-byte round trip after idle: the core RTT, ~70 ms of serialisation and uplink grant,
    # and two promotions (the uplink's access; the reply finds the UE idle again, tail < RTT).
    rtt = prof["core_rtt_ms"] + 70 + _quartile_draws(prof["rrc"], 100_000, rng) + _quartile_draws(prof["rrc"], 100_000, rng)
    p5, p95 = np.percentile(rtt, [5, 95])
    assert 550 <= p5 <= 800, p5
    assert 2500 <= p95 <= 3500, p95


def test_the_quick_plan_runs_a_gprs_subset_and_everything_elsewhere() -> None:
    quick, full = ROW.parameters(quick=True), ROW.parameters(quick=False)
    assert wwan.plan(quick, "gprs") == ([100], ["mail"])
    assert wwan.plan(quick, "dialup") == ([1, 5, 10, 50, 100], ["mail", "yahoo", "amazon", "cnn"])
    assert wwan.plan(full, "gprs") == wwan.plan(full, "dialup")
    assert quick["get_repetitions"] == quick["page_repetitions"] == 1
    with pytest.raises(ValueError, match="bbc"):
        wwan.plan({**full, "sites": ["bbc"]}, "gprs")


def test_throughput_arithmetic() -> None:
    assert wwan.throughput_bps(100_000, 20.0) == 40_000
    assert math.isnan(wwan.throughput_bps(1000, 0.0))
    clients = [
        {"bytes": 100_000, "t_start": 0.0, "t_connected": 1.0, "t_end": 21.0},
        {"bytes": 100_000, "t_start": 50.0, "t_connected": 52.0, "t_end": 62.0},
        {"bytes": 1000, "t_start": 0.0, "t_connected": 0.5, "t_end": 1.0},
        {"error": "connection reset"},
    ]
    got = wwan.get_throughputs(clients)
    assert set(got) == {1, 100}
    assert got[100]["bps"] == pytest.approx((40_000 + 80_000) / 2)
    assert got[100]["with_handshake_bps"] == pytest.approx((800_000 / 21 + 800_000 / 12) / 2)
    assert got[1]["bps"] == pytest.approx(16_000) and got[100]["n"] == 2


def _measured(link: float, ftp_frac: float, web_frac: float, page_s: dict[str, float] | None = None) -> dict[str, Any]:
    """A profile whose 100 KB GET and every page load get those fractions of ``link``."""
    ftp_s = 100_000 * 8 / (ftp_frac * link)
    pages = {}
    for site, (_, kb) in wwan.SITES.items():
        nbytes = kb * 1000
        t = page_s[site] if page_s else nbytes * 8 / (web_frac * link)
        pages[site] = [(nbytes, t)]
    return {"link_bps": link, "gets": wwan.get_throughputs([{"bytes": 100_000, "t_start": 0.0, "t_connected": 0.0,
                                                             "t_end": ftp_s}]), "pages": pages}


def _verdicts(checks: list[Any]) -> dict[str, bool | None]:
    return {c.name: c.ok for c in checks}


def test_the_criterion_passes_on_the_papers_own_shape() -> None:
    summary = wwan.summarise({"gprs": _measured(39_600, 0.77, 0.2, page_s=wwan.GPRS_PAGE_S),
                              "cdma1x": _measured(144_000, 0.65, 0.26),
                              "dialup": _measured(56_000, 0.9, 0.75)})
    assert summary["gprs"]["web_fraction"] == pytest.approx(np.mean([v / 39.6 for v in wwan.PAPER_WEB_KBPS["gprs"].values()]))
    checks = wwan.criterion_checks(summary)
    assert all(c.ok is True for c in checks), [(c.name, c.value) for c in checks if c.ok is not True]
    assert len(checks) == 3 * 3 + 4


def test_the_criterion_fails_where_the_numbers_do() -> None:
    summary = wwan.summarise({"gprs": _measured(39_600, 0.9, 0.5),           # web too good, ratio 1.8
                              "cdma1x": _measured(144_000, 0.6, 0.2),        # 100 KB GET too slow
                              "dialup": _measured(56_000, 0.9, 0.6)})        # web below 65 %, ratio 1.5
    v = _verdicts(wwan.criterion_checks(summary))
    assert v["gprs: web throughput (mean of sites) / link rate"] is False
    assert v["gprs: 100 KB GET / web throughput"] is False
    assert v["gprs: 100 KB GET throughput / link rate"] is True
    assert v["cdma1x: 100 KB GET throughput / link rate"] is False
    assert v["cdma1x: web throughput (mean of sites) / link rate"] is True
    assert v["dialup: web throughput (mean of sites) / link rate"] is False
    assert v["dialup: 100 KB GET / web throughput"] is False
    # GPRS at half the link: every page faster than Table 1's −30 %.
    assert all(v[f"gprs: {s} page time vs Table 1"] is False for s in wwan.SITES)


def test_missing_parts_are_not_judged_and_say_why() -> None:
    gprs = _measured(39_600, 0.77, 0.2, page_s=wwan.GPRS_PAGE_S)
    gprs["pages"] = {"mail": gprs["pages"]["mail"]}
    summary = wwan.summarise({"gprs": gprs, "cdma1x": _measured(144_000, 0.65, 0.26)})
    missing = {"gprs/cnn": "the quick profile skips cnn on gprs", "dialup": "the profile did not run"}
    checks = {c.name: c for c in wwan.criterion_checks(summary, missing)}
    assert checks["gprs: mail page time vs Table 1"].ok is True
    assert checks["gprs: cnn page time vs Table 1"].ok is None
    assert checks["gprs: cnn page time vs Table 1"].note == "the quick profile skips cnn on gprs"
    assert checks["gprs: amazon page time vs Table 1"].note.startswith("no measurement")
    ratio = checks["dialup: 100 KB GET / web throughput"]
    assert ratio.ok is None and ratio.note == "the profile did not run" and ratio.target == "≤ 1.3"


def test_the_web_checks_cause_is_the_links_busy_time() -> None:
    from clawbed.orchestrator.fidelity.wwan import radio_cause

    cause = radio_cause({"link_busy_fraction_in_page_loads": 0.41, "promotions_in_page_loads": 12.0}, 4)
    assert cause.startswith("ground truth: the downlink carried data in 41% of the page loads' time, with 3.0 promotions")
    assert radio_cause({"error": "x"}, 4) == "" and radio_cause({"link_busy_fraction_in_page_loads": 0.4}, 0) == ""
