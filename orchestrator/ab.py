"""A/B regression runs on one machine: the candidate against a base revision, interleaved.

``clawbed regress SPEC --against REV`` compares two code versions on the same runner instead
of against a baseline measured elsewhere (whose machine's speed would be in the verdict):

1. **The base's own build** (:func:`prepare_tree`): ``git worktree add --detach`` of the base
   commit under ``<state>/ab/<commit>/tree``, cached by commit; there, its own
   ``cargo build --release --locked`` (its own ``target/``, first seeded with this tree's
   compiled dependencies so only the workspace's crates compile) and its own BPF objects
   (``claw/bpf/build.sh``). Its Python code runs from that tree: ``<state>/ab/<commit>/py``
   holds a ``clawbed`` package made of links to the tree's folders (the distribution's
   ``package-dir`` map, read from the tree's own ``pyproject.toml``), put first on
   ``PYTHONPATH``, so the base's modules — and every Python process they start — are the
   base's; this venv's third-party packages serve both sides (``requirements.lock`` rarely
   changes; when the base pins others, :class:`BuiltTree` says so and the run warns).
2. **One side process each** (``orchestrator/ab_side.py``, run as a script so the base need not
   have it): each reads "run round r of scenario L" requests and runs them with *its own*
   ``clawbed.orchestrator.runner.replay_job``, sending each load's record back.
3. **Interleaved by round**: for each repetition r, for each scenario, the two sides one after
   the other (which goes first alternates), each a replay of that round's loads. Both sides
   plan round r with the scenario's repetition count, so both start its loads at the same
   trace time (``ReplayConfig.round_trace_ms``): the same trace stretch and the same seed, the
   pairing the paired check (:mod:`clawbed.orchestrator.regress`) needs. Slow drift of the
   machine (another job starting) hits both sides alike.

The candidate is this working tree (its ``HEAD`` plus any uncommitted change, recorded as
such) or, with ``--candidate REV``, another commit built the same way as the base. Both sides'
loads go into the result store as sweeps ``<sweep>/base`` and ``<sweep>/candidate``; the
verdict per scenario is :func:`regress.compare` of the two; ``ab.json`` in the run folder
records both commits, the machine, and the verdicts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from clawbed.errors import ClawbedError, InputError
from clawbed.paths import REPO_ROOT, state_dir

#: The script each side runs (by path, so the base revision need not contain it).
SIDE_SCRIPT = Path(__file__).resolve().parent / "ab_side.py"
#: Environment variables that would point one side at the other's builds: dropped for both
#: sides, so each uses its own tree's emulator and BPF objects.
BUILD_OVERRIDES = ("CLAWBED_EMU", "CLAWBED_BPF_DIR")
#: The branch whose merge base with HEAD is the default base (first one that exists).
MAIN_BRANCHES = ("main", "origin/main")
#: How long a side gets to start (imports) and to leave after its last round, s.
SIDE_START_TIMEOUT_S = 120.0
SIDE_EXIT_TIMEOUT_S = 60.0


class BuildError(ClawbedError):
    """A revision could not be checked out or built; names the revision and the log."""


def git(*args: str, repo: Path = REPO_ROOT) -> str:
    """``git -C repo ARGS``'s output, stripped; :class:`InputError` with git's message."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise InputError(f"git {' '.join(args)}: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return done.stdout.strip()


def resolve_commit(rev: str, *, flag: str = "--against", repo: Path = REPO_ROOT) -> str:
    """The full commit id of ``rev``; an error naming ``flag`` when it is not one."""
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", repo=repo)
    except InputError:
        raise InputError(f"{flag} {rev}: not a commit of {repo}") from None


def default_base(repo: Path = REPO_ROOT) -> tuple[str, str]:
    """(revision text, commit): the merge base of HEAD with the main branch."""
    for branch in MAIN_BRANCHES:
        try:
            git("rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}", repo=repo)
        except InputError:
            continue
        commit = git("merge-base", "HEAD", branch, repo=repo)
        return f"merge-base HEAD {branch}", commit
    raise InputError(f"--against: not given, and none of {', '.join(MAIN_BRANCHES)} exists in {repo} to take the "
                     "merge base with (a shallow CI checkout: fetch with depth 0, or give --against REV)")


def worktree_dirty(repo: Path = REPO_ROOT) -> bool:
    """Whether the working tree has changes to tracked files (or new files) beyond HEAD."""
    return bool(git("status", "--porcelain", "--untracked-files=normal", repo=repo))


