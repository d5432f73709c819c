"""The scheme registry and what each scheme asks to run (no kernel needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawbed.claw.schemes import SCHEMES, SchemeContext, UeEndpoint, get_scheme
from clawbed.claw.schemes.base import KernelScheme
from clawbed.claw.schemes.claw import Claw, ensure_key
from clawbed.errors import InputError
from clawbed.netns import Namespace


class FakeRes:
    run_id = "ab12"

    class ledger:  # noqa: N801 - stands in for the run's Ledger: only its path is passed on
        path = Path("/run/x/ledger.jsonl")

    def name(self, role: str) -> str:
        return f"cb{self.run_id}{role}"


def _ns(name: str) -> Namespace:
    ns = Namespace.__new__(Namespace)  # a name only: nothing is created
    ns.name = name
    return ns


def ctx(tmp_path: Path) -> SchemeContext:
    ues = [UeEndpoint(_ns("cbab12u0"), "10.65.0.1", 0, "cbab12t0", diag_port=5775),
           UeEndpoint(_ns("cbab12u1"), "10.65.0.2", 1, "cbab12t1")]
    return SchemeContext(FakeRes(), tmp_path, _ns("cbab12core"), "10.64.0.1", "cbab12tc", ues,  # type: ignore[arg-type]
                         agent_port=7070, feedback_period_ms=20, client_args=["--n-rb", "50"])


def test_registry_has_the_seven_schemes_with_their_ccs() -> None:
    kernel = {name: cls.server_cc for name, cls in SCHEMES.items() if issubclass(cls, KernelScheme)}
    assert kernel == {"cubic": "cubic", "reno": "reno", "bbr": "bbr"}
    # vegas loads its own BPF CC too, named per run (vegas_<run id>): tests/test_vegas.py.
    assert set(SCHEMES) - set(kernel) == {"claw", "claw-nodetect", "cqic", "vegas"}
    # claw and its variants load their own CC, named per run (claw_<run id>): known once set up.
    assert {name: cls.cc_variant for name, cls in SCHEMES.items() if issubclass(cls, Claw)} == {
        "claw": "claw", "claw-nodetect": "claw", "cqic": "cqic"}
    # Each has a bpffs of its own, so that the variants could share a run.
    roles = [cls.bpffs_role for cls in SCHEMES.values() if issubclass(cls, Claw)]
    assert len(set(roles)) == len(roles)
    with pytest.raises(RuntimeError, match=r"named per run \(claw_<run id>\); set the scheme up first"):
        _ = get_scheme("claw")().server_cc
    assert all(cls.description for cls in SCHEMES.values())
    with pytest.raises(InputError, match="unknown scheme 'westwood'; known: bbr, claw, claw-nodetect, cqic, cubic, reno, vegas"):
        get_scheme("westwood")


def test_kernel_schemes_start_nothing_on_the_ues(tmp_path: Path) -> None:
    for name in ("cubic", "reno", "bbr"):
        assert get_scheme(name)().client_agents(ctx(tmp_path)) == []


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("name,variant,flags", [("claw", "claw", []), ("cqic", "cqic", []),
                                                ("claw-nodetect", "claw", ["--no-bottleneck-detector"])])
def test_claw_clients_get_the_agent_key_diag_port_and_marking_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  name: str, variant: str, flags: list[str],
                                                                  impl: str) -> None:
    from clawbed.claw.client.fast import BINARY
    from clawbed.claw.client.limits import DEFAULT_DIAG_PORT

    monkeypatch.setenv("CLAWBED_CLAW_CLIENT", impl)
    scheme = get_scheme(name)()
    assert isinstance(scheme, Claw)
    scheme.key_path = ensure_key(tmp_path / "claw-key")
    agents = scheme.client_agents(ctx(tmp_path))
    assert [a.name for a in agents] == [f"{name}-client-ue0", f"{name}-client-ue1"]
    argv = agents[0].argv
    if impl == "fast":  # the compiled client itself, no Python launcher
        assert argv[:2] == [str(BINARY), "run"]
    else:
        assert argv[1:3] == ["-m", "clawbed.claw.client"]

    def opt(flag: str, args: list[str] = argv) -> str:
        return args[args.index(flag) + 1]

    assert opt("--ue-id") == "0" and opt("--netns") == "cbab12u0"
    assert opt("--server") == "10.64.0.1:7070" and opt("--key-file") == str(tmp_path / "claw-key")
    assert opt("--period-ms") == "20" and opt("--variant") == variant
    # The scheme loads each UE's ACK marker; its client writes into the marker's map.
    assert opt("--ack-map") == str(tmp_path / "cbab12m0" / "ack_mark_cfg") and "--mark-dev" not in argv
    assert opt("--ready-file") == str(scheme.ready_path(ctx(tmp_path)))
    assert opt("--diag-port") == "5775" and opt("--n-rb") == "50"
    assert opt("--ue-id", agents[1].argv) == "1"
    assert opt("--diag-port", agents[1].argv) == str(DEFAULT_DIAG_PORT) if impl == "fast" else \
        "--diag-port" not in agents[1].argv
    assert [a for a in argv if a == "--no-bottleneck-detector"] == flags


def test_a_client_command_the_compiled_client_cannot_take_runs_the_launcher(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from clawbed.claw.client.fast import client_command

    monkeypatch.setenv("CLAWBED_CLAW_CLIENT", "fast")
    base = ["--ue-id", "0", "--server", "10.64.0.1:7070", "--key-file", str(tmp_path / "k")]
    assert client_command(base)[1] == "run"
    for extra in (["--feed", "mi2log"], ["--client-impl", "reference"], ["--no-such-flag"],
                  ["--mark-dev", "cbab12t0"]):
        assert client_command(base + extra)[1:3] == ["-m", "clawbed.claw.client"], extra


def test_key_is_made_once_private_and_32_bytes(tmp_path: Path) -> None:
    path = ensure_key(tmp_path / "k")
    key = path.read_bytes()
    assert len(key) == 32 and (path.stat().st_mode & 0o777) == 0o600
    assert ensure_key(path).read_bytes() == key
