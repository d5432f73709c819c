"""Running ``clawbed-emu``: start it for a config, wait until it is ready, pause, resume, stop.

The binary prints one ``ready {json}`` line on stdout once its TUN devices, diag listeners
and output files exist, and ``counters {json}`` when it stops (SIGINT/SIGTERM, or the end of
``duration_s``); SIGUSR1 pauses its clock and SIGUSR2 resumes it; SIGHUP plays the traces
from the trace time written in ``<output_dir>/seek`` on (:meth:`Emulator.seek`); exit code 2
means a bad config or trace (nothing was created). Its stderr goes to ``<output_dir>/emulator.log``.

The process is an :class:`~clawbed.netns.OwnedProcess` of the run's ``Resources`` stack, so
closing the stack stops it (by PID) even when :meth:`Emulator.stop` was never reached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from clawbed.emulator.config import EmulatorConfig
from clawbed.emulator.diag import diag_file
from clawbed.emulator.topology import CellTopology
from clawbed.errors import ClawbedError
from clawbed.files import atomic_write
from clawbed.netns import OwnedProcess, Resources, new_run_id
from clawbed.paths import REPO_ROOT

#: The emulator binary: ``$CLAWBED_EMU`` if set (a candidate build under test or
#: measurement), else the release build in the repository.
BINARY = Path(os.environ.get("CLAWBED_EMU") or REPO_ROOT / "target" / "release" / "clawbed-emu")
#: Lines of the emulator's stderr quoted in an error.
STDERR_TAIL_LINES = 12
#: Exit code of the binary for a bad config or trace.
EXIT_BAD_INPUT = 2
#: The file SIGHUP reads a trace time from, in the output directory (``SEEK_FILE`` in
#: ``dataplane/src/engine.rs``); the emulator removes it once applied, or renames it
#: ``seek.rejected``.
SEEK_FILE = "seek"
#: Longest a seek may take to apply, s (the cell thread looks at its signals every subframe,
#: or every 10 ms while idle).
SEEK_TIMEOUT_S = 2.0
#: How often :meth:`Emulator.seek` looks whether the seek was applied, s.
SEEK_POLL_S = 0.001


class EmulatorError(ClawbedError):
    """The emulator is missing, refused its input, died or did not become ready; the message
    includes its exit code and the end of its stderr when there are any."""


class Emulator:
    """One ``clawbed-emu`` process for ``config``, owned by ``res``.

    >>> with Emulator(res, config) as emu:      # started and ready
    ...     port = emu.diag_port(0)
    ...     ...
    >>> emu.counters                             # what it counted, after it stopped
    """

    def __init__(self, res: Resources, config: EmulatorConfig, *, binary: Path | None = None,
                 ready_timeout_s: float = 15.0) -> None:
        self.res = res
        self.config = config
        self.binary = binary or BINARY
        self.ready_timeout_s = ready_timeout_s
        self.output_dir = config.output_dir.resolve()
        self.config_path = self.output_dir / "emulator.json"
        self.log_path = self.output_dir / "emulator.log"
        #: The ``ready`` line's object (pid, core, ues with diag ports, output_dir, origin_unix_ns).
        self.ready: dict[str, Any] = {}
        #: The ``counters`` line's object, once the emulator stopped.
        self.counters: dict[str, Any] | None = None
        self._proc: OwnedProcess | None = None
        self._ready_seen = threading.Event()
        self._stdout_done = threading.Event()
        self._stop_requested = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Emulator:
        """Write the config, start the binary, and return once it printed ``ready``."""
        if self._proc is not None:
            raise EmulatorError("this emulator was already started")
        if not self.binary.is_file():
            raise EmulatorError(f"emulator binary {self.binary} not found: run `make build` "
                                "(or `cargo build --release -p emulator`) first")
        self.config.write(self.config_path)
        # A fresh log per start: an error quotes this run's stderr, not an earlier one's.
        self.log_path.write_bytes(b"")
        self._proc = self.res.process([str(self.binary), "--config", str(self.config_path)], name="clawbed-emu",
                                      log_path=self.log_path, stdout=subprocess.PIPE)
        threading.Thread(target=self._read_stdout, name="clawbed-emu-stdout", daemon=True).start()
        self._wait_ready()
        return self

    def _read_stdout(self) -> None:
        """Collect the ``ready`` and ``counters`` lines (on a thread: the pipe must never fill)."""
        assert self._proc is not None and self._proc.popen.stdout is not None
        try:
            for raw in self._proc.popen.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                kind, _, payload = line.partition(" ")
                if kind == "ready" and not self._ready_seen.is_set():
                    self.ready = json.loads(payload)
                    self._ready_seen.set()
                elif kind == "counters":
                    self.counters = json.loads(payload)
        finally:
            self._stdout_done.set()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.ready_timeout_s
        # Stdout closing before `ready` means the process died: stop waiting at once then.
        while not self._ready_seen.wait(0.02):
            if self._stdout_done.is_set():
                self._raise_exited("before it was ready")
            if time.monotonic() > deadline:
                self._proc.close()
                raise EmulatorError(f"clawbed-emu did not print `ready` within {self.ready_timeout_s} s; "
                                    f"stopped it.{self._stderr_tail()}")

    @property
    def running(self) -> bool:
        """Whether the emulator was started and has not exited."""
        return self._proc is not None and self._proc.alive()

    def check_alive(self) -> None:
        """Raise :class:`EmulatorError` (exit code, stderr tail) if the emulator has exited."""
        if self._proc is None:
            raise EmulatorError("the emulator was not started")
        if not self._proc.alive():
            self._raise_exited("while running")

    def _raise_exited(self, when: str) -> None:
        assert self._proc is not None
        code = self._proc.popen.wait()
        self._proc.close()
        what = ("rejected its config or trace" if code == EXIT_BAD_INPUT
                else f"was killed by signal {-code}" if code < 0 else "exited")
        raise EmulatorError(f"clawbed-emu {what} (exit code {code}) {when}; config {self.config_path}."
                            f"{self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-STDERR_TAIL_LINES:]
        except OSError:
            return ""
        return ("\n  stderr: " + "\n          ".join(lines)) if lines else " (stderr was empty)"

    def pause(self) -> None:
        """Freeze the emulated clock (SIGUSR1): no subframe runs, nothing is delivered."""
        self._signal(signal.SIGUSR1)

    def resume(self) -> None:
        """Continue from where :meth:`pause` stopped (SIGUSR2)."""
        self._signal(signal.SIGUSR2)

    def seek(self, trace_ms: int, timeout_s: float = SEEK_TIMEOUT_S) -> None:
        """Play the traces from trace time ``trace_ms`` on (each UE's from its own offset, looping
        as configured), from the emulator's next subframe: the channel and the other users
        jump there, queues and timers run on. Returns once the emulator has applied it."""
        if trace_ms < 0:
            raise ValueError(f"trace time {trace_ms} ms: must be >= 0")
        path = self.output_dir / SEEK_FILE
        rejected = path.with_name(SEEK_FILE + ".rejected")
        rejected.unlink(missing_ok=True)
        with atomic_write(path, "w") as f:
            f.write(f"{trace_ms}\n")
        self._signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout_s
        while path.exists():
            self.check_alive()
            if time.monotonic() > deadline:
                raise EmulatorError(f"clawbed-emu did not apply the seek to trace time {trace_ms} ms within "
                                    f"{timeout_s:g} s ({path} is still there).{self._stderr_tail()}")
            time.sleep(SEEK_POLL_S)
        if rejected.exists():
            raise EmulatorError(f"clawbed-emu refused the seek to trace time {trace_ms} ms ({rejected})."
                                f"{self._stderr_tail()}")

    def flush_records(self) -> None:
        """Ask the recorder to write the ground truth and packet log it holds now (SIGRTMIN)
        instead of at the next full one-second chunk; returns at once."""
        self._signal(signal.SIGRTMIN)

    def interrupt(self) -> None:
        """Send SIGINT, as a Ctrl-C would; :meth:`stop` then waits for the clean exit."""
        self._signal(signal.SIGINT)
        self._stop_requested = True

    def _signal(self, sig: signal.Signals) -> None:
        self.check_alive()
        assert self._proc is not None
        self._proc.popen.send_signal(sig)

    def stop(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """Stop the emulator (SIGTERM; SIGKILL after ``timeout_s``) and return its counters.

        An emulator that already ended by itself (``duration_s``) is fine; one that failed,
        or had to be killed, raises :class:`EmulatorError`.
        """
        if self._proc is None:
            raise EmulatorError("the emulator was not started")
        popen = self._proc.popen
        # One stop signal only: the emulator takes a second one as "exit now, skip the flush".
        if popen.poll() is None and not self._stop_requested:
            popen.send_signal(signal.SIGTERM)
            self._stop_requested = True
        killed = False
        try:
            popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
            killed = True
        code = self._proc.close()
        self._stdout_done.wait(timeout_s)
        if code != 0 or self.counters is None:
            reason = (f"did not stop within {timeout_s} s and was killed" if killed
                      else f"was killed by signal {-code}" if code is not None and code < 0
                      else f"exited with code {code}" if code else "printed no counters")
            raise EmulatorError(f"clawbed-emu {reason}; config {self.config_path}.{self._stderr_tail()}")
        return self.counters

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise EmulatorError("the emulator was not started")
        return self._proc.pid

    # -- what it made ------------------------------------------------------------------------

    def diag_port(self, ue: int) -> int:
        """TCP port of UE ``ue``'s diag feed (on 127.0.0.1 inside the UE's namespace)."""
        return int(self.ready["ues"][ue]["diag_port"])

    @property
    def truth_path(self) -> Path:
        return self.output_dir / "truth.cbcol"

    @property
    def packets_path(self) -> Path:
        return self.output_dir / "packets.cbcol"

    def diag_path(self, ue: int) -> Path:
        return diag_file(self.output_dir, ue)

    # -- context manager ---------------------------------------------------------------------

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.stop()
        elif self._proc is not None:
            # Already failing: stop it without masking the original error.
            self._proc.close()


class EmulatedCell:
    """A whole emulated cell in one ``with``: its ``Resources`` stack (ledger in
    ``output_dir``), the :class:`CellTopology` of ``n_ues`` UEs, the config, and the running
    :class:`Emulator`. Leaving the block stops the emulator (its counters are then in
    :attr:`counters`) and removes every namespace, also on error or Ctrl-C.

    >>> with EmulatedCell(2, out, ue={"rate": "12mbit"}, mode="rate") as cell:
    ...     cell.topo.ues[0].run(["ping", "-c", "3", str(cell.topo.server_address)])
    >>> cell.counters["engine"]["ues"][0]["downlink"]["delivered"]
    """

    def __init__(self, n_ues: int, output_dir: Path | str, *, ue: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
                 run_id: str | None = None, binary: Path | None = None, ready_timeout_s: float = 15.0,
                 topology: Callable[[Resources, int], CellTopology] = CellTopology, **fields: Any) -> None:
        """``topology`` makes the network (``replay.network.Topology`` for one that can
        also have a wired side); the other keywords are the emulator config's."""
        self.n_ues = n_ues
        self.output_dir = Path(output_dir).resolve()
        self.run_id = run_id or new_run_id()
        self._ue = ue
        self._fields = fields
        self._binary = binary
        self._ready_timeout_s = ready_timeout_s
        self._topology = topology
        self.res = Resources(self.run_id, self.output_dir / "ledger.jsonl")
        #: Set once entered.
        self.topo: CellTopology
        self.config: EmulatorConfig
        self.emulator: Emulator
        #: The emulator's counters once it stopped.
        self.counters: dict[str, Any] | None = None
        self._stop_attempted = False

    def __enter__(self) -> EmulatedCell:
        self.res.__enter__()
        try:
            self.topo = self._topology(self.res, self.n_ues)
            self.config = EmulatorConfig.for_topology(self.topo, output_dir=self.output_dir, ue=self._ue, **self._fields)
            self.emulator = Emulator(self.res, self.config, binary=self._binary,
                                     ready_timeout_s=self._ready_timeout_s).start()
        except BaseException:
            self.res.__exit__(*sys.exc_info())
            raise
        return self

    def stop(self) -> dict[str, Any]:
        """Stop the emulator (the namespaces stay until the block ends) and return its counters.

        Raises :class:`EmulatorError` if it failed; the block's end then does not ask again.
        """
        if self.counters is None:
            self._stop_attempted = True
            self.counters = self.emulator.stop()
        return self.counters

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        try:
            if exc_type is None and not self._stop_attempted:
                self.stop()
        finally:
            suppressed = self.res.__exit__(exc_type, exc, tb)
        return bool(suppressed)