def ab_root() -> Path:
    """Where base revisions are checked out and built: ``<state>/ab``."""
    return state_dir() / "ab"


@dataclass(frozen=True)
class BuiltTree:
    """A revision's code ready to run: its tree, the Python path that makes its ``clawbed``
    package importable (None: this working tree, through the venv's editable install)."""

    commit: str
    tree: Path
    python_path: Path | None
    #: False when the revision's requirements.lock differs from this venv's (its code runs
    #: with this venv's packages all the same).
    same_requirements: bool = True
    #: Uncommitted changes (the working tree only).
    dirty: bool = False

    @property
    def emulator(self) -> Path:
        return self.tree / "target" / "release" / "clawbed-emu"

    @property
    def cwd(self) -> Path:
        """Where the side runs: never a built tree's root. ``python -m clawbed.…``, which every
        scheme's agents and clients are started with, puts its working folder first on the
        path, where a tree's root offers its bare ``clawbed/`` folder; the venv's editable
        finder then supplies every ``clawbed.<part>`` of *this* working tree (seen: the base's
        CLAW client ran this checkout's code). The revision's own folder holds no package."""
        return self.tree if self.python_path is None else self.python_path.parent

    def describe(self) -> str:
        where = "this working tree" if self.python_path is None else str(self.tree)
        return f"{self.commit[:12]}{' + uncommitted changes' if self.dirty else ''} ({where})"


def working_tree() -> BuiltTree:
    """This checkout as the candidate: its HEAD, dirty or not, run through the venv."""
    return BuiltTree(git("rev-parse", "HEAD"), REPO_ROOT, None, dirty=worktree_dirty())


