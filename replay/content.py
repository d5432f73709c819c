"""Byte-exact file contents for a replayed page: valid HTML, CSS, JS, PNG/JPEG and WOFF.

Every builder takes the object's target size in bytes and returns exactly that many bytes,
so the bytes a loader fetches equal the page's stated sizes. Text files carry their
references (the page's real dependency structure) followed by filler text; binary files are
a small valid image or font padded inside the format (a private PNG chunk, JPEG comment
segments, the WOFF private-data block) so a browser decodes them without errors while the
transfer has the full size. Padding bytes are random (seeded), so no compression anywhere on
the path could shrink them.
"""

from __future__ import annotations

import functools
import io
import json
import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clawbed.errors import InputError

if TYPE_CHECKING:
    from clawbed.replay.pages import WebObject

#: Words for filler text (lower-case ASCII, so one character is one byte).
_WORDS = ("cell", "radio", "block", "frame", "queue", "window", "packet", "latency", "signal",
          "tower", "bearer", "grant", "carrier", "channel", "buffer", "mobile", "page", "load",
          "stream", "object", "server", "client", "rate", "delay", "quality", "resource")

#: PNG chunk for padding: lower-case first letter = ancillary (decoders skip it), lower-case
#: second = private, upper-case third = reserved bit clear, lower-case fourth = safe to copy.
_PNG_PAD_CHUNK = b"cbPd"
#: Largest JPEG COM segment payload, bytes (the 16-bit length field counts its own 2 bytes).
_JPEG_COM_MAX = 65533
#: Bytes a JPEG COM segment adds besides its payload: marker (2) and length (2).
_JPEG_COM_OVERHEAD = 4
#: Bytes a PNG chunk adds besides its payload: length (4), type (4), CRC (4).
_PNG_CHUNK_OVERHEAD = 12


@dataclass
class Hooks:
    """What one HTML document must contain so CSS-referenced resources are really fetched.

    A browser fetches a CSS background image or a web font only when an element of the
    document uses it, so each such resource gets a hook element in the document that
    (transitively) loads the stylesheet.
    """

    background_classes: list[str] = field(default_factory=list)
    font_classes: list[str] = field(default_factory=list)


def css_class(obj: WebObject) -> str:
    """The CSS class (and font family) name tied to an object, from its path."""
    stem = obj.path.rsplit("/", 1)[-1].split(".")[0]
    return f"cb-{obj.kind[0]}{stem}"


def _filler_text(rng: random.Random, n_bytes: int) -> str:
    """``n_bytes`` of space-separated words (cut at the end to the exact length)."""
    parts: list[str] = []
    length = 0
    while length < n_bytes:
        word = rng.choice(_WORDS)
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts)[:n_bytes].ljust(n_bytes)


def _exact(head: str, tail: str, size_bytes: int | None, filler: Callable[[int], str], what: str) -> bytes:
    """``head`` + filler + ``tail`` of exactly ``size_bytes`` bytes (ASCII); ``None``: no
    filler, i.e. the smallest file that still holds the references."""
    if size_bytes is None:
        size_bytes = len(head) + len(tail)
    room = size_bytes - len(head) - len(tail)
    if room < 0:
        raise InputError(f"{what}: size {size_bytes} bytes cannot hold its references "
                         f"(needs at least {len(head) + len(tail)})")
    out = (head + filler(room) + tail).encode("ascii")
    assert len(out) == size_bytes, (what, len(out), size_bytes)
    return out


def html_bytes(obj: WebObject, children: list[WebObject], hooks: Hooks, title: str,
               size_bytes: int | None, rng: random.Random) -> bytes:
    """An HTML document referencing ``children`` (stylesheets and fonts in the head, images and
    iframes in the body, scripts at the end of the body, parser-blocking as most pages do)."""
    head = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            f"<title>{title}</title>", '<link rel=icon href="data:,">']
    body = ["</head><body>"]
    scripts: list[str] = []
    for child in children:
        if child.kind == "css":
            head.append(f'<link rel="stylesheet" href="{child.path}">')
        elif child.kind == "font":
            # A font referenced by the document itself (a HAR's preloaded font): inline @font-face.
            cls = css_class(child)
            head.append(f'<style>@font-face{{font-family:{cls};src:url("{child.path}") format("woff")}}'
                        f".{cls}{{font-family:{cls},sans-serif}}</style>")
            body.append(f'<p class="{cls}">Aa</p>')
        elif child.kind == "image":
            body.append(f'<img src="{child.path}" alt="" width="16" height="16">')
        elif child.kind == "js":
            scripts.append(f'<script src="{child.path}"></script>')
        elif child.kind == "html":
            body.append(f'<iframe src="{child.path}" width="64" height="64"></iframe>')
    body += [f'<div class="{c}"></div>' for c in hooks.background_classes]
    body += [f'<p class="{c}">Aa</p>' for c in hooks.font_classes]
    body.append("<p>")
    tail = "</p>\n" + "\n".join(scripts) + "\n</body></html>\n"
    return _exact("\n".join(head) + "\n".join(body), tail, size_bytes,
                  lambda n: _filler_text(rng, n), f"HTML object {obj.path}")


