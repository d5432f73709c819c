"""The live diag feed reader (``emulator.diag.subscribe``) against a local TCP server that
sends lines in awkward pieces: lines split across reads, several per read, a last line cut
short, a line beyond the limit. The namespace is stood in for by a socket on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from clawbed.emulator import diag
from clawbed.emulator.diag import DiagFeedError, subscribe


def _line(i: int) -> bytes:
    return json.dumps({"type_id": "LTE_MAC_DL_Transport_Block", "timestamp": 1.0 + i, "i": i}).encode() + b"\n"


async def _read_all(pieces: list[bytes], monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)  # each piece its own read
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def connect(ns_name: str, port_: int, timeout_s: float) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        return sock

    monkeypatch.setattr(diag, "_connect", connect)
    try:
        return [m async for m in subscribe("unused", port)]
    finally:
        server.close()
        await server.wait_closed()


def test_lines_are_reassembled_across_reads_and_a_cut_last_line_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = b"".join(_line(i) for i in range(5))
    # Split inside the 2nd line, then several lines at once, then half of a 6th line.
    pieces = [stream[:70], stream[70:], _line(5)[:20]]
    got = asyncio.run(_read_all(pieces, monkeypatch))
    assert [m["i"] for m in got] == [0, 1, 2, 3, 4]


def test_a_line_beyond_the_limit_is_an_error_naming_the_feed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diag, "MAX_LINE_BYTES", 1000)
    with pytest.raises(DiagFeedError, match="diag feed 127.0.0.1:.* a line longer than 1000 bytes"):
        asyncio.run(_read_all([_line(0), b"x" * 3000], monkeypatch))


def test_a_line_that_is_not_json_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DiagFeedError, match="not a JSON line"):
        asyncio.run(_read_all([_line(0), b"{oops\n"], monkeypatch))
