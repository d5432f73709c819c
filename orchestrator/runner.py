"""Running a suite: each scenario one replay (the replay's Python API, in this process), its
loads recorded in the store as each one ends, resumable after a kill at any point.

Resume rule: a scenario's recorded (scheme, repetition) pairs are never run again; a
scenario with any missing pair gets one new replay, in a new run directory with a new run
id, whose plan is exactly the missing pairs (interleaved as the replay does: by repetition,
then scheme). A load is recorded when it ends, in one transaction, under a UNIQUE key, so a
kill loses at most the load in flight and can never produce a duplicate. A failed load is a
finished load (it is recorded with its error) and is not re-run.

Executors: :class:`LocalExecutor` (default) runs scenarios one after another — the ``claw``
congestion-control name is machine-wide, so two replays with claw on one machine would
wait for each other anyway. :class:`RayExecutor` runs each scenario as a Ray task on a
worker that can run as root; Ray is an optional dependency.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from clawbed.errors import ClawbedError, InputError
from clawbed.netns import RUN_ID_ALPHABET, RUN_ID_LENGTH
from clawbed.orchestrator.crosstraffic import CrossTrafficSpec, OtherUeSpec
from clawbed.orchestrator.spec import LoadedSpec, Scenario, materialize_trace
from clawbed.orchestrator.store import DEFAULT_SWEEP, LoadRow, Store
from clawbed.paths import runs_dir
from clawbed.replay.run import Replay, ReplayConfig, ReplayEvent

#: One finished load as the replay reports it (``replay.run`` record: scheme, round, ok, plt_ms…).
LoadRecord = dict[str, Any]


@dataclass(frozen=True)
class ReplayJob:
    """What one replay of a scenario is asked to do."""

    scenario: Scenario
    #: (repetition, scheme) of each load to run, in order.
    plan: tuple[tuple[int, str], ...]
    #: The run directory to create (must not exist).
    run_dir: Path
    #: The run id (namespaces ``cb<run id>…``), at most 4 characters.
    run_id: str


#: Runs a job, calling back with each load's record as it ends. The real one is
#: :func:`replay_job`; tests pass a fake as a unit seam.
ReplayFn = Callable[[ReplayJob, Callable[[LoadRecord], None]], None]


@dataclass
class PlannedConfig(ReplayConfig):
    """A replay config whose plan is an explicit list of (repetition, scheme) loads: the
    missing ones of a scenario. The replay records ``round`` = the repetition."""

    loads: list[tuple[int, str]] = field(default_factory=list)

    def plan(self) -> list[tuple[int, str]]:
        return list(self.loads)


def replay_job(job: ReplayJob, on_load: Callable[[LoadRecord], None]) -> None:
    """Run ``job`` with :class:`clawbed.replay.run.Replay` in this process."""
    sc, cond = job.scenario, job.scenario.condition
    schemes = list(dict.fromkeys(s for _, s in job.plan))
    config = PlannedConfig(
        trace=materialize_trace(sc), page=sc.page, schemes=schemes, runs=max(r for r, _ in job.plan) + 1,
        http_version=cond.http, loader=sc.loader, core_rtt_ms=cond.core_rtt_ms, bs_buffer_bytes=cond.bs_buffer_bytes,
        wireline_rate=cond.wireline_rate, scheduler=cond.scheduler.value, seed=sc.seed, name=job.run_dir.name,
        load_timeout_s=sc.load_timeout_s, output_root=job.run_dir.parent, loads=list(job.plan),
        cross_traffic=[CrossTrafficSpec(kind=c.kind, flows=c.flows, cc=c.scheme, object_bytes=c.object_bytes,
                                        off_ms=c.off_ms) for c in cond.cross_traffic],
        other_ues=[OtherUeSpec(kind=o.kind, scheme=o.scheme, page=o.page) for o in cond.other_ues])

    def on_event(event: ReplayEvent) -> None:
        if event.kind == "load-done" and event.record is not None:
            on_load(event.record)

    replay = Replay(config, on_event=on_event)
    replay.run_id = job.run_id  # per-run isolation: the namespaces carry the orchestrator's id
    replay.run()


class Executor(Protocol):
    """Runs replay jobs; ``on_load(job, record)`` must be called for every finished load (in the
    calling process, where the store is written), ``on_done(job, error)`` once per job."""

    def run(self, jobs: Iterable[ReplayJob], on_load: Callable[[ReplayJob, LoadRecord], None],
            on_done: Callable[[ReplayJob, BaseException | None], None]) -> None: ...


@dataclass
class LocalExecutor:
    """Jobs one after another in this process (scenarios never overlap: see the module doc)."""

    replay: ReplayFn = replay_job

    def run(self, jobs: Iterable[ReplayJob], on_load: Callable[[ReplayJob, LoadRecord], None],
            on_done: Callable[[ReplayJob, BaseException | None], None]) -> None:
        for job in jobs:
            try:
                self.replay(job, lambda record, job=job: on_load(job, record))
            except (ClawbedError, OSError) as e:
                on_done(job, e)  # the scenario failed; the sweep goes on with the next one
            else:
                on_done(job, None)


@dataclass
class RayExecutor:
    """Each job a Ray task (``num_cpus`` each, on workers with the ``root`` custom resource
    when ``require_root``); the loads come back with the task and are recorded here, so a
    killed driver re-runs the scenarios whose tasks had not returned. Tasks are submitted one
    at a time unless ``max_concurrent`` > 1 (only with at most one claw scheme per worker)."""

    address: str | None = None
    num_cpus: float = 1.0
    require_root: bool = True
    max_concurrent: int = 1

    def _ray(self) -> Any:
        try:
            import ray
        except ImportError:
            raise InputError("--executor ray needs Ray, which is not installed: pip install ray") from None
        if not ray.is_initialized():
            ray.init(address=self.address)
        return ray

    def run(self, jobs: Iterable[ReplayJob], on_load: Callable[[ReplayJob, LoadRecord], None],
            on_done: Callable[[ReplayJob, BaseException | None], None]) -> None:
        ray = self._ray()
        resources = {"root": 1} if self.require_root else {}
        remote = ray.remote(num_cpus=self.num_cpus, resources=resources)(_collect_loads)
        pending: dict[Any, ReplayJob] = {}
        queue = list(jobs)
        while queue or pending:
            while queue and len(pending) < self.max_concurrent:
                job = queue.pop(0)
                pending[remote.remote(job)] = job
            ready, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ready[0])
            try:
                records, error = ray.get(ready[0])
            except Exception as e:  # noqa: BLE001 — a worker's crash is the job's failure, reported per job
                records, error = [], ClawbedError(f"Ray task failed: {e}")
            for record in records:
                on_load(job, record)
            on_done(job, ClawbedError(error) if error else None)


def _collect_loads(job: ReplayJob) -> tuple[list[LoadRecord], str | None]:
    """On a Ray worker: run the job, return its loads and its error (as text)."""
    records: list[LoadRecord] = []
    try:
        replay_job(job, records.append)
    except (ClawbedError, OSError) as e:
        return records, f"{type(e).__name__}: {e}"
    return records, None


def make_executor(name: str, ray_address: str | None = None) -> Executor:
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(address=ray_address)
    raise InputError(f"--executor {name!r}: one of local, ray")


# -- the sweep ----------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_killed(store: Store, suite: str, sweep: str, console: Console | None = None) -> list[str]:
    """Remove the leftovers (by their ledgers) of this sweep's scenarios whose runner died
    while ``running`` them (SIGKILL); the namespaces, and the ``claw`` CC a new replay would
    otherwise wait for. A scenario whose runner still lives is left alone."""
    import clawbed.claw.server.loader  # noqa: F401 — registers the cleanup of BPF pins, mounts, qdiscs
    from clawbed.netns import cleanup_from_ledger

    removed: list[str] = []
    for row in store.scenarios(suite=suite, sweep=sweep):
        if row["status"] != "running" or not row["run_dirs"]:
            continue
        # This process's own earlier sweep (interrupted, then resumed in-process) is over.
        owner = row["owner_pid"]
        if owner is not None and owner != os.getpid() and _pid_alive(owner):
            raise InputError(f"scenario {row['scenario_id']} of {suite} (sweep {sweep}) is being run by pid "
                             f"{row['owner_pid']}: wait for it, or stop it first")
        ledger = Path(row["run_dirs"][-1]) / "ledger.jsonl"
        if ledger.is_file():
            done = cleanup_from_ledger(ledger)
            removed += done
            if console is not None and done:
                console.print(f"cleaned up {len(done)} leftover(s) of the killed run {ledger.parent}")
        store.set_status(suite, sweep, row["scenario_id"], "pending", error="killed; resumed later",
                         run_dir=None)
    return removed


@dataclass
class SweepSummary:
    """What a sweep did: loads recorded now, loads skipped (recorded before), failed scenarios."""

    recorded: int = 0
    skipped: int = 0
    failed_scenarios: list[str] = field(default_factory=list)


def new_run_id(prefix: str = "") -> str:
    """A run id of :data:`RUN_ID_LENGTH` characters starting with ``prefix`` (``or`` for manual runs)."""
    if len(prefix) >= RUN_ID_LENGTH:
        raise InputError(f"run id prefix {prefix!r}: at most {RUN_ID_LENGTH - 1} characters")
    return prefix + "".join(secrets.choice(RUN_ID_ALPHABET) for _ in range(RUN_ID_LENGTH - len(prefix)))


def select(scenarios: list[Scenario], only: Iterable[str]) -> list[Scenario]:
    """The scenarios whose id starts with, or whose label equals, one of ``only`` (all if empty)."""
    wanted = list(only)
    if not wanted:
        return scenarios
    chosen = [s for s in scenarios if any(s.id.startswith(w) or s.label == w for w in wanted)]
    unknown = [w for w in wanted if not any(s.id.startswith(w) or s.label == w for s in scenarios)]
    if unknown:
        raise InputError(f"--only {', '.join(unknown)}: no such scenario id or label "
                         f"(ids: {', '.join(s.id for s in scenarios)})")
    return chosen


def run_suite(spec: LoadedSpec, store: Store, *, sweep: str = DEFAULT_SWEEP, resume: bool = False,
              only: Iterable[str] = (), executor: Executor | None = None, output_root: Path | None = None,
              run_id_prefix: str = "", console: Console | None = None) -> SweepSummary:
    """Run (or resume) every selected scenario of ``spec`` into ``store`` under ``sweep``.

    Without ``resume``, a sweep that has loads recorded already is refused (so results are
    never mixed by accident). Run directories go to ``<output_root>/<suite>/<sweep>/``
    (default: the runs folder's ``suites/``).
    """
    console = console or Console(stderr=True)
    executor = executor or LocalExecutor()
    scenarios = select(spec.scenarios(), only)
    suite = spec.name
    existing = store.loads(suite=suite, sweep=sweep)
    if existing and not resume:
        raise InputError(f"suite {suite} has {len(existing)} load(s) recorded in sweep {sweep!r} of {store.path}: "
                         f"--resume to continue it, or --sweep NAME for a new one")
    if resume:
        cleanup_killed(store, suite, sweep, console)
    root = (output_root or runs_dir() / "suites") / suite / sweep
    summary = SweepSummary()
    jobs: list[ReplayJob] = []
    runs_by_id = {row["scenario_id"]: row["run_dirs"] for row in store.scenarios(suite=suite, sweep=sweep)}
    for sc in scenarios:
        store.ensure_scenario(suite, sweep, sc.id, sc.label, sc.settings())
        done = store.done_loads(suite, sweep, sc.id)
        plan = tuple((rep, scheme) for rep in range(sc.repetitions) for scheme in sc.schemes
                     if (scheme, rep) not in done)
        summary.skipped += len(sc.schemes) * sc.repetitions - len(plan)
        if not plan:
            store.set_status(suite, sweep, sc.id, "complete")
            continue
        # A new run directory per attempt: never one a killed attempt used (on disk or in the store).
        used = set(runs_by_id.get(sc.id, []))
        attempt = 1
        while (root / f"{sc.id}-a{attempt}").exists() or str(root / f"{sc.id}-a{attempt}") in used:
            attempt += 1
        jobs.append(ReplayJob(sc, plan, root / f"{sc.id}-a{attempt}", new_run_id(run_id_prefix)))

    total = sum(len(j.plan) for j in jobs)
    console.print(f"suite {suite} (sweep {sweep}): {len(scenarios)} scenario(s), {total} load(s) to run, "
                  f"{summary.skipped} recorded already; store {store.path}")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=False)
    overall = progress.add_task("all loads", total=total)
    per_job = {id(j): progress.add_task(f"  {j.scenario.label}", total=len(j.plan), start=False) for j in jobs}

    def on_load(job: ReplayJob, record: LoadRecord) -> None:
        sc = job.scenario
        row = LoadRow(suite=suite, sweep=sweep, scenario_id=sc.id, label=sc.label, scheme=record["scheme"],
                      repetition=int(record["round"]), ok=bool(record["ok"]), plt_ms=record.get("plt_ms"),
                      bytes_total=record.get("bytes_total"), protocol=record.get("protocol"),
                      error=record.get("error"), run_dir=str(job.run_dir), load_index=record.get("load"),
                      t_start_unix_s=record.get("t_start_unix_s"), t_end_unix_s=record.get("t_end_unix_s"),
                      recorded_unix_s=time.time())
        if store.record_load(row):
            summary.recorded += 1
        outcome = (f"PLT {row.plt_ms:,.0f} ms" if row.ok and row.plt_ms is not None
                   else f"[red]failed: {row.error}[/red]")
        progress.console.print(f"  {sc.label} {row.scheme:<6} rep {row.repetition}: {outcome}")
        progress.advance(per_job[id(job)])
        progress.advance(overall)

    def on_done(job: ReplayJob, error: BaseException | None) -> None:
        sc = job.scenario
        missing = {(s, r) for r, s in job.plan} - store.done_loads(suite, sweep, sc.id)
        if error is None and not missing:
            store.set_status(suite, sweep, sc.id, "complete")
        else:
            why = f"{type(error).__name__}: {error}" if error else f"{len(missing)} load(s) not reported"
            store.set_status(suite, sweep, sc.id, "failed", error=why)
            summary.failed_scenarios.append(sc.id)
            progress.console.print(f"[red]scenario {sc.label} ({sc.id}) failed: {why}[/red]")

    def started(jobs_: list[ReplayJob]) -> Iterable[ReplayJob]:
        # The scenario is marked running (with its run dir and this pid) just before its replay
        # creates anything, so a resume after SIGKILL knows which ledger to clean up.
        for job in jobs_:
            store.set_status(suite, sweep, job.scenario.id, "running", run_dir=str(job.run_dir),
                             owner_pid=os.getpid())
            progress.start_task(per_job[id(job)])
            yield job

    try:
        with progress:
            executor.run(started(jobs), on_load, on_done)
    except KeyboardInterrupt:
        for job in jobs:
            rows = store.scenarios(suite=suite, sweep=sweep)
            if any(r["scenario_id"] == job.scenario.id and r["status"] == "running" for r in rows):
                store.set_status(suite, sweep, job.scenario.id, "pending", error="interrupted")
        raise
    return summary