def css_bytes(obj: WebObject, children: list[WebObject], size_bytes: int | None, rng: random.Random) -> bytes:
    """A stylesheet: ``@import`` for child stylesheets, ``@font-face`` for fonts, background
    images on hook classes, then filler rules."""
    imports = [f'@import url("{c.path}");' for c in children if c.kind == "css"]
    rules: list[str] = []
    for child in children:
        cls = css_class(child)
        if child.kind == "font":
            rules.append(f'@font-face{{font-family:{cls};src:url("{child.path}") format("woff")}}\n'
                         f".{cls}{{font-family:{cls},sans-serif}}")
        elif child.kind == "image":
            rules.append(f'.{cls}{{width:16px;height:16px;background-image:url("{child.path}")}}')
    head = "\n".join(imports + rules) + "\n"

    def filler(n: int) -> str:
        # Rules on classes no element has: parsed, never matched. Spaces make up the rest.
        lines: list[str] = []
        length = 0
        while True:
            line = f".cb-unused-{rng.randrange(10**6)} {{ margin: {rng.randrange(40)}px; color: #{rng.randrange(16**6):06x}; }}\n"
            if length + len(line) > n:
                break
            lines.append(line)
            length += len(line)
        return "".join(lines) + " " * (n - length)

    return _exact(head, "", size_bytes, filler, f"CSS object {obj.path}")


def js_bytes(obj: WebObject, children: list[WebObject], size_bytes: int | None, rng: random.Random) -> bytes:
    """A script that, when run, inserts its children into the document (scripts, images,
    stylesheets, fonts via a style element, iframes): dependencies the browser only discovers
    by executing it."""
    head = ""
    if children:
        deps = json.dumps([[c.kind, c.path, css_class(c)] for c in children], separators=(",", ":"))
        head = (
            "(function(){var d=" + deps + ";"
            "for(var i=0;i<d.length;i++){var k=d[i][0],u=d[i][1],c=d[i][2],e;"
            'if(k==="js"){e=document.createElement("script");e.src=u;document.head.appendChild(e);}'
            'else if(k==="css"){e=document.createElement("link");e.rel="stylesheet";e.href=u;document.head.appendChild(e);}'
            'else if(k==="font"){e=document.createElement("style");'
            'e.textContent="@font-face{font-family:"+c+";src:url(\\""+u+"\\") format(\\"woff\\")}";'
            'document.head.appendChild(e);e=document.createElement("p");e.style.fontFamily=c;e.textContent="Aa";document.body.appendChild(e);}'
            'else if(k==="html"){e=document.createElement("iframe");e.src=u;document.body.appendChild(e);}'
            'else{e=document.createElement("img");e.src=u;e.alt="";document.body.appendChild(e);}}})();\n'
        )

    def filler(n: int) -> str:
        # A string constant the engine parses but never uses (lines of words in a comment
        # would do too; a literal keeps the file looking like bundled code).
        if n < len('var cbPad="";\n'):
            return " " * n
        text = _filler_text(rng, n - len('var cbPad="";\n'))
        return f'var cbPad="{text}";\n'

    return _exact(head, "", size_bytes, filler, f"JS object {obj.path}")


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@functools.lru_cache(maxsize=64)
def _base_image(fmt: str, color: tuple[int, int, int]) -> bytes:
    """A 16×16 image of one colour with a gradient, as PNG or JPEG bytes."""
    from PIL import Image  # Pillow: imported here so pure page generation does not need it

    im = Image.new("RGB", (16, 16), color)
    for x in range(16):
        for y in range(16):
            im.putpixel((x, y), ((color[0] + 8 * x) % 256, (color[1] + 8 * y) % 256, color[2]))
    out = io.BytesIO()
    im.save(out, fmt, **({"quality": 60} if fmt == "JPEG" else {}))
    return out.getvalue()


def _color(rng: random.Random) -> tuple[int, int, int]:
    return (rng.randrange(256), rng.randrange(256), rng.randrange(256))


#: The base image's size varies a little with its colour (JPEG 16×16: 647–697 bytes over
#: 300 colours; PNG: 86–87); minimum sizes allow this much above the black one, bytes.
_BASE_SLACK_BYTES = 64


def image_min_bytes(path: str) -> int:
    """The smallest size an image at ``path`` (``.png`` or ``.jpg``) can always be padded to."""
    if path.endswith(".png"):
        return len(_base_image("PNG", (0, 0, 0))) + _BASE_SLACK_BYTES + _PNG_CHUNK_OVERHEAD
    return len(_base_image("JPEG", (0, 0, 0))) + _BASE_SLACK_BYTES + _JPEG_COM_OVERHEAD


