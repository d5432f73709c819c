"""Readers of the synthetic diag feed: live (TCP inside the UE namespace) and from its file.

Each message is one JSON line shaped like a MobileInsight decoded message: ``type_id`` (the
message name, e.g. ``LTE_PHY_PDSCH_Stat_Indication``), ``timestamp`` (Unix time of the
subframe, s) and the message's fields with MobileInsight's names (see
``docs/diag-feed.md`` and the emulator's ``DIAG_FEED.md``). The readers yield each
line as the dict it encodes, unchanged, so code written against MobileInsight's
``event.data.decode()`` runs on them.

The feed listens on 127.0.0.1 *inside* the UE's namespace, so the live reader opens its
socket there (:func:`clawbed.netns.socket_in_namespace`) and this process stays where it is.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.errors import ClawbedError
from clawbed.lte import SFN_CYCLE
from clawbed.netns import socket_in_namespace

#: Longest line accepted, bytes (a message is well under 2 KB; this only bounds a broken feed).
MAX_LINE_BYTES = 1 << 20
#: Bytes asked for per read of the live feed (a few subframes' lines of a busy UE).
READ_BYTES = 1 << 16
#: Message names (``type_id``) of the feed.
PDSCH_STAT = "LTE_PHY_PDSCH_Stat_Indication"
SERV_CELL_MEASUREMENT = "LTE_PHY_Serv_Cell_Measurement"
MAC_DL_TRANSPORT_BLOCK = "LTE_MAC_DL_Transport_Block"
RLC_DL_STATS = "LTE_RLC_DL_Stats"
PDCP_DL_STATS = "LTE_PDCP_DL_Stats"


class DiagFeedError(ClawbedError):
    """The feed could not be reached or sent something that is not a message; says which feed."""


def diag_file(output_dir: Path | str, ue: int) -> Path:
    """Where the emulator writes UE ``ue``'s feed: ``<output dir>/diag-ue<N>.jsonl``."""
    return Path(output_dir) / f"diag-ue{ue}.jsonl"


async def _connect(ns_name: str, port: int, connect_timeout_s: float) -> socket.socket:
    """A socket connected to 127.0.0.1:``port`` in ``ns_name``, retrying while it is refused
    (the feed is not listening yet) for up to ``connect_timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + connect_timeout_s
    while True:
        sock = socket_in_namespace(ns_name, socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, ("127.0.0.1", port))
            return sock
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() >= deadline:
                raise DiagFeedError(
                    f"diag feed 127.0.0.1:{port} in namespace {ns_name}: connection refused for "
                    f"{connect_timeout_s} s (is the emulator running, with that port?)") from None
            await asyncio.sleep(0.05)
        except OSError as e:
            sock.close()
            raise DiagFeedError(f"diag feed 127.0.0.1:{port} in namespace {ns_name}: "
                                f"{e.strerror or errno.errorcode.get(e.errno or 0, e)}") from e


def _decode(line: bytes, where: str) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError as e:
        raise DiagFeedError(f"{where}: not a JSON line ({e}): {line[:120]!r}") from e
    if not isinstance(message, dict) or "type_id" not in message:
        raise DiagFeedError(f"{where}: a line without type_id: {line[:120]!r}")
    return message


async def subscribe(ns_name: str, port: int, *, connect_timeout_s: float = 5.0) -> AsyncIterator[dict[str, Any]]:
    """Yield every message of the diag feed at 127.0.0.1:``port`` in namespace ``ns_name``.

    The feed starts at the subframe the subscription begins (earlier messages are in the
    file). Ends when the emulator closes the connection (it stopped, or this reader fell
    more than the feed's buffer behind and was disconnected).
    """
    sock = await _connect(ns_name, port, connect_timeout_s)
    reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_LINE_BYTES)
    where = f"diag feed 127.0.0.1:{port} in namespace {ns_name}"
    # Whatever has arrived is read at once and split here: a subframe brings about five
    # lines, and a readline per line cost a client more CPU than decoding them (a 45-UE
    # cell runs 44 clients).
    partial = b""
    try:
        while True:
            try:
                chunk = await reader.read(READ_BYTES)
            except ConnectionResetError:
                return
            if not chunk:
                return  # closed; a line cut short (the emulator stopped mid-line) is dropped
            *lines, partial = (partial + chunk).split(b"\n")
            if len(partial) > MAX_LINE_BYTES:
                raise DiagFeedError(f"{where}: a line longer than {MAX_LINE_BYTES} bytes: {partial[:120]!r}")
            for line in lines:
                yield _decode(line, where)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


def read_diag_file(path: Path | str) -> Iterator[dict[str, Any]]:
    """Yield every message of a ``diag-ue<N>.jsonl`` file; a last line cut short by an
    interrupted run is skipped, any other bad line raises naming the file and line."""
    path = Path(path)
    try:
        f = path.open("rb")
    except OSError as e:
        raise DiagFeedError(f"reading {path}: {e.strerror}") from e
    with f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return
            yield _decode(line, f"{path}:{number}")


def of_type(messages: Iterable[dict[str, Any]], type_id: str) -> Iterator[dict[str, Any]]:
    """The messages named ``type_id``."""
    return (m for m in messages if m["type_id"] == type_id)


def sfn_subframe(message: dict[str, Any]) -> tuple[int, int]:
    """(SFN, subframe number) of a PDSCH statistics or serving-cell measurement message."""
    if message["type_id"] == PDSCH_STAT:
        record = message["Records"][0]
        return int(record["Frame Num"]), int(record["Subframe Num"])
    if message["type_id"] == SERV_CELL_MEASUREMENT:
        sub = message["Subpackets"][0]
        return int(sub["Current SFN"]), int(sub["Current Subframe Number"])
    raise ValueError(f"{message['type_id']} carries no SFN and subframe number")


def subframe_times_ms(messages: Iterable[dict[str, Any]], start_sfn: int = 0) -> np.ndarray:
    """Emulated time (ms since the run's start) of each message, from its SFN and subframe
    unwrapped across the 10240 ms SFN cycle; ``messages`` in feed order, of the types
    :func:`sfn_subframe` reads, ``start_sfn`` the trace's (SFN of time 0)."""
    cycle_ms = SFN_CYCLE * 10
    raw = np.array([10 * sfn + sf for sfn, sf in map(sfn_subframe, messages)], dtype=np.int64)
    raw = (raw - 10 * start_sfn) % cycle_ms
    # Each step back in the raw series is one more cycle.
    wraps = np.concatenate([[0], np.cumsum(np.diff(raw) < 0)])
    return raw + wraps * cycle_ms
