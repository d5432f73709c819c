"""The loader's command building and bookkeeping, with a stand-in namespace that records
commands (the kernel tests run the same code for real)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import clawbed.netns as netns_mod
from clawbed.claw import bpfobjects
from clawbed.claw.server import loader
from clawbed.claw.server.sysctls import SERVER_SYSCTLS, apply_server_sysctls, restore_sysctls
from clawbed.netns import Endpoint, Namespace, ResourceError, Resources, new_run_id


class FakeNs:
    """Records ``run`` calls; answers from ``replies`` (first matching prefix), else empty."""

    def __init__(self, name: str = "cbtestns", replies: dict[tuple[str, ...], str] | None = None,
                 fail: tuple[str, ...] | None = None) -> None:
        self.name = name
        self.path = f"/var/run/netns/{name}"
        self.calls: list[list[str]] = []
        self.replies = replies or {}
        self.fail = fail

    def run(self, argv: list[str], *, check: bool = True, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if self.fail and tuple(argv[: len(self.fail)]) == self.fail:
            raise ResourceError(f"in namespace {self.name}: {' '.join(argv)} exited 2: RTNETLINK answers: nope")
        out = next((v for k, v in self.replies.items() if tuple(argv[: len(k)]) == k), "")
        return subprocess.CompletedProcess(argv, 0, out, "")

    def sysctl(self, key: str, value: str) -> None:
        self.calls.append(["sysctl", key, str(value)])


#: Flags and ioctls of /dev/net/tun (linux/if_tun.h).
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
_TUNSETIFF, _TUNSETPERSIST, _TUNSETLINK = 0x400454CA, 0x400454CB, 0x400454CD


def _tun(ns_name: str, name: str, link_type: int | None = None) -> None:
    """A persistent TUN device ``name`` in namespace ``ns_name`` (it goes with the
    namespace), with ARPHRD ``link_type`` if given."""
    import fcntl
    import os
    import struct

    from clawbed.netns import in_netns

    def make() -> None:
        fd = os.open("/dev/net/tun", os.O_RDWR)
        try:
            fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH14x", name.encode(), _IFF_TUN | _IFF_NO_PI))
            if link_type is not None:
                fcntl.ioctl(fd, _TUNSETLINK, link_type)
            fcntl.ioctl(fd, _TUNSETPERSIST, 1)
        finally:
            os.close(fd)

    in_netns(ns_name, f"creating TUN {name}", make)


@pytest.fixture
def tc_bed(tmp_path: Path) -> Iterator[tuple[Resources, Namespace, str, Path]]:
    """A namespace with a veth end (the device), a bpffs, and a tc program pinned in it."""
    from clawbed.claw.server import bpfmap
    from clawbed.claw.server.libbpf import BpfObject

    with Resources(new_run_id(), tmp_path / "ledger.jsonl") as res:
        a, b = res.namespace("a"), res.namespace("b")
        dev = res.name("va")
        res.veth(Endpoint(a, dev, "10.250.0.1/30"), Endpoint(b, res.name("vb"), "10.250.0.2/30"))
        fs = bpfobjects.mount_bpffs(res, tmp_path)
        pin = fs / "prog"
        with BpfObject(bpfobjects.object_path("ack_mark_egress.bpf.o")) as obj:
            obj.set_pin_path("ack_mark_cfg", fs / "cfg")
            obj.load()
            bpfmap.obj_pin(obj.prog_fd("ack_mark_egress"), pin)
        yield res, a, dev, pin


@pytest.mark.root
def test_tc_program_adds_clsact_only_when_missing_and_removes_only_its_own(
        tc_bed: tuple[Resources, Namespace, str, Path]) -> None:
    res, ns, dev, pin = tc_bed

    def shown(*args: str) -> str:
        return ns.run(["tc", *args]).stdout

    assert "clsact" not in shown("qdisc", "show", "dev", dev)
    prog = bpfobjects.TcProgram(ns.name, dev, pin, direction="ingress", pref=loader.TC_PREF, ledger=res.ledger)
    ingress = shown("filter", "show", "dev", dev, "ingress")
    assert "clsact" in shown("qdisc", "show", "dev", dev)
    assert f"pref {loader.TC_PREF} bpf" in ingress and "direct-action" in ingress, ingress
    # Recorded as tc undoes it after a crash; the newest entry also removes the qdisc it added.
    entries = [e for e in res.ledger.entries() if e["kind"] == "tc-filter"]
    assert entries[-1] == {"kind": "tc-filter", "name": dev, "netns": ns.name, "direction": "ingress",
                           "pref": loader.TC_PREF, "qdisc": True}

    # A second program finds the qdisc: it neither adds nor removes it.
    other = bpfobjects.TcProgram(ns.name, dev, pin, direction="egress", pref=7)
    assert "pref 7 bpf" in shown("filter", "show", "dev", dev, "egress")
    other.close()
    other.close()
    assert "bpf" not in shown("filter", "show", "dev", dev, "egress")
    assert "clsact" in shown("qdisc", "show", "dev", dev) and "bpf" in shown("filter", "show", "dev", dev, "ingress")
    prog.close()
    prog.close()
    assert "clsact" not in shown("qdisc", "show", "dev", dev)


@pytest.mark.root
def test_tc_program_failure_names_the_device_and_undoes_the_qdisc(
        tc_bed: tuple[Resources, Namespace, str, Path]) -> None:
    _res, ns, dev, pin = tc_bed
    with pytest.raises(ResourceError, match=f"in namespace {ns.name}: .*on cbnodev0: no interface with this name"):
        bpfobjects.TcProgram(ns.name, "cbnodev0", pin, direction="ingress", pref=loader.TC_PREF)
    # A map is not a tc program: the kernel refuses the filter after the qdisc was added.
    with pytest.raises(ResourceError, match=f"tc ingress filter pref {loader.TC_PREF} on {dev}: attaching the filter"):
        bpfobjects.TcProgram(ns.name, dev, pin.parent / "cfg", direction="ingress", pref=loader.TC_PREF)
    assert "clsact" not in ns.run(["tc", "qdisc", "show", "dev", dev]).stdout
    with pytest.raises(ValueError):
        bpfobjects.TcProgram(ns.name, "d", pin, direction="sideways", pref=1)


@pytest.mark.root
def test_device_l2_len_from_link_type(tc_bed: tuple[Resources, Namespace, str, Path]) -> None:
    res, ns, dev, _pin = tc_bed
    tun = res.name("t0")
    _tun(ns.name, tun)
    assert bpfobjects.device_l2_len(ns.name, dev) == 14  # veth: Ethernet
    assert bpfobjects.device_l2_len(ns.name, "lo") == 14
    assert bpfobjects.device_l2_len(ns.name, tun) == 0
    with pytest.raises(ResourceError, match="cbnodev0: No such device"):
        bpfobjects.device_l2_len(ns.name, "cbnodev0")


@pytest.mark.root
def test_device_l2_len_refuses_other_link_types(tc_bed: tuple[Resources, Namespace, str, Path]) -> None:
    res, ns, _dev, _pin = tc_bed
    sit = res.name("g0")
    _tun(ns.name, sit, link_type=776)  # ARPHRD_SIT
    with pytest.raises(ResourceError, match="link type 776"):
        bpfobjects.device_l2_len(ns.name, sit)


def test_a_missing_object_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ResourceError, match="build.sh"):
        bpfobjects.object_path("ack_mark_egress.bpf.o", tmp_path)


def test_build_command_and_objects_dir(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLAWBED_BPF_DIR", str(tmp_path))
    assert bpfobjects.objects_dir() == tmp_path
    cmd = bpfobjects.build_command()
    assert cmd[0] == "bash" and cmd[1].endswith("claw/bpf/build.sh") and cmd[2] == str(tmp_path)


def test_bpffs_source_must_be_prefixed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must start with 'cb'"):
        bpfobjects.BpffsMount(tmp_path / "m", "claw")


def test_unknown_variant_is_refused(tmp_path: Path) -> None:
    # Any built <variant>_cc.bpf.o loads (vegas too: tests/test_vegas.py); one never built says how to build it.
    with pytest.raises(ResourceError, match="build.sh"):
        loader.CongestionControl(None, "nosuch", name="nosuch_ab12", obj_dir=tmp_path)  # type: ignore[arg-type]
    for variant in ("Vegas", "claw_cc", "", "1x"):
        with pytest.raises(ValueError, match="unknown congestion control variant"):
            loader.cc_name(variant, "ab12")


def test_cc_names_are_the_runs_own_and_fit_the_kernels_limit() -> None:
    assert loader.cc_name("claw", "ab12") == "claw_ab12" and loader.cc_name("cqic", "ab12") == "cqic_ab12"
    assert loader.cc_name("claw", "w" * 10) == "claw_" + "w" * 10          # 15 characters: TCP_CA_NAME_MAX - 1
    for run_id in ("w" * 11, "AB12", "a-b"):
        with pytest.raises(ValueError, match="congestion control name"):
            loader.cc_name("claw", run_id)
    with pytest.raises(ValueError, match="congestion control name"):
        loader.CongestionControl(None, "claw", name="claw with space")  # type: ignore[arg-type]


def _object(tmp_path: Path, section: str, data: bytes) -> Path:
    """A minimal 64-bit little-endian ELF file: a null section, ``section`` holding
    ``data``, and the section-name table."""
    import struct
    names = b"\0" + section.encode() + b"\0.shstrtab\0"
    data_at, names_at = 64, 64 + len(data)
    shoff = names_at + len(names)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 2)
    sections = (bytes(64) + struct.pack("<IIQQQQIIQQ", 1, 1, 0, 0, data_at, len(data), 0, 0, 8, 0)
                + struct.pack("<IIQQQQIIQQ", 2 + len(section), 3, 0, 0, names_at, len(names), 0, 0, 1, 0))
    path = tmp_path / "x_cc.bpf.o"
    path.write_bytes(bytes(header) + data + names + sections)
    return path


def test_struct_ops_image_renames_the_one_compiled_name(tmp_path: Path) -> None:
    ops = bytes(88) + b"claw".ljust(16, b"\0") + bytes(40) + b"\x01\0\0\0"
    path = _object(tmp_path, ".struct_ops", ops)
    image = loader.struct_ops_image(path, "claw", "claw_ab12")
    assert len(image) == path.stat().st_size
    assert image == path.read_bytes().replace(b"claw".ljust(16, b"\0"), b"claw_ab12".ljust(16, b"\0"))
    with pytest.raises(ResourceError, match="occurs 0 times"):
        loader.struct_ops_image(path, "cqic", "cqic_ab12")
    twice = _object(tmp_path, ".struct_ops", ops + ops)
    with pytest.raises(ResourceError, match="occurs 2 times"):
        loader.struct_ops_image(twice, "claw", "claw_ab12")
    other = _object(tmp_path, ".data", ops)
    with pytest.raises(ResourceError, match="expected one .struct_ops section, found 0"):
        loader.struct_ops_image(other, "claw", "claw_ab12")
    (tmp_path / "junk.o").write_bytes(b"not an ELF file")
    with pytest.raises(ResourceError, match="not a 64-bit little-endian ELF"):
        loader.struct_ops_image(tmp_path / "junk.o", "claw", "claw_ab12")


def test_the_ledger_undoes_bpf_kinds_itself(tmp_path: Path) -> None:
    pin = tmp_path / "claw_peers"
    pin.write_text("")
    assert netns_mod.undo_entry({"kind": "bpf-pin", "name": str(pin)}) == f"BPF pin {pin}"
    assert not pin.exists()
    assert netns_mod.undo_entry({"kind": "bpf-pin", "name": str(pin)}) is None
    assert netns_mod.undo_entry({"kind": "struct_ops", "name": "claw", "pin": str(tmp_path / "nolink")}) is None
    assert netns_mod.undo_entry({"kind": "bpffs", "name": "cbxxbp", "path": str(tmp_path)}) is None  # not a bpffs
    assert netns_mod.undo_entry({"kind": "netns", "name": "cbxx"}) is None  # not a BPF kind
    # Every kind the BPF modules record is one the ledger undoes, with nothing imported first.
    assert {"bpffs", "bpf-pin", "tc-filter", "struct_ops", "cc-default"} <= netns_mod.BPF_AND_TC_KINDS


@pytest.mark.root
def test_server_sysctls_are_set_and_previous_values_returned(tmp_path: Path) -> None:
    """Set in a real namespace from a thread inside it (no ip netns exec), read back by a
    process in it, and put back; the root namespace's are untouched."""
    from clawbed.netns import Resources, new_run_id

    root_before = Path("/proc/sys/net/ipv4/tcp_wmem").read_text()
    with Resources(new_run_id(), tmp_path / "ledger.jsonl") as res:
        ns = res.namespace("s")

        def shown(key: str) -> str:
            return " ".join(ns.run(["cat", "/proc/sys/" + key.replace(".", "/")]).stdout.split())

        before = {k: shown(k) for k in SERVER_SYSCTLS}
        previous = apply_server_sysctls(ns, {"net.ipv4.tcp_slow_start_after_idle": "1"})  # type: ignore[arg-type]
        assert previous == before
        assert shown("net.ipv4.tcp_no_metrics_save") == "1"
        assert shown("net.ipv4.tcp_slow_start_after_idle") == "1"  # the override
        wmem = [int(v) for v in shown("net.ipv4.tcp_wmem").split()]
        assert wmem[2] >= 2 * 19_000_000  # twice the largest LTE W_claw
        restore_sysctls(ns, previous)
        assert {k: shown(k) for k in SERVER_SYSCTLS} == before
        with pytest.raises(ResourceError, match="tcp_wmem"):
            apply_server_sysctls(ns, {"net.ipv4.tcp_wmem": "not numbers"})  # type: ignore[arg-type]
    assert Path("/proc/sys/net/ipv4/tcp_wmem").read_text() == root_before
