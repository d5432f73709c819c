"""Replay pages: synthetic generation, named pages, materialized files and HAR import (pure)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from clawbed.errors import InputError
from clawbed.replay.pages import (
    ALLOWED_PARENTS,
    IMAGE_2MB_IMAGE_BYTES,
    MIB,
    NAMED_PAGES,
    Page,
    generate_page,
    get_page,
    page_from_har,
)


def test_pages_are_reproducible_by_seed() -> None:
    assert get_page("profile", seed=3) == get_page("profile", seed=3)
    assert get_page("profile", seed=3) != get_page("profile", seed=4)
    a = generate_page(300_000, 30, 3, seed=7)
    assert a == generate_page(300_000, 30, 3, seed=7)


@pytest.mark.parametrize("name", list(NAMED_PAGES))
def test_named_pages_have_their_stated_size_count_and_structure(name: str) -> None:
    spec = NAMED_PAGES[name]
    page = get_page(name)
    assert page.total_bytes == spec.total_bytes
    assert len(page.objects) == spec.n_objects
    assert 1 <= page.max_depth <= spec.max_depth
    by_path = {o.path: o for o in page.objects}
    for obj in page.objects[1:]:
        assert by_path[obj.parent].kind in ALLOWED_PARENTS[obj.kind]
        assert obj.depth == by_path[obj.parent].depth + 1


def test_named_page_ranges() -> None:
    image = get_page("image-2mb")
    assert [o.kind for o in image.objects] == ["html", "image"]
    assert image.objects[1].size_bytes == IMAGE_2MB_IMAGE_BYTES
    profile = get_page("profile")
    assert 1 * MIB <= profile.total_bytes <= 1.5 * MIB and 50 <= len(profile.objects) <= 80
    # Real dependency chains: fonts and images behind stylesheets, objects inserted by scripts.
    parents = {o.path: o.kind for o in profile.objects}
    assert {(parents[o.parent], o.kind) for o in profile.objects[1:]} >= {("css", "font"), ("js", "js"), ("js", "image")}
    sets = [get_page(f"set-{i:02d}") for i in range(1, 21)]
    assert len(sets) == 20
    assert min(p.total_bytes for p in sets) <= 150_000 and max(p.total_bytes for p in sets) >= 4 * MIB
    assert min(len(p.objects) for p in sets) <= 10 and max(len(p.objects) for p in sets) >= 200


def test_unknown_page_lists_the_names() -> None:
    with pytest.raises(InputError, match="image-2mb, profile, set-01"):
        get_page("nope")


def test_total_below_the_minimum_names_total_bytes() -> None:
    with pytest.raises(InputError, match="total_bytes=10000"):
        generate_page(10_000, 50, 3, seed=1)


def test_materialized_files_are_valid_and_sum_to_the_total(tmp_path: Path) -> None:
    from fontTools.ttLib import TTFont
    from PIL import Image

    page = get_page("set-06")
    manifest = json.loads(page.materialize(tmp_path).read_text())
    assert manifest["objects"] == page.manifest()["objects"]
    files = {"/" + str(f.relative_to(tmp_path)): f for f in tmp_path.rglob("*") if f.is_file()}
    del files["/manifest.json"]
    assert sorted(files) == sorted(o.path for o in page.objects)
    assert sum(f.stat().st_size for f in files.values()) == page.total_bytes
    for obj in page.objects:
        data = files[obj.path].read_bytes()
        assert len(data) == obj.size_bytes, obj.path
        if obj.kind == "image":
            with Image.open(io.BytesIO(data)) as im:
                im.load()  # decodes the pixels: fails on a broken file
                assert im.format == ("PNG" if obj.path.endswith(".png") else "JPEG")
        elif obj.kind == "font":
            assert TTFont(io.BytesIO(data)).flavor == "woff"
        elif obj.kind == "html":
            assert b'<link rel=icon href="data:,">' in data
        for child in page.children(obj.path):
            assert child.path.encode() in data, (obj.path, child.path)


def _har(page: Page) -> dict:
    """A Chrome-like HAR of ``page`` (initiator URLs give the parents)."""
    mime = {"html": "text/html", "css": "text/css", "js": "application/javascript",
            "font": "font/woff"}
    entries = []
    for obj in page.objects:
        entry = {"request": {"method": "GET", "url": f"https://example.test{obj.path}"},
                 "response": {"status": 200, "bodySize": obj.size_bytes,
                              "content": {"size": obj.size_bytes, "mimeType": mime.get(
                                  obj.kind, "image/png" if obj.path.endswith(".png") else "image/jpeg")}}}
        if obj.parent:
            entry["_initiator"] = {"type": "parser", "url": f"https://example.test{obj.parent}"}
        entries.append(entry)
    return {"log": {"version": "1.2", "entries": entries}}


def test_har_round_trip(tmp_path: Path) -> None:
    page = get_page("set-03")
    har = _har(page)
    # Entries a replay does not keep: a redirect and a data URL.
    har["log"]["entries"].insert(2, {"request": {"url": "https://example.test/moved"},
                                     "response": {"status": 301, "bodySize": 0,
                                                  "content": {"size": 0, "mimeType": ""}}})
    har["log"]["entries"].insert(3, {"request": {"url": "data:image/png;base64,AAAA"},
                                     "response": {"status": 200, "bodySize": 3,
                                                  "content": {"size": 3, "mimeType": "image/png"}}})
    path = tmp_path / "page.har"
    path.write_text(json.dumps(har))
    imported = page_from_har(path)
    assert [(o.kind, o.size_bytes, o.depth) for o in imported.objects] == \
        [(o.kind, o.size_bytes, o.depth) for o in page.objects]
    assert imported.total_bytes == page.total_bytes
    imported.materialize(tmp_path / "site")


def test_bad_har_names_the_field(tmp_path: Path) -> None:
    har = _har(get_page("set-01"))
    del har["log"]["entries"][1]["response"]["bodySize"]
    path = tmp_path / "bad.har"
    path.write_text(json.dumps(har))
    with pytest.raises(InputError, match=r"log\.entries\[1\]\.response\.bodySize"):
        page_from_har(path)
    path.write_text(json.dumps({"log": {}}))
    with pytest.raises(InputError, match=r"log\.entries: missing"):
        page_from_har(path)
    har = _har(get_page("set-01"))
    har["log"]["entries"].pop(0)
    path.write_text(json.dumps(har))
    with pytest.raises(InputError, match=r"entries\[0\]\.response\.content\.mimeType.*HTML"):
        page_from_har(path)
    path.write_text("{not json")
    with pytest.raises(InputError, match="not JSON"):
        page_from_har(path)
