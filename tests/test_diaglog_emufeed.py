"""The emulator's feed in the phone's format, without the emulator: the JSON → log packet
mapping (``traces/diaglog/emufeed.py``), the encoders of 0xB193 / 0xB087 / 0xB0A4, the
incremental stream decoder, and the CLAW client reading either feed (``--feed mi2log``).
The emulator's own bytes are checked against these in ``test_diag_mi2log.py`` (root)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from clawbed.claw.client.core import ClientConfig
from clawbed.claw.client.daemon import DaemonConfig, _parser, config_from_args, feed_messages
from clawbed.claw.client.feed import FeedDecoder, LossKind, mi2log_messages
from clawbed.claw.client.offline import replay
from clawbed.traces.diaglog import read_log
from clawbed.traces.diaglog.emufeed import Mi2logStream, encode_feed_message, feed_to_mobileinsight, write_feed_mi2log
from clawbed.traces.diaglog.encode import quantise
from clawbed.traces.diaglog.log import decode_bytes

T0 = 1_795_301_447.0


def _pdsch(t_ms: int, rbs: int, mcs: int = 20, *, crc: bool = True, rv: int = 0, size: int = 2292) -> dict[str, Any]:
    tbs = [] if rbs == 0 else [{"HARQ ID": t_ms % 8, "RV": rv, "NDI": 1, "CRC Result": "Pass" if crc else "Fail",
                                "RNTI Type": "C-RNTI", "TB Index": 0, "TB Size": size, "MCS": mcs, "Num RBs": rbs,
                                "Modulation Type": "64QAM" if mcs >= 17 else "16QAM" if mcs >= 10 else "QPSK"}]
    return {"type_id": "LTE_PHY_PDSCH_Stat_Indication", "timestamp": T0 + t_ms / 1000,
            "Records": [{"Subframe Num": t_ms % 10, "Frame Num": t_ms // 10 % 1024, "Num RBs": rbs, "Num Layers": 1,
                         "Serving Cell Index": "PCell", "Transport Blocks": tbs}]}


def _meas(t_ms: int, rsrq: float, mcs: int | None = 20) -> dict[str, Any]:
    return {"type_id": "LTE_PHY_Serv_Cell_Measurement", "timestamp": T0 + t_ms / 1000,
            "Subpackets": [{"Current SFN": t_ms // 10 % 1024, "Current Subframe Number": t_ms % 10, "RSRP": -90.0,
                            "RSRQ": rsrq, "RSSI": -90.0 + 10 * 1.6989700043360187 + 0.0 - rsrq,
                            "FTL SNR Rx[0]": None if mcs is None else mcs - 6.0}], "channel_mcs": mcs}


def _mac(t_ms: int, size: int | None) -> dict[str, Any]:
    samples = [] if size is None else [{"SFN": t_ms // 10 % 1024, "Sub-FN": t_ms % 10, "HARQ ID": t_ms % 8,
                                        "DL TBS (bytes)": size, "RLC PDUs": 1, "Padding (bytes)": 0}]
    return {"type_id": "LTE_MAC_DL_Transport_Block", "timestamp": T0 + t_ms / 1000, "Samples": samples}


def _rlc(t_ms: int, dropped: int, q_full: int) -> dict[str, Any]:
    return {"type_id": "LTE_RLC_DL_Stats", "timestamp": T0 + t_ms / 1000, "Num RBs": 1,
            "RB Stats": [{"Num Retx PDU": 2, "Num Dropped PDU": dropped, "RLC PDCP Q Full Count": q_full,
                          "Num Complete NACK": 2, "Num Segments NACK": 0}]}


def _pdcp(t_ms: int, q_full: int) -> dict[str, Any]:
    return {"type_id": "LTE_PDCP_DL_Stats", "timestamp": T0 + t_ms / 1000, "Num Offload Q Full Count": q_full,
            "Num PDU Dups": 0, "Num PDU Out of Win": 0}


def synthetic_feed(ms: int = 3000, seed: int = 1) -> list[dict[str, Any]]:
    """A JSON feed as the emulator writes it: busy and idle stretches, failures and
    retransmissions, RSRQ moving, an overflow and an RLC loss."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    dropped = q_full = 0
    for t in range(ms):
        busy = (t // 200) % 3 != 2
        rbs = rng.choice([0, 5, 12, 25, 50]) if busy else 0
        mcs = 10 + (t // 100) % 15
        out.append(_pdsch(t, rbs, mcs, crc=rng.random() > 0.1, rv=rng.choice([0, 0, 0, 2]), size=100 + rbs * 40))
        out.append(_meas(t, -30.0 + round(rng.uniform(8, 20) * 16) / 16, mcs))
        out.append(_mac(t, 100 + rbs * 40 if rbs else None))
        if t in (1200, 2500):
            dropped += 1
        if t == 1700:
            q_full += 3
        out.append(_rlc(t, dropped, q_full))
        out.append(_pdcp(t, q_full))
    return out


def test_every_message_decodes_back_to_its_fields() -> None:
    feed = synthetic_feed(300)
    buf = io.BytesIO()
    assert write_feed_mi2log(feed, buf) == len(feed)
    log = decode_bytes(buf.getvalue())
    assert log.defects == [] and len(log.packets) == len(feed)
    assert log.stats.decoded == {"0xB173 v24": 300, "0xB193 v1/22": 300, "0xB063 v1/4": 300,
                                 "0xB087 v1/3": 300, "0xB0A4 v1/2": 300}
    for p, m in zip(log.packets, feed):
        got = p.message
        assert got["type_id"] == m["type_id"] and abs(got["timestamp"] - m["timestamp"]) < 1e-6
        if m["type_id"] == "LTE_PHY_PDSCH_Stat_Indication":
            r, g = m["Records"][0], got["Records"][0]
            assert (g["Frame Num"], g["Subframe Num"], g["Num RBs"]) == (r["Frame Num"], r["Subframe Num"], r["Num RBs"])
            for tb, gt in zip(r["Transport Blocks"], g["Transport Blocks"], strict=True):
                assert gt["TB Size"] == tb["TB Size"] + 3  # the CRC, as real logs count it
                assert gt["Did Recombining"] == ("Yes" if tb["RV"] else "No")
                assert {k: gt[k] for k in ("HARQ ID", "RV", "NDI", "CRC Result", "MCS", "Num RBs", "Modulation Type")} \
                    == {k: tb[k] for k in ("HARQ ID", "RV", "NDI", "CRC Result", "MCS", "Num RBs", "Modulation Type")}
        elif m["type_id"] == "LTE_PHY_Serv_Cell_Measurement":
            s, g = m["Subpackets"][0], got["Subpackets"][0]
            assert g["SubPacket Version"] == 22 and g["SubPacket Size"] == 492
            assert g["RSRQ"] == s["RSRQ"] and g["RSRP"] == s["RSRP"]
            assert abs(g["RSSI"] - s["RSSI"]) <= 1 / 32 and g["FTL SNR Rx[0]"] == s["FTL SNR Rx[0]"]
        elif m["type_id"] == "LTE_MAC_DL_Transport_Block":
            samples = got["Subpackets"][0]["Samples"]
            assert [x["DL TBS (bytes)"] for x in samples] == [x["DL TBS (bytes)"] for x in m["Samples"]]
        elif m["type_id"] == "LTE_RLC_DL_Stats":
            sp = got["Subpackets"][0]
            assert sp["Subpacket Size"] == 276 and sp["RBs"][0]["Num Dropped PDU"] == m["RB Stats"][0]["Num Dropped PDU"]
        else:
            assert got["Subpackets"][0]["Subpacket Size"] == 184


def test_layouts_are_the_pixel_xl_logs() -> None:
    """The chosen versions are those a real phone (the 2018 Pixel XL) logs, sizes included."""
    from clawbed.paths import shared_dir
    try:
        path = shared_dir() / "data" / "real-logs" / "hackathon2018_PixelXL_2018-08-25.mi2log"
    except Exception as e:  # noqa: BLE001 - any reason the folder is absent
        pytest.skip(f"shared data folder absent ({e})")
    if not path.is_file():
        pytest.skip(f"{path} absent")
    real = read_log(path)
    assert {"0xB173 v24", "0xB193 v1/22", "0xB063 v1/4", "0xB087 v1/3", "0xB0A4 v1/2"} <= set(real.stats.decoded)
    sizes = {(p.log_code, p.message["Subpackets"][0].get("SubPacket Size", p.message["Subpackets"][0].get("Subpacket Size")))
             for p in real.packets if p.log_code in (0xB193, 0xB087, 0xB0A4)}
    assert {(0xB193, 492), (0xB087, 276), (0xB0A4, 184)} <= sizes


def test_quantise_rounds_and_clamps_as_the_rust_writer() -> None:
    assert quantise(-11.5625, "rsrq", 10) == 295
    assert quantise(-34.0, "rsrq", 10) == 0 and quantise(100.0, "rsrq", 10) == 1023
    assert quantise(None, "snr", 9) == 0 and quantise(float("nan"), "snr", 9) == 0
    assert quantise(14.0, "snr", 9) == 340 and quantise(-6.0, "snr", 9) == 140


def test_out_of_range_values_are_capped_not_refused() -> None:
    big = _pdsch(0, 100, 28, size=70_000)
    tb = decode_bytes(encode_feed_message(big)).packets[0].message["Records"][0]["Transport Blocks"][0]
    assert tb["TB Size"] == 0xFFFF
    rlc = decode_bytes(encode_feed_message(_rlc(0, 2**32 + 5, 0))).packets[0].message
    assert rlc["Subpackets"][0]["RBs"][0]["Num Dropped PDU"] == 5  # a 32-bit counter wraps
    with pytest.raises(ValueError, match="not a message of the emulator"):
        feed_to_mobileinsight({"type_id": "LTE_RRC_OTA_Packet", "timestamp": T0})


def test_stream_decoder_takes_any_chunking_and_names_damage() -> None:
    feed = synthetic_feed(200)
    data = b"".join(encode_feed_message(m) for m in feed)
    rng = random.Random(3)
    stream = Mi2logStream()
    got: list[dict[str, Any]] = []
    i = 0
    while i < len(data):
        n = rng.choice([1, 2, 7, 100, 4096])
        got += stream.feed(data[i:i + n])
        i += n
    assert [m["type_id"] for m in got] == [m["type_id"] for m in feed] and stream.defects == []
    # A damaged byte costs that frame only, named with its offset in the stream.
    bad = bytearray(data)
    bad[5000] ^= 0x01
    stream = Mi2logStream()
    got = stream.feed(bytes(bad[:6000])) + stream.feed(bytes(bad[6000:]))
    assert len(got) == len(feed) - 1
    assert len(stream.defects) == 1 and stream.defects[0].kind == "bad_crc" and stream.defects[0].offset <= 5000


def test_client_estimates_are_the_same_from_either_feed() -> None:
    feed = synthetic_feed()
    from_bytes = mi2log_messages(b"".join(encode_feed_message(m) for m in feed))
    config = ClientConfig(ue_id=1, feedback_period_ms=10)
    a, b = replay(feed, config, window_ms=50), replay(from_bytes, config, window_ms=50)
    assert len(a) == len(b) > 2900
    events = 0
    for x, y in zip(a, b):
        dx, dy = dataclasses.asdict(x), dataclasses.asdict(y)
        for d in (dx, dy):
            d.pop("unix_s")
            for e in d["events"]:
                e.pop("unix_s")
        assert dx == dy
        events += len(x.events)
    assert events == 3  # two RLC losses and one overflow (of 3 packets)


def test_decoder_reads_mobileinsight_shapes_as_the_json_ones() -> None:
    json_dec, mi_dec = FeedDecoder(), FeedDecoder()
    for t, (dropped, q) in enumerate([(0, 0), (1, 0), (1, 4)]):
        for m in (_rlc(t, dropped, q), _pdcp(t, q)):
            a = json_dec.loss_events(m)
            b = mi_dec.loss_events(decode_bytes(encode_feed_message(m)).packets[0].message)
            assert [(e.kind, e.count) for e in a] == [(e.kind, e.count) for e in b]
    mac = decode_bytes(encode_feed_message(_mac(1234, 500))).packets[0].message
    assert FeedDecoder.subframe_of(mac) == (123, 4)
    # Open loop: no SNR → raw 0 (−20 dB, the floor) → no channel MCS, as JSON's null.
    meas = decode_bytes(encode_feed_message(_meas(5, -10.0, None))).packets[0].message
    assert meas["Subpackets"][0]["FTL SNR Rx[0]"] == -20.0
    assert FeedDecoder().measurements(meas)[0].channel_mcs is None
    assert FeedDecoder().measurements(_meas(5, -10.0, None))[0].channel_mcs is None
    assert LossKind.WIRELESS.value == "rlc-loss"


def test_daemon_reads_the_byte_stream_from_a_port(tmp_path: Path) -> None:
    """``--feed mi2log`` reads the port beside the JSON one and yields the decoded messages."""
    feed = synthetic_feed(50)
    data = b"".join(encode_feed_message(m) for m in feed)

    async def main() -> list[dict[str, Any]]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for i in range(0, len(data), 333):  # cut mid-frame on purpose
                writer.write(data[i:i + 333])
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = DaemonConfig(client=ClientConfig(ue_id=0), server=("127.0.0.1", 9), key=b"k" * 16,
                              diag_port=port - 1, feed="mi2log", connect_timeout_s=2)
        got = [m async for m in feed_messages(config)]
        server.close()
        return got

    got = asyncio.run(main())
    assert [m["type_id"] for m in got] == [m["type_id"] for m in feed]


def test_daemon_flags(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"0123456789abcdef")
    parser = _parser()
    base = ["--ue-id", "0", "--server", "127.0.0.1:7070", "--key-file", str(key)]
    config = config_from_args(parser.parse_args(base), parser)
    assert config.feed == "json"
    config = config_from_args(parser.parse_args([*base, "--feed", "mi2log", "--mi2log-port", "6000"]), parser)
    assert (config.feed, config.mi2log_port) == ("mi2log", 6000)
    with pytest.raises(SystemExit):
        config_from_args(parser.parse_args([*base, "--mi2log-port", "6000"]), parser)
    assert json.dumps(dataclasses.asdict(config.client))
