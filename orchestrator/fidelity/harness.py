"""The pieces every purpose-built fidelity experiment is made of: a row's context, an emulated
cell with a flow server in its core namespace, bulk flows driven by a registered scheme with
the server's ``TCP_INFO`` sampled every 10 ms, constant-capacity traces, and statistics."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from clawbed import lte
from clawbed.claw.schemes import SchemeContext, UeEndpoint, get_scheme
from clawbed.emulator.process import EmulatedCell
from clawbed.netns import wait_until
from clawbed.orchestrator.fidelity import endpoints
from clawbed.orchestrator.fidelity.definitions import RowDef
from clawbed.orchestrator.fidelity.results import Outcome
from clawbed.replay.sampler import TcpSampler

MIB = 1 << 20
KB = 1000
#: The UE's receive buffer when nothing caps it (the replay's: min, default, max; 8 MiB max).
UE_RMEM_UNCAPPED = (4096, 131072, 8 << 20)
FLOW_PORT_BASE = 9100


@dataclass
class RowContext:
    """Where and how one row runs."""

    row: RowDef
    params: dict[str, Any]
    out: Path
    quick: bool
    run_id_prefix: str
    store_path: Path | None
    sweep: str
    console: Console
    outcome: Outcome = field(default_factory=Outcome)
    _ids: int = 0

    def run_id(self) -> str:
        from clawbed.orchestrator.runner import new_run_id

        return new_run_id(self.run_id_prefix)

    def log(self, text: str) -> None:
        self.console.print(f"  [dim]{self.row.id}[/dim] {text}")


def rate_bps(text: str | float) -> float:
    from clawbed.emulator.config import parse_rate_bps

    return float(parse_rate_bps(text)) if isinstance(text, str) else float(text)


def delays_for(core_rtt_ms: float | None) -> dict[str, float] | None:
    """Core delays giving this core round trip (split evenly), the rest the emulator's defaults."""
    if core_rtt_ms is None:
        return None
    return {"core_down_ms": core_rtt_ms / 2, "core_up_ms": core_rtt_ms / 2}


@dataclass
class FlowResult:
    """One flow (or a sequence of flows of one fetch) and what was measured of it."""

    cc: str
    samples: list[dict[str, Any]]
    server: list[dict[str, Any]]
    client: list[dict[str, Any]]
    t0: float
    t1: float

    def series(self, key: str) -> np.ndarray:
        return np.array([s[key] if s[key] is not None else np.nan for s in self.samples], dtype=float)

    @property
    def t(self) -> np.ndarray:
        return self.series("t_unix_s") - self.t0

    @property
    def inflight_bytes(self) -> np.ndarray:
        return self.series("unacked_pkts") * self.series("mss_bytes")

    def first_loss_index(self) -> int:
        """Index of the first sample that saw a retransmission or a lost packet (len if none)."""
        retrans = self.series("retrans_total")
        lost = self.series("lost_pkts")
        hit = np.nonzero((retrans > 0) | (lost > 0))[0]
        return int(hit[0]) if len(hit) else len(self.samples)

    def goodput_bps(self) -> float:
        acked = self.series("bytes_acked")
        t = self.t
        ok = ~np.isnan(acked)
        if ok.sum() < 2:
            return float("nan")
        return float((acked[ok][-1] - acked[ok][0]) * 8 / max(t[ok][-1] - t[ok][0], 1e-3))


