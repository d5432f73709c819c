"""Running a suite: each scenario one replay (the replay's Python API, in this process), its
loads recorded in the store as each one ends, resumable after a kill at any point.

Resume rule: a scenario's recorded (scheme, repetition) pairs are never run again; a
scenario with any missing pair gets one new replay, in a new run directory with a new run
id, whose plan is exactly the missing pairs (interleaved as the replay does: by repetition,
then scheme). A load is recorded when it ends, in one transaction, under a UNIQUE key, so a
kill loses at most the load in flight and can never produce a duplicate. A failed load is a
finished load (it is recorded with its error) and is not re-run.

Executors: :class:`LocalExecutor` (default) runs scenarios one after another — a replay
emulates the cell in real time, and a second one on the same cores would skew both one's
timing. :class:`RayExecutor` runs each scenario as a Ray task on a node
whose workers run as root (the ``root`` custom resource), a local cluster of its own or a
given one; the loads stream back to this process, which alone writes the store.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from clawbed.errors import ClawbedError, InputError
from clawbed.netns import RUN_ID_ALPHABET, RUN_ID_LENGTH
from clawbed.orchestrator.spec import LoadedSpec, Scenario, materialize_trace
from clawbed.orchestrator.store import DEFAULT_SWEEP, LoadRow, Store
from clawbed.paths import runs_dir, state_dir
from clawbed.replay import airtime
from clawbed.replay.network.crosstraffic import CrossTrafficSpec, OtherUeSpec
from clawbed.replay.records import LoadRecord
from clawbed.replay.run import Replay, ReplayConfig, ReplayEvent


def _airtime_or_none(run_dir: Path | None, record: LoadRecord) -> airtime.Airtime | None:
    """The load's airtime split for the store; None when its files are not here (a run on
    another Ray node) or cannot be read (the load itself stays recorded)."""
    if run_dir is None or not record.ok:
        return None
    try:
        return airtime.load_airtime(Path(run_dir), record)
    except (InputError, OSError, ValueError):
        return None


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
    #: A deliberate slowdown for calibrating a regression check (``ReplayConfig.inject_delay_ms``).
    inject_delay_ms: float = 0.0
    #: Load again a load during which the emulator fell behind (``ReplayConfig.rerun_late``).
    rerun_late: bool = True


#: Runs a job, calling back with each load's record as it ends. The real one is
#: :func:`replay_job`; tests pass a fake as a unit seam.
ReplayFn = Callable[[ReplayJob, Callable[[LoadRecord], None]], None]


@dataclass
class PlannedConfig(ReplayConfig):
    """A replay config whose plan is an explicit list of (repetition, scheme) loads: the
    missing ones of a scenario. The replay records ``round`` = the repetition; ``runs`` is
    the scenario's repetitions, so a resumed repetition starts at the trace time it would have
    started at in one go (:meth:`ReplayConfig.round_trace_ms`)."""

    loads: list[tuple[int, str]] = field(default_factory=list)

    def plan(self) -> list[tuple[int, str]]:
        return list(self.loads)


def replay_job(job: ReplayJob, on_load: Callable[[LoadRecord], None]) -> None:
    """Run ``job`` with :class:`clawbed.replay.run.Replay` in this process."""
    sc, cond = job.scenario, job.scenario.condition
    schemes = list(dict.fromkeys(s for _, s in job.plan))
    config = PlannedConfig(
        trace=materialize_trace(sc), page=sc.page_source or sc.page, schemes=schemes, runs=sc.repetitions,
        http_version=cond.http, loader=sc.loader,
        wireline_rate=cond.wireline_rate, wired_delay_ms=cond.wired_delay_ms, wired_jitter_ms=cond.wired_jitter_ms,
        wired_loss_pct=cond.wired_loss_pct, wired_reorder_pct=cond.wired_reorder_pct,
        seed=sc.seed, name=job.run_dir.name,
        load_timeout_s=sc.load_timeout_s, output_root=job.run_dir.parent, loads=list(job.plan),
        inject_delay_ms=job.inject_delay_ms, rerun_late=job.rerun_late,
        cross_traffic=[CrossTrafficSpec(kind=c.kind, flows=c.flows, scheme=c.scheme, object_bytes=c.object_bytes,
                                        off_ms=c.off_ms) for c in cond.cross_traffic],
        other_ues=[OtherUeSpec(kind=o.kind, scheme=o.scheme, page=o.page, off_ms=o.off_ms) for o in cond.other_ues],
        idle_before_s=cond.idle_before_s, keep_connections=cond.keep_connections,
        **cond.settings())

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
                self.replay(job, functools.partial(on_load, job))
            except (ClawbedError, OSError) as e:
                on_done(job, e)  # the scenario failed; the sweep goes on with the next one
            else:
                on_done(job, None)


#: The custom resource that marks a node whose Ray workers run as root. A node offers one, so
#: one replay at a time runs per machine (as locally: see above).
ROOT_RESOURCE = "root"
#: How long the driver waits for a given head's port to answer, s.
RAY_CONNECT_TIMEOUT_S = 10.0
#: How often the driver collects the loads the tasks have streamed back, s.
RAY_POLL_S = 0.5
#: How long cancelled tasks (Ctrl-C or SIGTERM of the driver) get to tear their replay down, s.
RAY_CANCEL_GRACE_S = 60.0
#: How many times a scenario whose Ray worker or node died is run again within one sweep.
RERUNS_ON_LOSS = 2
#: A local cluster's shared-memory object store: only load records travel through it.
RAY_OBJECT_STORE_BYTES = 128 * 1024 * 1024
#: Ray's Unix sockets live at ``<temp dir>/session_<date>_<pid>/sockets/plasma_store``, which
#: must fit in 107 bytes: the temp dir's path may have at most this many characters.
RAY_TEMP_DIR_MAX_CHARS = 43


def ray_temp_dir() -> Path:
    """Where a local cluster keeps its sessions (logs, sockets): ``<state>/ray``."""
    return state_dir() / "ray"


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set (kept where already set) for the block, restored after."""
    saved: dict[str, str | None] = {k: os.environ.get(k) for k in values}
    for key, value in values.items():
        os.environ.setdefault(key, value)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class RayExecutor:
    """Each job a Ray task on a node with the :data:`ROOT_RESOURCE` custom resource.

    ``address`` None: a local single-node cluster is started for the sweep (every server on
    127.0.0.1, no dashboard, no usage stats, a fresh auth token, sessions under
    :func:`ray_temp_dir`) and stopped after it by ``ray.shutdown()``; otherwise the driver
    joins the cluster at ``address`` and only disconnects. Each task streams every load to a
    small actor as it ends; the driver moves them into the store every :data:`RAY_POLL_S`, so
    a killed driver loses at most the loads of that interval (a resume re-runs them). As many
    tasks run at once as the cluster has root slots.
    """

    address: str | None = None
    #: CPUs each task reserves on its node.
    num_cpus: float = 1.0
    #: A local cluster's session folder (default :func:`ray_temp_dir`).
    temp_dir: Path | None = None

    @contextmanager
    def _cluster(self) -> Iterator[Any]:
        """The connected ``ray`` module: a started local cluster or the one at ``address``."""
        if self.address is not None:
            _check_reachable(self.address)
            ray = _import_ray()
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
            except (ConnectionError, ValueError, RuntimeError) as e:
                raise InputError(f"--ray-address {self.address}: cannot join that Ray cluster: {e}") from None
            try:
                yield ray
            finally:
                ray.shutdown()  # disconnects; the cluster stays up
            return
        if os.geteuid() != 0:
            raise InputError("--executor ray without --ray-address starts a local cluster, whose worker runs the "
                             "replays: run as root (replays create network namespaces)")
        temp = (self.temp_dir or ray_temp_dir()).resolve()
        if len(str(temp)) > RAY_TEMP_DIR_MAX_CHARS:
            raise InputError(f"Ray's session folder {temp} is longer than {RAY_TEMP_DIR_MAX_CHARS} characters "
                             "(its Unix socket paths would not fit): point CLAWBED_STATE at a shorter path")
        temp.mkdir(parents=True, exist_ok=True)
        # Ray reads these (some at import) and hands them to every process of the cluster:
        # single-node mode binds every server to 127.0.0.1; the token stays in the
        # environment of this cluster's processes instead of being written to ~/.ray.
        with _environ({"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                       "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}):
            ray = _import_ray()
            context = ray.init(address="local", num_cpus=os.cpu_count() or 1, resources={ROOT_RESOURCE: 1},
                               object_store_memory=RAY_OBJECT_STORE_BYTES, include_dashboard=False,
                               _temp_dir=str(temp), log_to_driver=False, logging_level=logging.WARNING)
            try:
                ip = context.address_info["node_ip_address"]
                if ip != "127.0.0.1":
                    raise ClawbedError(f"the local Ray cluster came up on {ip}, not 127.0.0.1: Ray was imported "
                                       "before the executor could set it to single-node mode")
                yield ray
            finally:
                ray.shutdown()  # stops every process this driver's ray.init() started

    #: Whether :meth:`run` takes a ``rerun`` callback (re-running a lost worker's scenario).
    reruns_lost_jobs = True

    def run(self, jobs: Iterable[ReplayJob], on_load: Callable[[ReplayJob, LoadRecord], None],
            on_done: Callable[[ReplayJob, BaseException | None], None],
            rerun: Callable[[ReplayJob, str], ReplayJob | None] | None = None,
            on_node: Callable[[ReplayJob, str], None] | None = None) -> None:
        """As :class:`Executor`; a task whose worker or node died (not a replay that failed) is
        handed to ``rerun(job, why)``, whose new job (the scenario's missing loads) runs on
        another node offering :data:`ROOT_RESOURCE` when there is one (soft affinity: it waits
        for that node's slot, or runs wherever it can when that node is gone); ``on_node(job,
        node id)`` when a job's task starts."""
        with self._cluster() as ray, _sigterm_as_interrupt():
            slots = int(ray.cluster_resources().get(ROOT_RESOURCE, 0))
            if slots < 1:
                raise InputError(f"--ray-address {self.address}: no node of that cluster offers the "
                                 f"{ROOT_RESOURCE!r} resource; start root workers with "
                                 f"`ray start --address=... --resources='{{\"{ROOT_RESOURCE}\": 1}}'` as root")
            sink = ray.remote(num_cpus=0)(_LoadSink).remote()
            # No retries: a retried replay would reuse its run directory; the runner's resume
            # logic re-runs what is missing instead.
            remote = ray.remote(num_cpus=self.num_cpus, resources={ROOT_RESOURCE: 1}, max_retries=0)(_run_on_worker)
            pending: dict[Any, ReplayJob] = {}
            by_run_id: dict[str, ReplayJob] = {}
            #: The node each job's task started on (the task says so first thing).
            node_of: dict[str, str] = {}

            def collect() -> None:
                for kind, run_id, payload in ray.get(sink.drain.remote()):
                    if kind == "node":
                        node_of[run_id] = payload
                        if on_node is not None:
                            on_node(by_run_id[run_id], payload)
                    else:
                        on_load(by_run_id[run_id], payload)

            def submit(job: ReplayJob, avoid_node: str | None = None) -> None:
                by_run_id[job.run_id] = job
                options: dict[str, Any] = {}
                others = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["NodeID"] != avoid_node
                          and n.get("Resources", {}).get(ROOT_RESOURCE)] if avoid_node else []
                if others:
                    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(others[0], soft=True)
                pending[remote.options(**options).remote(job, sink)] = job

            queue = iter(jobs)
            try:
                while True:
                    while len(pending) < slots and (job := next(queue, None)) is not None:
                        submit(job)
                    if not pending:
                        break
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=RAY_POLL_S)
                    # A task hands over each load before it returns, so a finished task's loads
                    # are all in this batch.
                    collect()
                    for ref in ready:
                        job = pending.pop(ref)
                        lost = False
                        try:
                            error = ray.get(ref)
                        except ray.exceptions.RayTaskError as e:  # the replay raised a bug
                            error = f"Ray task failed: {e}"
                        except ray.exceptions.RayError as e:  # its worker or node died
                            error, lost = f"Ray task lost: {type(e).__name__}: {e}", True
                        again = rerun(job, error) if lost and rerun is not None else None
                        if again is not None:
                            collect()  # whatever the lost task handed over before it died
                            submit(again, avoid_node=node_of.get(job.run_id))
                        else:
                            on_done(job, ClawbedError(error) if error else None)
            except BaseException:
                # Ctrl-C / SIGTERM: the tasks unwind their replays (KeyboardInterrupt on the
                # worker); what they measured until then is still recorded.
                if pending:
                    _cancel(ray, list(pending), collect)
                raise