@contextlib.contextmanager
def _flock(path: Path, mode: int = fcntl.LOCK_EX) -> Iterator[None]:
    """An advisory lock on ``path`` for the block (two regress runs building one commit wait)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f.fileno(), mode)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _run_logged(argv: list[str], cwd: Path, log: IO[str], env: dict[str, str] | None = None) -> int:
    log.write(f"$ {' '.join(argv)}  (in {cwd})\n")
    log.flush()
    return subprocess.run(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def _seed_target(tree: Path, log: IO[str]) -> None:
    """Copy this tree's compiled dependencies (``target/release/{deps,build,.fingerprint}``) into
    the new tree's target, so its build compiles only the workspace's own crates (their
    package paths differ, so cargo builds them afresh; a dependency whose version or flags
    differ is rebuilt by cargo's fingerprints). Under a shared lock on cargo's build lock, so
    no build of this tree writes while we copy."""
    source = REPO_ROOT / "target" / "release"
    dest = tree / "target" / "release"
    if dest.exists() or not source.is_dir():
        return
    staging = tree / "target" / "release.seeding"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with _flock(source / ".cargo-lock", fcntl.LOCK_SH):
        for part in ("deps", "build", ".fingerprint"):
            if (source / part).is_dir():
                shutil.copytree(source / part, staging / part, symlinks=True)
    staging.rename(dest)
    log.write(f"seeded {dest} with {source}'s compiled dependencies\n")


def _python_shim(tree: Path, out: Path) -> None:
    """``out/clawbed``: the tree's ``clawbed`` package as the distribution maps it — each
    ``clawbed.<part>`` a link to the tree's folder (``[tool.setuptools.package-dir]`` of the
    tree's own pyproject.toml), everything in the tree's ``clawbed/`` linked beside them."""
    try:
        package_dir = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as e:
        raise BuildError(f"{tree / 'pyproject.toml'}: no [tool.setuptools.package-dir] to map the package by ({e})") \
            from None
    staging = out.with_name(out.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    pkg = staging / "clawbed"
    pkg.mkdir(parents=True)
    top = package_dir.get("clawbed", "clawbed")
    for entry in (tree / top).iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, folder in package_dir.items():
        if name == "clawbed":
            continue
        if not name.startswith("clawbed.") or "." in name[len("clawbed."):]:
            raise BuildError(f"{tree / 'pyproject.toml'}: package-dir {name!r}: only clawbed.<part> is mapped")
        link = pkg / name[len("clawbed."):]
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(tree / folder)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


def prepare_tree(commit: str, *, say: Callable[[str], None] = print) -> BuiltTree:
    """The revision ``commit`` checked out and built under ``<state>/ab/<commit[:12]>``
    (reused when built before). Raises :class:`BuildError` naming the build log."""
    root = ab_root() / commit[:12]
    tree, py, marker, log_path = root / "tree", root / "py", root / "built.json", root / "build.log"
    with _flock(root.with_name(root.name + ".lock")):
        if marker.is_file():
            built = json.loads(marker.read_text())
            if built.get("commit") == commit and (tree / "target" / "release" / "clawbed-emu").is_file():
                return BuiltTree(commit, tree, py, same_requirements=bool(built.get("same_requirements", True)))
        root.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        say(f"building {commit[:12]} in {tree} (log: {log_path}); cached for the next run")
        with open(log_path, "a") as log:
            if not (tree / ".git").exists():
                git("worktree", "prune")  # a tree removed by hand leaves its registration behind
                git("worktree", "add", "--detach", str(tree), commit)
            elif git("rev-parse", "HEAD", repo=tree) != commit:
                raise BuildError(f"{tree} is checked out at another commit than {commit[:12]}: remove {root} "
                                 "(and `git worktree prune`) to rebuild it")
            _seed_target(tree, log)
            env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"}
            if _run_logged(["cargo", "build", "--release", "--locked"], tree, log, env) != 0:
                raise BuildError(f"cargo build of {commit[:12]} failed: see {log_path}")
            if _run_logged(["bash", "claw/bpf/build.sh", str(tree / "target" / "bpf")], tree, log) != 0:
                raise BuildError(f"the BPF objects of {commit[:12]} did not build: see {log_path}")
        _python_shim(tree, py)
        same = _read_bytes(tree / "requirements.lock") == _read_bytes(REPO_ROOT / "requirements.lock")
        marker.write_text(json.dumps({"commit": commit, "built_unix_s": round(time.time(), 3),
                                      "build_s": round(time.monotonic() - started, 1),
                                      "same_requirements": same}) + "\n")
        say(f"built {commit[:12]} in {time.monotonic() - started:.0f} s")
        return BuiltTree(commit, tree, py, same_requirements=same)


def remove_tree(commit: str) -> None:
    """Forget a built revision: its worktree (``git worktree remove``) and its cache folder."""
    root = ab_root() / commit[:12]
    with _flock(root.with_name(root.name + ".lock")):
        if (root / "tree" / ".git").exists():
            git("worktree", "remove", "--force", str(root / "tree"))
        shutil.rmtree(root, ignore_errors=True)
    root.with_name(root.name + ".lock").unlink(missing_ok=True)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


# -- the side processes -------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundRequest:
    """One round of one scenario for a side (what ``ab_side.py`` reads, one JSON line)."""

    spec: str
    label: str
    repetition: int
    run_dir: str
    run_id: str
    inject_delay_ms: float = 0.0
    rerun_late: bool = True


#: What a side's child processes import, printed as JSON by ``python -c`` run as they are run.
_CHILD_PROBE = """
import importlib, json, pathlib, sys
out = {}
for name in ("clawbed", "clawbed.claw", "clawbed.emulator", "clawbed.replay", "clawbed.orchestrator",
             "clawbed.traces", "clawbed.dashboards"):
    try:
        out[name] = str(pathlib.Path(importlib.import_module(name).__file__).resolve().parent)
    except ImportError:
        pass
json.dump(out, sys.stdout)
"""


def child_packages(built: BuiltTree) -> dict[str, Path]:
    """Where a process a side starts (same environment and working folder) imports each
    ``clawbed`` package from."""
    done = subprocess.run([sys.executable, "-c", _CHILD_PROBE], env=side_env(built), cwd=built.cwd,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ClawbedError(f"importing the {built.commit[:12]} side's clawbed in a child process: "
                           f"{done.stderr.strip()[-500:]}")
    return {name: Path(folder) for name, folder in json.loads(done.stdout).items()}


def side_env(built: BuiltTree) -> dict[str, str]:
    """The environment of a side's process: its own builds, its own Python package."""
    env = {k: v for k, v in os.environ.items() if k not in BUILD_OVERRIDES}
    if built.python_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(built.python_path), *filter(None, [env.get("PYTHONPATH")])])
        env.pop("CLAWBED_STATE", None)  # the base's caches in its own tree's .state
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a cached tree stays as checked out
    return env


