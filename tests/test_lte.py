"""The 36.213 tables as loaded from the project's CSVs, and the RSRQ model of CLAW Eq. 6/7."""

from __future__ import annotations

import re

import numpy as np
import pytest

from clawbed import lte


@pytest.mark.parametrize(
    ("itbs", "n_prb", "bits"),
    [(26, 50, 36696), (26, 100, 75376), (0, 1, 16), (6, 1, 328)],
)
def test_known_one_layer_values(itbs: int, n_prb: int, bits: int) -> None:
    assert lte.tables().tbs_1layer_bits[itbs, n_prb] == bits


def test_tables_match_their_readme() -> None:
    """The values the tables' README states (its known cells and the PRBs per bandwidth) are
    what the loaded tables hold: the data and its description cannot drift apart."""
    readme = (lte.TABLES_DIR / "README.md").read_text()
    known = re.findall(r"\(I_TBS (\d+), N_PRB (\d+)\) = (\d+)|\((\d+), (\d+)\) = (\d+)", readme)
    cells = [tuple(int(v) for v in m if v) for m in known]
    assert len(cells) >= 3, "the README's known values were not found"
    for itbs, n_prb, bits in cells:
        assert lte.tables().tbs_1layer_bits[itbs, n_prb] == bits, (itbs, n_prb)
    spec_328 = re.search(r"Cell \(I_TBS (\d+), N_PRB (\d+)\) is (\d+) in the spec", readme)
    assert spec_328 is not None
    itbs, n_prb, bits = (int(v) for v in spec_328.groups())
    assert lte.tables().tbs_1layer_bits[itbs, n_prb] == bits  # the spec's value is kept
    pairs = re.findall(r"([\d.]+) MHz (\d+)", readme)
    assert len(pairs) == 6
    for mhz, n_rb in pairs:
        assert lte.n_rb_for_bandwidth(float(mhz)) == int(n_rb)


def test_tables_live_in_the_repository() -> None:
    """A clone without the shared data folder still has the tables."""
    from clawbed.paths import REPO_ROOT
    assert lte.TABLES_DIR.is_relative_to(REPO_ROOT)
    assert (lte.TABLES_DIR / lte.MCS_TABLE).is_file()


def test_mcs_to_itbs_and_modulation() -> None:
    assert lte.itbs(28) == 26
    assert lte.itbs(10) == 9 and lte.modulation_order(10) == 4
    assert lte.modulation_order(29) == 2
    with pytest.raises(ValueError, match="outside 0..28"):
        lte.itbs(29)


def test_tbs_by_mcs_one_and_two_layers() -> None:
    assert lte.tbs_bits(28, 50) == 36696
    assert lte.tbs_bits(28, 0) == 0
    # Two layers, N_PRB <= 55: the one-layer table at twice the PRBs.
    assert lte.tbs_bits(28, 50, layers=2) == lte.tbs_bits(28, 100)
    # Two layers, N_PRB >= 56: the translation table.
    assert lte.tbs_bits(28, 100, layers=2) == 149776
    with pytest.raises(ValueError, match="layers 3"):
        lte.tbs_bits(28, 10, layers=3)
    with pytest.raises(ValueError, match="N_PRB 111"):
        lte.tbs_bits(28, 111)


def test_clamped_tbs() -> None:
    assert lte.tbs_bits_clamped(28, 0, 50) == lte.tbs_bits(28, 1)
    assert lte.tbs_bits_clamped(28, 80, 50) == lte.tbs_bits(28, 50)


def test_vectorised_capacity_matches_scalar() -> None:
    rng = np.random.default_rng(3)
    mcs = rng.integers(0, 29, 500)
    prbs = rng.integers(0, 51, 500)
    layers = rng.integers(1, 3, 500)
    got = lte.capacity_bits(mcs, prbs, 50, layers)
    want = [lte.tbs_bits(int(m), int(p), int(n)) for m, p, n in zip(mcs, prbs, layers)]
    assert got.tolist() == want


def test_bandwidths() -> None:
    assert [lte.n_rb_for_bandwidth(b) for b in (1.4, 3, 5, 10, 15, 20)] == [6, 15, 25, 50, 75, 100]
    with pytest.raises(ValueError, match="not an LTE bandwidth"):
        lte.n_rb_for_bandwidth(7)


@pytest.mark.parametrize("antennas", [1, 2])
def test_rsrq_model_round_trip(antennas: int) -> None:
    load = np.linspace(0, 1, 51)
    q = lte.rsrq_linear(load, antennas)
    assert np.allclose(lte.load_from_rsrq(q, antennas), load)
    # Idle cell: Q = 1/N_ref; full cell with 2 antennas: 1/(4 + 8*2) = 1/20 (-13 dB).
    assert lte.rsrq_linear(0.0, antennas) == pytest.approx(1 / (2 * antennas))
    assert lte.linear_to_db(lte.rsrq_linear(1.0, 2)) == pytest.approx(-13.01, abs=0.01)


def test_load_from_rsrq_clamps() -> None:
    assert lte.load_from_rsrq(1.0, 2) == 0.0
    assert lte.load_from_rsrq(0.001, 2) == 1.0
