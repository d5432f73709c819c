"""Fuzzing the parsers that take outside input (hypothesis, bounded): trace files (binary and
CSV), experiment specs, the CLAW feedback wire codec, Mahimahi recordings, run records. Every
input either parses or is refused with the parser's own error, which names where; nothing
else escapes (no IndexError, struct.error, UnicodeDecodeError, …) and nothing hangs.

Budget: each test runs a fixed number of examples without a deadline per example, so the
whole file takes seconds; the seeds are derandomized so a failure reproduces."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawbed.claw.feedback import Feedback, FeedbackRejected, decode_echo, decode_feedback
from clawbed.errors import ClawbedError
from clawbed.orchestrator.spec import parse_spec
from clawbed.replay.mahimahi import WireError, parse_request_response
from clawbed.replay.records import LoadRecord
from clawbed.traces import binary, csvform
from clawbed.traces.io import read_trace
from clawbed.traces.synth import synthesize

FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KEY = bytes(range(32))


def _valid_trace_bytes() -> tuple[bytes, bytes]:
    """A small valid trace as .cbt and .csv bytes: the seeds the mutations start from."""
    trace = synthesize("busy-cell", duration_ms=1000, seed=3)
    cbt = io.BytesIO()
    binary.write(trace, cbt)
    text = io.StringIO()
    csvform.write(trace, text)
    return cbt.getvalue(), text.getvalue().encode()


CBT, CSV = _valid_trace_bytes()


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, value in edits:
        if buf:
            buf[pos % len(buf)] = value
    if cut is not None:
        buf = buf[:cut % (len(buf) + 1)]
    return bytes(buf)


_edits = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=8)


@pytest.mark.parametrize("suffix,seed", [(".cbt", CBT), (".csv", CSV)])
@FUZZ
@given(edits=_edits, cut=st.none() | st.integers(0, 1 << 20))
def test_a_mutated_trace_reads_or_is_refused_by_name(tmp_path_factory: pytest.TempPathFactory, suffix: str,
                                                      seed: bytes, edits: list[tuple[int, int]],
                                                      cut: int | None) -> None:
    path = tmp_path_factory.mktemp("fuzz") / f"t{suffix}"
    path.write_bytes(_mutate(seed, edits, cut))
    try:
        trace = read_trace(path)
    except ClawbedError as e:
        assert str(path) in str(e)
    else:
        assert trace.duration_ms == len(trace["t_ms"])


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_as_a_trace(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "t.cbt"
    path.write_bytes(data)
    with pytest.raises(ClawbedError, match=str(path)):
        read_trace(path)


_json_leaf = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=12)
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10),
                                                                                            inner, max_size=5),
                     max_leaves=20)
_spec_keys = st.sampled_from(["name", "repetitions", "loader", "seeds", "matrix", "traces", "pages", "schemes",
                              "conditions", "timeout_s", "paper", "description", "max_other_ues"])


@FUZZ
@given(st.dictionaries(_spec_keys, _json, max_size=6) | _json)
def test_a_random_spec_is_accepted_or_refused_with_a_spec_error(data: object) -> None:
    try:
        parse_spec(data, "fuzz.yaml")
    except ClawbedError as e:
        assert "fuzz.yaml" in str(e)


@FUZZ
@given(st.binary(max_size=120))
def test_random_datagrams_are_rejected_by_the_feedback_codec(data: bytes) -> None:
    with pytest.raises(FeedbackRejected):
        decode_feedback(data, KEY)
    with pytest.raises(FeedbackRejected):
        decode_echo(data, KEY)


@FUZZ
@given(edits=_edits, cut=st.none() | st.integers(0, 200))
def test_a_mutated_feedback_datagram_is_accepted_only_unchanged(edits: list[tuple[int, int]], cut: int | None) -> None:
    good = Feedback(ue_id=3, seq=9, diag_time_ms=1234, w_claw_bytes=43_440, load=0.3, n_f_rbs=100, n_t_rbs=1000,
                    window_ms=100, saturated=False, wireline=False).encode(KEY)
    data = _mutate(good, edits, cut)
    try:
        decoded = decode_feedback(data, KEY)
    except FeedbackRejected:
        return
    assert data == good and decoded.seq == 9  # the HMAC lets nothing else through


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_as_a_mahimahi_recording(data: bytes) -> None:
    try:
        parse_request_response(data)
    except WireError as e:
        assert 0 <= e.offset <= len(data)


@FUZZ
@given(st.dictionaries(st.sampled_from(["load", "round", "scheme", "ok", "plt_ms", "objects", "extra"]), _json,
                       max_size=7))
def test_a_random_results_line_is_a_record_or_named(data: dict) -> None:
    try:
        record = LoadRecord.from_json(json.loads(json.dumps(data)), "results.jsonl:1")
    except ClawbedError as e:
        assert str(e).startswith("results.jsonl:1:")
    else:
        assert isinstance(record, LoadRecord)


def test_the_seed_traces_are_valid(tmp_path: Path) -> None:
    """The mutations start from real traces (else the fuzzing would only test refusals)."""
    for suffix, data in ((".cbt", CBT), (".csv", CSV)):
        path = tmp_path / f"ok{suffix}"
        path.write_bytes(data)
        assert np.all(np.diff(read_trace(path)["t_ms"]) == 1)
