"""The Python layouts of CLAW's BPF map keys and values: round trips, byte order, and the
same offsets as the C structs in the built objects' BTF."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import socket
import subprocess

import pytest

from clawbed.claw import bpfobjects
from clawbed.claw.server.maps import LAYOUTS, AckFlags, FlowKey, FlowStats, Mode, Peer, addr_key


def test_peer_round_trip_and_size() -> None:
    p = Peer(updated_ns=123456789012, stale_after_ns=300_000_000, w_claw_bytes=1 << 20, mode=Mode.SATURATED,
             seq=0xFFFFFFFF, window_ms=87)
    raw = p.pack()
    assert len(raw) == 32
    assert Peer.unpack(raw) == p


def test_flow_key_keeps_addresses_and_ports_in_network_order() -> None:
    k = FlowKey("10.65.0.1", "10.64.0.1", 40000, 443)
    raw = k.pack()
    assert raw[:4] == socket.inet_aton("10.65.0.1")
    assert raw[4:8] == socket.inet_aton("10.64.0.1")
    assert raw[8:10] == (40000).to_bytes(2, "big") and raw[10:12] == (443).to_bytes(2, "big")
    assert FlowKey.unpack(raw) == k
    assert addr_key("10.65.0.1") == raw[:4]


def test_flow_stats_and_ack_flags_round_trip() -> None:
    names = [f.name for f in dataclasses.fields(FlowStats)]
    st = FlowStats(*range(1, len(names) + 1))
    assert FlowStats.unpack(st.pack()) == st
    assert st.cwnd_limited == bool(st.flags & 1)
    af = AckFlags(1, 2, 3, 4, 5, 6)
    assert AckFlags.unpack(af.pack()) == af


def _offsets(fmt: str) -> list[tuple[int, int]]:
    """(offset, size) of each item of a ``struct`` format with no padding ("=")."""
    assert fmt[0] == "="
    out, offset = [], 0
    for count, code in re.findall(r"(\d*)([a-zA-Z])", fmt[1:]):
        n = int(count or 1)
        if code == "s":
            out.append((offset, n))
            offset += n
            continue
        size = {"B": 1, "H": 2, "I": 4, "Q": 8}[code]
        for _ in range(n):
            out.append((offset, size))
            offset += size
    return out


@pytest.mark.skipif(not (shutil.which("clang") and shutil.which("bpftool")), reason="needs clang and bpftool")
@pytest.mark.parametrize("obj", ["claw_cc.bpf.o", "ack_flags_ingress.bpf.o"])
def test_layouts_match_the_c_structs_in_the_objects_btf(obj: str) -> None:
    build = subprocess.run(bpfobjects.build_command(), capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    dump = subprocess.run(["bpftool", "btf", "dump", "file", str(bpfobjects.objects_dir() / obj), "-j"],
                          capture_output=True, text=True, check=True)
    types = {t["name"]: t for t in json.loads(dump.stdout)["types"] if t.get("kind") == "STRUCT" and t.get("name")}
    checked = 0
    for c_name, cls in LAYOUTS.items():
        if c_name not in types:
            continue  # this object does not use the struct
        c = types[c_name]
        py_fields = [f.name for f in dataclasses.fields(cls)]
        c_members = [m["name"] for m in c["members"]]
        assert py_fields == c_members, f"{c_name}: member names or order differ"
        offsets = _offsets(cls.FORMAT.format)
        assert [o for o, _ in offsets] == [m["bits_offset"] // 8 for m in c["members"]], f"{c_name}: offsets differ"
        assert cls.FORMAT.size == c["size"], f"{c_name}: size differs"
        checked += 1
    assert checked >= (3 if obj == "claw_cc.bpf.o" else 2)