def _cancel(ray: Any, refs: list[Any], collect: Callable[[], None]) -> None:
    """Cancel the running tasks, give them :data:`RAY_CANCEL_GRACE_S` to tear their replays
    down, and record what they measured. A Ctrl-C in a terminal also reaches the local
    cluster's processes (one process group): when the cluster is gone already, the killed
    replays' leftovers are removed by their ledgers on ``--resume``."""
    try:
        for ref in refs:
            ray.cancel(ref)
        ray.wait(refs, num_returns=len(refs), timeout=RAY_CANCEL_GRACE_S)
        collect()
    except ray.exceptions.RayError:
        pass


class _LoadSink:
    """A Ray actor: the tasks put each finished load here as it ends; the driver drains it.
    It belongs to the driver's job, so it ends when the driver disconnects."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str, Any]] = []

    def started(self, run_id: str, node_id: str) -> None:
        """A task started on ``node_id`` (so a lost one's scenario can be re-run elsewhere)."""
        self._items.append(("node", run_id, node_id))

    def put(self, run_id: str, record: LoadRecord) -> None:
        self._items.append(("load", run_id, record))

    def drain(self) -> list[tuple[str, str, Any]]:
        items, self._items = self._items, []
        return items


def _run_on_worker(job: ReplayJob, sink: Any) -> str | None:
    """On a Ray worker: run the job, handing each load to ``sink`` as it ends; its error as
    text (None: it ran to the end)."""
    import ray

    if os.geteuid() != 0:
        return f"the Ray worker on {os.uname().nodename} is not root but offers the {ROOT_RESOURCE!r} resource"
    ray.get(sink.started.remote(job.run_id, ray.get_runtime_context().get_node_id()))
    try:
        replay_job(job, lambda record: ray.get(sink.put.remote(job.run_id, record)))
    except (ClawbedError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def _check_reachable(address: str) -> None:
    """Fail fast on a head that does not answer (``ray.init`` would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or "://" in address:
        raise InputError(f"--ray-address {address!r}: give HOST:PORT of the cluster's head (its GCS port, "
                         "6379 unless `ray start --head --port` said otherwise)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise InputError(f"--ray-address {address}: no Ray head answers there ({e.strerror or e}); "
                         "start one with `ray start --head`") from None


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClawbedError("--executor ray: Ray is missing from this environment (it is in requirements.lock): "
                           "run `make setup`") from None
    return ray


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt (in the main thread) for the block, so a terminated
    driver cancels its tasks and stops its cluster like a Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def make_executor(name: str, ray_address: str | None = None) -> Executor:
    """The executor named by ``--executor`` (``--ray-address`` only with ``ray``)."""
    if name == "local":
        if ray_address is not None:
            raise InputError("--ray-address is for --executor ray")
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
    #: Loads run again because the emulator fell behind during them, and loads recorded with
    #: ``timing_ok`` False (every attempt fell behind).
    late_reruns: int = 0
    timing_flagged: int = 0
    #: Scenarios re-run because the Ray worker or node running them died.
    lost_workers: int = 0


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
              run_id_prefix: str = "", console: Console | None = None, inject_delay_ms: float = 0.0,
              rerun_late: bool = True) -> SweepSummary:
    """Run (or resume) every selected scenario of ``spec`` into ``store`` under ``sweep``.

    Without ``resume``, a sweep that has loads recorded already is refused (so results are
    never mixed by accident). Run directories go to ``<output_root>/<suite>/<sweep>/``
    (default: the runs folder's ``suites/``). ``inject_delay_ms`` slows every load down on
    purpose (``ReplayConfig.inject_delay_ms``: to calibrate a regression check; the scenario ids
    stay); ``rerun_late`` loads again a load during which the emulator fell behind.
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
    # Absolute: a Ray worker does not share this process's working directory.
    root = ((output_root or runs_dir() / "suites") / suite / sweep).resolve()
    summary = SweepSummary()
    jobs: list[ReplayJob] = []
    runs_by_id = {row["scenario_id"]: row["run_dirs"] for row in store.scenarios(suite=suite, sweep=sweep)}

    def new_job(sc: Scenario, plan: tuple[tuple[int, str], ...]) -> ReplayJob:
        # A new run directory per attempt: never one a killed attempt used (on disk or in the store).
        used = set(runs_by_id.get(sc.id, []))
        attempt = 1
        while (root / f"{sc.id}-a{attempt}").exists() or str(root / f"{sc.id}-a{attempt}") in used:
            attempt += 1
        return ReplayJob(sc, plan, root / f"{sc.id}-a{attempt}", new_run_id(run_id_prefix),
                         inject_delay_ms=inject_delay_ms, rerun_late=rerun_late)

    for sc in scenarios:
        store.ensure_scenario(suite, sweep, sc.id, sc.label, sc.settings())
        done = store.done_loads(suite, sweep, sc.id)
        plan = tuple((rep, scheme) for rep in range(sc.repetitions) for scheme in sc.schemes
                     if (scheme, rep) not in done)
        summary.skipped += len(sc.schemes) * sc.repetitions - len(plan)
        if not plan:
            store.set_status(suite, sweep, sc.id, "complete")
            continue
        jobs.append(new_job(sc, plan))

    total = sum(len(j.plan) for j in jobs)
    console.print(f"suite {suite} (sweep {sweep}): {len(scenarios)} scenario(s), {total} load(s) to run, "
                  f"{summary.skipped} recorded already; store {store.path}")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=False)
    overall = progress.add_task("all loads", total=total)
    per_job = {id(j): progress.add_task(f"  {j.scenario.label}", total=len(j.plan), start=False) for j in jobs}

    def on_load(job: ReplayJob, record: LoadRecord) -> None:
        sc = job.scenario
        row = LoadRow.from_record(record, suite=suite, sweep=sweep, scenario_id=sc.id, label=sc.label,
                                  run_dir=str(job.run_dir), recorded_unix_s=time.time(),
                                  airtime=_airtime_or_none(job.run_dir, record))
        if store.record_load(row):
            summary.recorded += 1
            summary.late_reruns += row.late_reruns
            summary.timing_flagged += row.timing_ok is False
        outcome = (f"PLT {row.plt_ms:,.0f} ms" if row.ok and row.plt_ms is not None
                   else f"[red]failed: {row.error}[/red]")
        if row.late_reruns:
            outcome += f" (after {row.late_reruns} rerun(s): the emulator fell behind)"
        if row.timing_ok is False:
            outcome += (f" [yellow]timing flagged: the emulator fell behind (subframe lateness max "
                        f"{row.subframe_late_max_ms} ms, delivery error max {row.delivery_err_max_ms} ms)[/yellow]")
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

    lost: dict[str, int] = {}

    def rerun(job: ReplayJob, why: str) -> ReplayJob | None:
        """A new job for the missing loads of ``job``'s scenario, whose worker or node died
        (Ray): its leftovers removed by its ledger (when this machine sees it), the scenario
        marked running with the new run directory; None after :data:`RERUNS_ON_LOSS` losses
        or when nothing is missing."""
        sc = job.scenario
        lost[sc.id] = lost.get(sc.id, 0) + 1
        ledger = job.run_dir / "ledger.jsonl"
        if ledger.is_file():
            import clawbed.claw.server.loader  # noqa: F401 — registers the cleanup of BPF pins, mounts, qdiscs
            from clawbed.netns import cleanup_from_ledger

            cleanup_from_ledger(ledger)
        done = store.done_loads(suite, sweep, sc.id)
        plan = tuple((r, s) for r, s in job.plan if (s, r) not in done)
        if not plan or lost[sc.id] > RERUNS_ON_LOSS:
            return None
        runs_by_id.setdefault(sc.id, []).append(str(job.run_dir))
        again = new_job(sc, plan)
        per_job[id(again)] = per_job[id(job)]
        summary.lost_workers += 1
        progress.console.print(f"[yellow]scenario {sc.label} ({sc.id}): {why}; its {len(plan)} missing load(s) "
                               f"run again in {again.run_dir.name}, on another node if there is one[/yellow]")
        store.set_status(suite, sweep, sc.id, "running", run_dir=str(again.run_dir), owner_pid=os.getpid())
        return again

    def on_node(job: ReplayJob, node_id: str) -> None:
        progress.console.print(f"  {job.scenario.label}: {job.run_dir.name} runs on Ray node {node_id}")

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
            if getattr(executor, "reruns_lost_jobs", False):
                executor.run(started(jobs), on_load, on_done, rerun=rerun,  # type: ignore[call-arg]
                             on_node=on_node)
            else:
                executor.run(started(jobs), on_load, on_done)
    except KeyboardInterrupt:
        for job in jobs:
            rows = store.scenarios(suite=suite, sweep=sweep)
            if any(r["scenario_id"] == job.scenario.id and r["status"] == "running" for r in rows):
                store.set_status(suite, sweep, job.scenario.id, "pending", error="interrupted")
        raise
    return summary
