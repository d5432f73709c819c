"""The loader worker's request loop (pure: no namespace, no browser)."""

from __future__ import annotations

import io
import json

import pytest

from clawbed.replay.loaders.result import LoadResult
from clawbed.replay.loaders.worker import parse_request, serve


@pytest.mark.parametrize("line,field", [
    ("not json", "not JSON"), ("[1]", "not a JSON object"), ('{"timeout_s": 5}', "field url"),
    ('{"url": "", "timeout_s": 5}', "field url"), ('{"url": "https://a/", "timeout_s": 0}', "field timeout_s"),
    ('{"url": "https://a/", "timeout_s": true}', "field timeout_s"), ('{"url": "https://a/"}', "field timeout_s"),
])
def test_a_bad_request_names_what_is_wrong(line: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_request(line)


def test_every_request_line_gets_one_answer_in_order() -> None:
    seen: list[tuple[str, float]] = []

    def load_one(url: str, timeout_s: float) -> LoadResult:
        seen.append((url, timeout_s))
        if url.endswith("boom"):
            raise RuntimeError("the browser vanished")
        return LoadResult(ok=True, loader="h2", url=url, plt_ms=12.5)

    requests = "\n".join([json.dumps({"url": "https://a/1", "timeout_s": 5}), "", "garbage",
                          json.dumps({"url": "https://a/boom", "timeout_s": 2.5}),
                          json.dumps({"url": "https://a/2", "timeout_s": 5})]) + "\n"
    out = io.StringIO()
    assert serve(load_one, "h2", io.StringIO(requests), out) == 0
    answers = [LoadResult.from_json(line) for line in out.getvalue().splitlines()]
    assert seen == [("https://a/1", 5.0), ("https://a/boom", 2.5), ("https://a/2", 5.0)]
    assert [(a.ok, a.url) for a in answers] == [(True, "https://a/1"), (False, ""), (False, "https://a/boom"),
                                                (True, "https://a/2")]
    assert "h2 worker: request is not JSON" in (answers[1].error or "")
    assert "RuntimeError: the browser vanished" in (answers[2].error or "")
    assert answers[0].plt_ms == 12.5