class Cell:
    """An emulated cell with one UE (or ``n_ues``), entered as a context manager, with the
    helpers the experiments use. Keywords are :class:`EmulatedCell`'s (the emulator config's)."""

    def __init__(self, ctx: RowContext, name: str, *, ue: dict[str, Any], ue_rmem: tuple[int, int, int] = UE_RMEM_UNCAPPED,
                 n_ues: int = 1, topology: Any = None, **fields: Any) -> None:
        self.ctx = ctx
        self.dir = ctx.out / name
        self.dir.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {"ue": ue, "run_id": ctx.run_id(), **{k: v for k, v in fields.items() if v is not None}}
        if topology is not None:
            kwargs["topology"] = topology
        self.cell = EmulatedCell(n_ues, self.dir / "emulator", **kwargs)
        self.ue_rmem = ue_rmem
        self._port = FLOW_PORT_BASE

    def __enter__(self) -> Cell:
        self.cell.__enter__()
        try:
            for node in self.cell.topo.ues:
                node.ns.sysctl("net.ipv4.tcp_rmem", " ".join(str(v) for v in self.ue_rmem))
        except BaseException:
            self.cell.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc: Any) -> bool:
        return self.cell.__exit__(*exc)

    @property
    def topo(self) -> Any:
        return self.cell.topo

    @property
    def truth_path(self) -> Path:
        return self.cell.output_dir / "truth.cbcol"

    @property
    def packets_path(self) -> Path:
        return self.cell.output_dir / "packets.cbcol"

    def scheme_context(self, sub: Path) -> SchemeContext:
        topo = self.cell.topo
        ues = [UeEndpoint(ns=u.ns, address=str(u.address), index=u.index, device=u.tun,
                          diag_port=self.cell.emulator.diag_port(u.index)) for u in topo.ues]
        return SchemeContext(resources=self.cell.res, run_dir=sub, server_ns=topo.core.ns,
                             server_address=str(topo.core.address), server_device=topo.core.tun, ues=ues)

    def record_ends(self) -> None:
        """Record the kernel and both ends' sysctls on the row's outcome (first time only)."""
        if not self.ctx.outcome.sysctls:
            self.ctx.outcome.kernel = endpoints.kernel()
            self.ctx.outcome.sysctls = endpoints.both_ends(self.cell.topo.core.ns, self.cell.topo.ues[0].ns,
                                                           "the row's own server (core) and UE namespaces")

    @contextmanager
    def server(self, cc: str) -> Iterator[tuple[int, str, Path, TcpSampler]]:
        """Scheme ``cc`` set up on the server side and a flow server using its CC; yields
        (port, kernel CC name, log dir, an open sampler of that port)."""
        self._port += 1
        port = self._port
        sub = self.dir / f"{port}-{cc}"
        sub.mkdir(parents=True, exist_ok=True)
        scheme = get_scheme(cc)()
        sctx = self.scheme_context(sub)
        scheme.setup(sctx)
        try:
            scheme.start_clients(sctx)
            self.record_ends()
            core = self.cell.topo.core
            proc = core.popen([sys.executable, "-m", "clawbed.orchestrator.fidelity.flows", "serve", "--port", str(port),
                               "--cc", scheme.server_cc], name=f"fidserve{port}", log_path=sub / "server.jsonl")
            try:
                wait_until(lambda: bool(core.ns.run(["ss", "-ltnH", f"sport = :{port}"]).stdout.strip()), 10.0,
                           f"the flow server on port {port}", interval_s=0.05)
                sampler = TcpSampler(netns=core.name, port=port).open()
                try:
                    yield port, scheme.server_cc, sub, sampler
                finally:
                    sampler.close()
            finally:
                proc.close()
        finally:
            scheme.teardown()

    def flow(self, cc: str, *, seconds: float = 0.0, nbytes: int = 0, sizes: list[int] | None = None,
             gap_s: float = 0.0, read_bps: float | None = None, upload: bool = False, ue: int = 0,
             timeout_s: float | None = None) -> FlowResult:
        """One fetch (one or several flows) from UE ``ue`` to a flow server running ``cc``."""
        with self.server(cc) as (port, _cc_name, sub, sampler):
            argv = [sys.executable, "-m", "clawbed.orchestrator.fidelity.flows", "fetch", "--host",
                    str(self.cell.topo.core.address), "--port", str(port), "--seconds", str(seconds)]
            if sizes:
                argv += ["--sizes", ",".join(str(s) for s in sizes)]
            else:
                argv += ["--bytes", str(nbytes)]
            if gap_s:
                argv += ["--gap-s", str(gap_s)]
            if read_bps:
                argv += ["--read-bps", str(read_bps)]
            if upload:
                argv.append("--upload")
            t0 = time.time()
            sampler.start()
            try:
                limit = timeout_s or (seconds + 120 + (len(sizes or []) * (gap_s + 5)))
                done = self.cell.topo.ues[ue].run(argv, timeout_s=limit)
            finally:
                sampler.stop()
            t1 = time.time()
            time.sleep(0.2)  # the server prints its line once the client closed
            client = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        server = [json.loads(line) for line in (sub / "server.jsonl").read_text().splitlines()
                  if line.startswith("{") and '"listening"' not in line]
        result = FlowResult(cc, sampler.rows, server, client, t0, t1)
        (sub / "samples.json").write_text(json.dumps(sampler.rows))
        (sub / "client.jsonl").write_text("".join(json.dumps(c) + "\n" for c in client))
        return result


