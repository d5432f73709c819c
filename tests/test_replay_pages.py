"""Replay pages: synthetic generation, named pages, materialized files, HAR import and a user's
own folder (pure)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT
from clawbed.replay.pages import (
    ALLOWED_PARENTS,
    DIRECTORY_INDEX,
    IMAGE_2MB_IMAGE_BYTES,
    MIB,
    NAMED_PAGES,
    DirectoryPage,
    Page,
    describe_protocol,
    document_protocol,
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


# -- a user's own folder (dir:PATH[@INDEX]) ------------------------------------------------------

def write_folder(root: Path) -> dict[str, bytes]:
    """A small site of a user's: an index, a stylesheet and an image in sub-folders, a second
    page, a file with a space in its name, their own manifest.json, and hidden files."""
    files = {
        "index.html": b'<!DOCTYPE html><html><head><link rel="icon" href="data:,">'
                      b'<link rel="stylesheet" href="css/site.css"></head>'
                      b'<body><img src="img/logo.png"><a href="other.html">x</a></body></html>',
        "other.html": b"<!DOCTYPE html><html><body>other</body></html>",
        "css/site.css": b"body { color: #123456; }\n" * 40,
        "img/logo.png": bytes(range(256)) * 8,
        "notes and more.txt": b"plain text",
        "manifest.json": b'{"name": "the user\'s web app manifest"}',
        ".git/HEAD": b"ref: refs/heads/main",
        ".hidden": b"not served",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return {k: v for k, v in files.items() if not k.startswith(".")}


def test_a_folder_becomes_a_page_and_its_copy_keeps_the_users_files(tmp_path: Path) -> None:
    files = write_folder(tmp_path / "mysite")
    page = get_page(f"dir:{tmp_path / 'mysite'}")
    assert isinstance(page, DirectoryPage)
    assert page.root.path == "/index.html" and page.root.kind == "html"
    assert {o.path: o.size_bytes for o in page.objects} == {
        "/index.html": len(files["index.html"]), "/other.html": len(files["other.html"]),
        "/css/site.css": len(files["css/site.css"]), "/img/logo.png": len(files["img/logo.png"]),
        "/notes%20and%20more.txt": len(files["notes and more.txt"]), "/manifest.json": len(files["manifest.json"])}
    assert {o.path: o.kind for o in page.objects}["/img/logo.png"] == "image"
    assert {o.path: o.kind for o in page.objects}["/notes%20and%20more.txt"] == "other"
    assert page.total_bytes == sum(len(v) for v in files.values())
    assert page.required_bytes == len(files["index.html"])  # a folder may hold files no page uses
    site = tmp_path / "site"
    manifest = json.loads(page.materialize(site).read_text())
    assert manifest["name"] == f"dir:{tmp_path / 'mysite'}" and manifest["n_objects"] == 6
    assert manifest["directory"] == str((tmp_path / "mysite").resolve())
    assert {o["path"] for o in manifest["objects"]} == {o.path for o in page.objects}
    assert all(len(o["sha256"]) == 64 for o in manifest["objects"])
    index = json.loads((site / DIRECTORY_INDEX).read_text())
    docroot = site / index["docroot"]
    # The served copy: every visible file byte for byte, the user's manifest.json theirs.
    assert {str(p.relative_to(docroot)): p.read_bytes() for p in docroot.rglob("*") if p.is_file()} == files
    assert get_page(f"dir:{tmp_path / 'mysite'}@other.html").root.path == "/other.html"


def test_a_folder_page_is_refused_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(InputError, match=f"dir:{missing}: {missing}: no such folder"):
        get_page(f"dir:{missing}")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(InputError, match="a-file is not a folder"):
        get_page(f"dir:{tmp_path / 'a-file'}")
    (tmp_path / "empty" / ".git").mkdir(parents=True)
    (tmp_path / "empty" / ".git" / "HEAD").write_text("x")
    with pytest.raises(InputError, match=f"{tmp_path / 'empty'} holds no files to serve"):
        get_page(f"dir:{tmp_path / 'empty'}")
    write_folder(tmp_path / "site")
    (tmp_path / "site" / "index.html").unlink()
    with pytest.raises(InputError, match=rf"{tmp_path / 'site'} has no index index\.html \(give dir:"):
        get_page(f"dir:{tmp_path / 'site'}")
    with pytest.raises(InputError, match="has no index start.html"):
        get_page(f"dir:{tmp_path / 'site'}@start.html")
    with pytest.raises(InputError, match=r"the index css/site\.css is not an HTML file"):
        get_page(f"dir:{tmp_path / 'site'}@css/site.css")
    with pytest.raises(InputError, match=r"INDEX '\.\./x\.html' must be a file inside"):
        get_page(f"dir:{tmp_path / 'site'}@../x.html")
    with pytest.raises(InputError, match="give the folder to serve"):
        get_page("dir:")


def test_the_header_names_the_protocol_the_document_really_comes_over(tmp_path: Path) -> None:
    from test_replay_mahimahi import Exchange, write_recording

    plain = write_recording(tmp_path / "plain", [Exchange("http://shop.test/", body=b"<html></html>")])
    recorded = get_page(f"mahimahi:{plain}")
    assert document_protocol(recorded, "2") == "http/1.1"
    assert describe_protocol(recorded, "2").startswith("HTTP/1.1 over plain HTTP")
    tls = write_recording(tmp_path / "tls", [Exchange("https://shop.test/", body=b"<html></html>")])
    assert document_protocol(get_page(f"mahimahi:{tls}"), "2") == "h2"
    assert describe_protocol(get_page("set-01"), "2") == "HTTP/2 over TLS"
    assert describe_protocol(get_page("set-01"), "1.1") == "HTTP/1.1 over TLS"


def test_replay_refuses_what_a_loader_or_page_cannot_take(tmp_path: Path) -> None:
    from clawbed.replay.run import ReplayConfig

    trace = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
    base = {"trace": trace, "page": "set-01", "schemes": ["cubic"], "runs": 1}
    from clawbed.replay.loaders.h2 import MAX_HTTP1_CONNECTIONS

    ReplayConfig(**base, loader="h2", h1_connections_per_host=2).check()
    # The registry's bound is the h2 loader's own.
    ReplayConfig(**base, loader="h2", h1_connections_per_host=MAX_HTTP1_CONNECTIONS).check()
    with pytest.raises(InputError, match=f"must be 1..{MAX_HTTP1_CONNECTIONS}"):
        ReplayConfig(**base, loader="h2", h1_connections_per_host=MAX_HTTP1_CONNECTIONS + 1).check()
    with pytest.raises(InputError, match="--h1-connections-per-host 2: the browser loader cannot set it"):
        ReplayConfig(**base, h1_connections_per_host=2).check()
    with pytest.raises(InputError, match="--h1-connections-per-host: 0: must be 1..64"):
        ReplayConfig(**base, loader="h2", h1_connections_per_host=0).check()
    from test_replay_mahimahi import Exchange, write_recording

    folder = write_recording(tmp_path / "rec", [Exchange("https://a.test/")])
    with pytest.raises(InputError, match="--gzip: the page mahimahi:.* is a recorded site"):
        ReplayConfig(**{**base, "page": f"mahimahi:{folder}"}, gzip=True).check()


def test_a_suite_refuses_browser_connections_per_host_at_load_time(tmp_path: Path) -> None:
    import yaml

    from clawbed.orchestrator.spec import SpecError, load_spec

    def spec(loader: str) -> Path:
        path = tmp_path / f"{loader}.yaml"
        path.write_text(yaml.safe_dump({"suite": "t", "loader": loader, "matrix": {
            "traces": ["busy-cell"], "pages": ["set-01"], "schemes": ["cubic"],
            "conditions": [{"name": "two", "h1_connections_per_host": 2, "gzip": True}]}}))
        return path

    assert load_spec(spec("h2"))
    with pytest.raises(SpecError, match="condition two: h1_connections_per_host 2: the browser loader cannot set it"):
        load_spec(spec("browser"))