def image_bytes(obj: WebObject, size_bytes: int, rng: random.Random) -> bytes:
    """A valid PNG (padded with one private ancillary chunk before IEND) or baseline JPEG
    (padded with COM segments after the JFIF header) of exactly ``size_bytes``."""
    if obj.path.endswith(".png"):
        base = _base_image("PNG", _color(rng))
        pad = size_bytes - len(base) - _PNG_CHUNK_OVERHEAD
        if pad < 0:
            raise InputError(f"image {obj.path}: {size_bytes} bytes is below the smallest PNG "
                             f"({len(base) + _PNG_CHUNK_OVERHEAD} bytes)")
        iend = base.rindex(b"IEND") - 4  # the IEND chunk's length field
        out = base[:iend] + _png_chunk(_PNG_PAD_CHUNK, rng.randbytes(pad)) + base[iend:]
    elif obj.path.endswith(".jpg"):
        base = _base_image("JPEG", _color(rng))
        # Insert after SOI + the APP0 (JFIF) segment, which must come first.
        app0_end = 4 + struct.unpack(">H", base[4:6])[0]
        pad = size_bytes - len(base)
        if pad < _JPEG_COM_OVERHEAD:
            raise InputError(f"image {obj.path}: {size_bytes} bytes is below the smallest JPEG "
                             f"({len(base) + _JPEG_COM_OVERHEAD} bytes)")
        # n segments, each 4 bytes of overhead and 0..65533 payload, summing to pad exactly.
        n = -(-pad // (_JPEG_COM_MAX + _JPEG_COM_OVERHEAD))
        payload = pad - n * _JPEG_COM_OVERHEAD
        segments = []
        for _ in range(n):
            size = min(_JPEG_COM_MAX, payload)
            payload -= size
            segments.append(b"\xff\xfe" + struct.pack(">H", size + 2) + rng.randbytes(size))
        out = base[:app0_end] + b"".join(segments) + base[app0_end:]
    else:
        raise InputError(f"image {obj.path}: the path must end in .png or .jpg")
    assert len(out) == size_bytes, (obj.path, len(out), size_bytes)
    return out


@functools.lru_cache(maxsize=1)
def _base_font() -> object:
    """A minimal valid TrueType font (glyphs .notdef and 'A', both a box) with fixed
    timestamps, so the bytes are the same on every run."""
    from fontTools.fontBuilder import FontBuilder  # fontTools: only needed when writing fonts
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    def box() -> object:
        pen = TTGlyphPen(None)
        pen.moveTo((100, 0))
        pen.lineTo((100, 700))
        pen.lineTo((500, 700))
        pen.lineTo((500, 0))
        pen.closePath()
        return pen.glyph()

    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder([".notdef", "A"])
    fb.setupCharacterMap({ord("A"): "A"})
    fb.setupGlyf({".notdef": box(), "A": box()})
    fb.setupHorizontalMetrics({".notdef": (600, 100), "A": (600, 100)})
    fb.setupHorizontalHeader(ascent=800, descent=-200)
    fb.setupNameTable({"familyName": "clawbed", "styleName": "Regular"})
    fb.setupOS2(sTypoAscender=800, usWinAscent=800, usWinDescent=200)
    fb.setupPost()
    fb.font["head"].created = fb.font["head"].modified = 0
    fb.font.recalcTimestamp = False
    fb.font.flavor = "woff"
    return fb.font


def _woff(private: bytes) -> bytes:
    from fontTools.ttLib.sfnt import WOFFFlavorData

    font = _base_font()
    data = WOFFFlavorData()
    data.privData = private or None
    # fontTools' TTFont has these (set in __init__/defined late); its stubs do not say so.
    font.flavorData = data  # type: ignore[attr-defined]
    out = io.BytesIO()
    font.save(out)  # type: ignore[attr-defined]
    return out.getvalue()


def font_min_bytes() -> int:
    """The smallest size a font can be padded to: the bare WOFF, 4-byte aligned, plus one byte."""
    return -(-len(_woff(b"")) // 4) * 4 + 1


def font_bytes(obj: WebObject, size_bytes: int, rng: random.Random) -> bytes:
    """A valid WOFF 1.0 font of exactly ``size_bytes``, padded in its private-data block
    (which starts 4-byte aligned after the font data and ends the file)."""
    bare = len(_woff(b""))
    if size_bytes == bare:
        return _woff(b"")
    if size_bytes < font_min_bytes():
        raise InputError(f"font {obj.path}: {size_bytes} bytes is below the smallest WOFF "
                         f"({font_min_bytes()} bytes)")
    out = _woff(rng.randbytes(size_bytes - (font_min_bytes() - 1)))
    assert len(out) == size_bytes, (obj.path, len(out), size_bytes)
    return out