class Side:
    """One side's process (``ab_side.py`` under that side's code): rounds in, records out."""

    def __init__(self, name: str, built: BuiltTree, log_path: Path) -> None:
        self.name = name
        self.built = built
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a")
        # -P: the script's folder stays off sys.path (its modules would shadow installed ones).
        self.proc = subprocess.Popen([sys.executable, "-P", str(SIDE_SCRIPT)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, env=side_env(built),
                                     cwd=str(built.cwd))
        self.log_path = log_path
        hello = self._message()
        where = Path(hello.get("ready", {}).get("clawbed", "/")).resolve()
        if not where.is_relative_to(built.tree.resolve()):
            self.close()
            raise ClawbedError(f"the {name} side imported clawbed from {where}, not from {built.tree}: "
                               "its code would not be its own")
        # Its children too (the agents and clients a scheme starts with python -m).
        strays = {p: w for p, w in child_packages(built).items() if not w.is_relative_to(built.tree.resolve())}
        if strays:
            self.close()
            raise ClawbedError(f"a process the {name} side starts would import "
                               + ", ".join(f"{p} from {w}" for p, w in sorted(strays.items()))
                               + f", not from {built.tree}: its code would not be its own")

    def _message(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=SIDE_EXIT_TIMEOUT_S)
            raise ClawbedError(f"the {self.name} side ({self.built.describe()}) ended (exit status "
                               f"{self.proc.returncode}): see {self.log_path}")
        try:
            message: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            raise ClawbedError(f"the {self.name} side wrote {line[:200]!r}, not a JSON message: see "
                               f"{self.log_path}") from None
        return message

    def request(self, request: dict[str, Any], on_load: Callable[[dict[str, Any]], None] | None = None) -> str | None:
        """Send one request (a round, or a determinism run); ``on_load(record as a dict)`` per
        load as it ends; the request's error (the replay failed), None when it ran to the end."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        while True:
            message = self._message()
            if "load" in message and on_load is not None:
                on_load(message["load"])
            elif "done" in message:
                return message["done"]

    def close(self) -> None:
        """Ask the side to leave (end of its input), wait; terminate it by its pid if it does not."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=SIDE_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=SIDE_EXIT_TIMEOUT_S)
        self._log.close()


def record_fields(record: dict[str, Any]) -> dict[str, Any]:
    """A side's record, cut to the fields this version's ``LoadRecord`` has (the base's may
    have more or fewer)."""
    from clawbed.replay.records import LoadRecord

    known = {f.name for f in fields(LoadRecord)}
    return {k: v for k, v in record.items() if k in known}


def machine_fingerprint() -> dict[str, Any]:
    """What makes one machine's PLTs another's: CPU model and count, kernel, preemption model
    (``clawbed doctor``'s reading)."""
    from clawbed import doctor

    model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    facts = doctor.collect(sample_s=0)
    return {"cpu_model": model or platform.processor() or None, "cpus": os.cpu_count(),
            "kernel": platform.release(), "preemption": facts.preempt_model}


def fingerprint_differences(recorded: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """``key: recorded → here`` for every fingerprint key whose value differs."""
    return [f"{k}: {recorded.get(k)!r} → {here.get(k)!r}" for k in sorted(set(recorded) | set(here))
            if recorded.get(k) != here.get(k)]


@dataclass
class AbPlan:
    """What an A/B run does: the spec, the two sides, where its runs and store rows go."""

    spec_path: Path
    base: BuiltTree
    candidate: BuiltTree
    sweep: str
    root: Path
    #: Slow the candidate side down on purpose (``--inject-delay-ms``): to see the check fail.
    inject_delay_ms: float = 0.0
    rerun_late: bool = True
    run_id_prefix: str = ""
    #: Only the scenarios of these labels (empty: all).
    labels: list[str] = field(default_factory=list)


@dataclass
class AbSummary:
    """What an A/B run did: loads recorded per side, rounds that failed (side, label, round, why)."""

    loads: dict[str, int] = field(default_factory=lambda: {"base": 0, "candidate": 0})
    late_reruns: dict[str, int] = field(default_factory=lambda: {"base": 0, "candidate": 0})
    failed_rounds: list[tuple[str, str, int, str]] = field(default_factory=list)
    wall_s: float = 0.0


SIDES = ("base", "candidate")


def side_sweep(sweep: str, side: str) -> str:
    """The store's sweep of one side of the A/B run ``sweep``."""
    return f"{sweep}/{side}"


def run_ab(plan: AbPlan, store: Any, *, say: Callable[[str], None] = print) -> AbSummary:
    """Run the spec's scenarios on both sides, interleaved round by round, into ``store`` (a
    :class:`clawbed.orchestrator.store.Store`) under :func:`side_sweep`; every load printed
    with ``say`` as it ends. A round that fails on one side is recorded and the run goes on
    (the check then sees fewer pairs)."""
    from clawbed.orchestrator.runner import new_run_id
    from clawbed.orchestrator.spec import load_spec
    from clawbed.orchestrator.store import LoadRow
    from clawbed.replay.records import LoadRecord

    spec = load_spec(plan.spec_path)
    scenarios = [s for s in spec.scenarios() if not plan.labels or s.label in plan.labels]
    summary = AbSummary()
    started = time.monotonic()
    trees = {"base": plan.base, "candidate": plan.candidate}
    for side in SIDES:
        for sc in scenarios:
            store.ensure_scenario(spec.name, side_sweep(plan.sweep, side), sc.id, sc.label, sc.settings())
    sides: dict[str, Side] = {}
    try:
        for side in SIDES:
            sides[side] = Side(side, trees[side], plan.root / f"{side}.log")
        rounds = max(s.repetitions for s in scenarios)
        for r in range(rounds):
            for index, sc in enumerate(scenarios):
                if r >= sc.repetitions:
                    continue
                # Who goes first alternates, so neither side always meets the warmer machine.
                order = SIDES if (r + index) % 2 == 0 else SIDES[::-1]
                for side in order:
                    run_dir = plan.root / side / f"{sc.id}-r{r:03d}"
                    request = RoundRequest(spec=str(plan.spec_path.resolve()), label=sc.label, repetition=r,
                                           run_dir=str(run_dir), run_id=new_run_id(plan.run_id_prefix),
                                           inject_delay_ms=plan.inject_delay_ms if side == "candidate" else 0.0,
                                           rerun_late=plan.rerun_late)

                    def on_load(raw: dict[str, Any], side: str = side, sc: Any = sc, run_dir: Path = run_dir,
                                r: int = r) -> None:
                        record = LoadRecord(**record_fields(raw))
                        row = LoadRow.from_record(record, suite=spec.name, sweep=side_sweep(plan.sweep, side),
                                                  scenario_id=sc.id, label=sc.label, run_dir=str(run_dir),
                                                  recorded_unix_s=time.time())
                        if store.record_load(row):
                            summary.loads[side] += 1
                            summary.late_reruns[side] += row.late_reruns
                        outcome = (f"PLT {row.plt_ms:,.0f} ms" if row.ok and row.plt_ms is not None
                                   else f"failed: {row.error}")
                        if row.timing_ok is False:
                            outcome += " (timing flagged: the emulator fell behind)"
                        say(f"  round {r} {sc.label} {side:<9} {row.scheme:<6} trace {row.trace_ms} ms: {outcome}")

                    error = sides[side].request(asdict(request), on_load)
                    if error:
                        summary.failed_rounds.append((side, sc.label, r, error))
                        say(f"  round {r} {sc.label} {side}: failed: {error}")
        for sc in scenarios:
            for side in SIDES:
                store.set_status(spec.name, side_sweep(plan.sweep, side), sc.id, "complete")
    finally:
        for s in sides.values():
            s.close()
        summary.wall_s = round(time.monotonic() - started, 1)
    return summary


def write_result(path: Path, plan: AbPlan, summary: AbSummary, comparisons: list[Any], threshold: float,
                 determinism: dict[str, Any] | None) -> None:
    """``ab.json``: both sides' commits, the machine, the run's counts and every verdict."""
    doc = {"spec": str(plan.spec_path), "sweep": plan.sweep, "created_unix_s": round(time.time(), 3),
           "base": {"commit": plan.base.commit, "tree": str(plan.base.tree),
                    "same_requirements": plan.base.same_requirements},
           "candidate": {"commit": plan.candidate.commit, "dirty": plan.candidate.dirty, "tree": str(plan.candidate.tree),
                         "same_requirements": plan.candidate.same_requirements,
                         "inject_delay_ms": plan.inject_delay_ms},
           "machine": machine_fingerprint(), "threshold": threshold, "wall_s": summary.wall_s,
           "loads": summary.loads, "late_reruns": summary.late_reruns,
           "failed_rounds": [list(f) for f in summary.failed_rounds],
           "comparisons": [asdict(c) for c in comparisons], "determinism": determinism}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