def _rate_cell(ctx: RowContext, name: str, rate: str, queue_bytes: int, core_rtt_ms: float | None,
               ue_rmem: tuple[int, int, int] | None = None, **fields: Any) -> Cell:
    ue: dict[str, Any] = {"rate": rate, "cell": {"queue_limit_bytes": int(queue_bytes)}}
    extra: dict[str, Any] = {"mode": "rate", "delays": delays_for(core_rtt_ms), **fields}
    if ue_rmem is not None:
        return Cell(ctx, name, ue=ue, ue_rmem=ue_rmem, **extra)
    return Cell(ctx, name, ue=ue, **extra)


def constant_trace(path: Path, rate: float, seconds: float, *, n_antennas: int = 2, other_rbs: int = 0,
                   with_harq_column: bool = False, other_steps: list[int] | None = None, step_ms: int = 1000) -> tuple[Path, float]:
    """A PHY trace whose capacity is about ``rate`` bit/s: the smallest cell and MCS whose TBS
    comes closest; ``other_steps``: the other users' demand in RBs, one value per ``step_ms``
    (instead of a constant ``other_rbs``). Returns the path and the capacity it has, bit/s."""
    from clawbed.traces.io import write_trace
    from clawbed.traces.schema import make_trace, new_metadata

    best: tuple[float, int, int, float] | None = None
    for bw, n_rb in ((1.4, 6), (3, 15), (5, 25), (10, 50), (20, 100)):
        for mcs in range(0, 29):
            bits = lte.tbs_bits(mcs, n_rb)
            err = abs(bits * 1000 - rate) / rate
            if best is None or err < best[0] - 1e-9:
                best = (err, mcs, n_rb, bw)
    assert best is not None
    _, mcs, n_rb, bw = best
    n = int(seconds * 1000)
    meta = new_metadata(bandwidth_mhz=bw, n_antennas=n_antennas, duration_ms=n, source="synth",
                        provenance={"generator": "clawbed fidelity constant_trace", "rate_bps": rate})
    if other_steps is not None:
        other = np.repeat(np.array(other_steps, dtype=np.int64), step_ms)[:n]
        other = np.pad(other, (0, max(0, n - len(other))), mode="edge")
    else:
        other = np.full(n, other_rbs)
    cols: dict[str, np.ndarray] = {"mcs": np.full(n, mcs), "other_rbs": np.minimum(other, n_rb),
                                   "other_users": np.where(other > 0, 1, 0)}
    if with_harq_column:
        cols["harq_fail"] = np.zeros(n)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(make_trace(meta, **cols), path)
    return path, lte.tbs_bits(mcs, n_rb) * 1000.0


def synth_trace(preset: str, seconds: int, seed: int = 1) -> Path:
    """The orchestrator's cached ``synth:<preset>`` trace of that length."""
    from clawbed.orchestrator.spec import synth_path
    from clawbed.traces.io import write_trace
    from clawbed.traces.synth import synthesize

    path = synth_path(preset, seed, seconds)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_trace(synthesize(preset, seconds * 1000, seed), path)
    return path


def pct(values: Any, q: float) -> float:
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    return float(np.percentile(arr, q)) if len(arr) else float("nan")


def within(value: float, target: float, tol: float) -> bool:
    return bool(abs(value - target) <= tol * abs(target))


def fmt(value: float, unit: str = "", digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"


def _ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks with ties sharing their average rank."""
    arr = np.asarray(values, dtype=float)
    order = np.argsort(arr, kind="stable")
    ranks = np.empty(len(arr))
    ranks[order] = np.arange(len(arr), dtype=float)
    for v in np.unique(arr):
        tie = arr == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation; NaN with fewer than 3 points or a constant side."""
    if len(a) < 3 or np.ptp(np.asarray(a, dtype=float)) == 0 or np.ptp(np.asarray(b, dtype=float)) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def save_figure(ctx: RowContext, fig: Any) -> None:
    """Write the row's figure (plotly JSON) into its directory and point the outcome at it."""
    path = ctx.out / "figure.json"
    path.write_text(fig.to_json())
    ctx.outcome.figure = path.name
