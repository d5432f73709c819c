"""A hand-driven diag feed: the messages of one subframe in the emulator's shapes and order,
and a small JSON-lines TCP server that plays them. For tests and demos of the client
without the emulator; the field names are those of ``emulator/cell/src/diag.rs``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from clawbed import lte


@dataclass
class FakeSubframe:
    """One subframe's conditions: diag time ``t_ms`` (SFN = t // 10 mod 1024), the total
    allocation A_k (RSRQ by Eq. 6, noise-free), the UE's own RBs and MCS, and cumulative
    loss counters."""

    t_ms: int
    total_alloc_rbs: int
    own_rbs: int = 0
    mcs: int = 15
    layers: int = 1
    n_rb: int = 50
    n_antennas: int = 2
    measure: bool = True
    rlc_dropped: int = 0
    overflow: int = 0
    unix_s: float | None = None
    rsrp_dbm: float = -90.0
    rsrq_db: float | None = None

    def messages(self, *, with_stats: bool = True) -> list[dict[str, Any]]:
        sfn, sf = (self.t_ms // 10) % lte.SFN_CYCLE, self.t_ms % 10
        ts = self.unix_s if self.unix_s is not None else 1.7e9 + self.t_ms / 1000.0
        tbs = [] if self.own_rbs == 0 else [{
            "HARQ ID": self.t_ms % 8, "RV": 0, "NDI": 1, "CRC Result": "Pass", "RNTI Type": "C-RNTI",
            "TB Index": 0, "TB Size": lte.tbs_bits(self.mcs, self.own_rbs, self.layers) // 8, "MCS": self.mcs,
            "Num RBs": self.own_rbs, "Modulation Type": "16QAM"}]
        out: list[dict[str, Any]] = [{
            "type_id": "LTE_PHY_PDSCH_Stat_Indication", "timestamp": ts,
            "Records": [{"Subframe Num": sf, "Frame Num": sfn, "Num RBs": self.own_rbs, "Num Layers": self.layers,
                         "Serving Cell Index": "PCell", "Transport Blocks": tbs}]}]
        if self.measure:
            rsrq_db = self.rsrq_db
            if rsrq_db is None:
                rsrq_db = float(lte.linear_to_db(lte.rsrq_linear(self.total_alloc_rbs / self.n_rb, self.n_antennas)))
            rssi = 10 * math.log10(self.n_rb) + self.rsrp_dbm - rsrq_db  # Eq. 1
            out.append({"type_id": "LTE_PHY_Serv_Cell_Measurement", "timestamp": ts,
                        "Subpackets": [{"Current SFN": sfn, "Current Subframe Number": sf, "RSRP": self.rsrp_dbm,
                                        "RSRQ": rsrq_db, "RSSI": rssi, "FTL SNR Rx[0]": self.mcs - 6.0}]})
        out.append({"type_id": "LTE_MAC_DL_Transport_Block", "timestamp": ts,
                    "Samples": [] if self.own_rbs == 0 else [{"SFN": sfn, "Sub-FN": sf, "HARQ ID": self.t_ms % 8,
                                                              "DL TBS (bytes)": tbs[0]["TB Size"], "RLC PDUs": 1,
                                                              "Padding (bytes)": 0}]})
        if with_stats:
            out.append({"type_id": "LTE_RLC_DL_Stats", "timestamp": ts, "Num RBs": 1,
                        "RB Stats": [{"Num Retx PDU": 0, "Num Dropped PDU": self.rlc_dropped,
                                      "RLC PDCP Q Full Count": self.overflow, "Num Complete NACK": 0,
                                      "Num Segments NACK": 0}]})
            out.append({"type_id": "LTE_PDCP_DL_Stats", "timestamp": ts, "Num Offload Q Full Count": self.overflow,
                        "Num PDU Dups": 0, "Num PDU Out of Win": 0})
        return out


def messages_of(subframes: Iterable[FakeSubframe]) -> list[dict[str, Any]]:
    """Every message of ``subframes``, in feed order."""
    return [m for sf in subframes for m in sf.messages()]


class FakeFeedServer:
    """Serves ``messages`` as JSON lines to the first client that connects to
    127.0.0.1:``port`` (0: any free port), ``per_batch`` messages at a time with ``pause_s``
    between batches, then closes the connection; later clients are closed at once (a feed
    that ended). Use with ``async with``; :attr:`port` is the bound port."""

    def __init__(self, messages: list[dict[str, Any]], *, port: int = 0, per_batch: int = 50,
                 pause_s: float = 0.0) -> None:
        self.lines = [(json.dumps(m) + "\n").encode() for m in messages]
        self.port = port
        self.per_batch = per_batch
        self.pause_s = pause_s
        self.clients = 0
        self._server: asyncio.base_events.Server | None = None
        self.done = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients += 1
        if self.clients > 1:
            writer.close()  # the feed was played once; later readers get nothing (a stopped feed)
            return
        try:
            for i in range(0, len(self.lines), self.per_batch):
                writer.write(b"".join(self.lines[i:i + self.per_batch]))
                await writer.drain()
                await asyncio.sleep(self.pause_s)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self.done.set()

    async def __aenter__(self) -> FakeFeedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
