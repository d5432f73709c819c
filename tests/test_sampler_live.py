"""The TCP sampler on real sockets in a namespace: a load's samples leave out the flows an
earlier load left behind (a closing socket would otherwise show its scheme's CC in this one)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from clawbed.netns import Resources, new_run_id, socket_in_namespace
from clawbed.replay.sampler import TcpSampler

PORT = 47013


def _connect(ns: str, listener: socket.socket) -> tuple[socket.socket, socket.socket, str]:
    """A client socket connected to ``listener``, the server's end, and the flow's name as the
    sampler writes it (the client's address and port)."""
    client = socket_in_namespace(ns)
    client.connect(("127.0.0.1", PORT))
    server, _ = listener.accept()
    address, port = client.getsockname()
    return client, server, f"{address}:{port}"


@pytest.mark.root
def test_the_flows_present_at_the_start_are_left_out(tmp_path: Path) -> None:
    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        ns = res.namespace("s").name
        listener = socket_in_namespace(ns)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", PORT))
        listener.listen()
        sockets = []
        try:
            # An earlier load's flow, closing: the client end has sent its FIN.
            old_client, old_server, old_flow = _connect(ns, listener)
            old_client.shutdown(socket.SHUT_WR)
            sockets += [old_client, old_server]
            sampler = TcpSampler(ns, PORT, period_s=0.005).open()
            try:
                sampler.reset()
                sampler.start(leave_out_present=True)
                new_client, new_server, new_flow = _connect(ns, listener)
                sockets += [new_client, new_server]
                new_server.sendall(b"x" * 10_000)
                time.sleep(0.1)
                sampler.stop()
                flows = {row["flow"] for row in sampler.rows}
                assert flows == {new_flow}, (flows, old_flow)
                # Without it (kept connections are the load's own), both are sampled.
                sampler.reset()
                sampler.start()
                time.sleep(0.05)
                sampler.stop()
                assert {row["flow"] for row in sampler.rows} == {old_flow, new_flow}
                assert sampler.errors == 0
            finally:
                sampler.close()
        finally:
            for s in (*sockets, listener):
                s.close()
