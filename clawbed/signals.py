"""Signal dispositions for clawbed and the processes it starts.

A process started with a signal ignored (``nohup`` ignores SIGHUP; ``&`` in a non-interactive
shell ignores SIGINT) passes that on: an ignored signal stays ignored across ``exec``, while a
handled one reverts to its default. So a run started in the background would start children
(an interactive shell, a traffic generator) that a stop by SIGINT or SIGHUP cannot stop, and
its own Ctrl-C handling would never run. :func:`restore_default_signals` gives the process
handlers for both signals, which makes every child start with the default dispositions:

- SIGINT always interrupts the run like a Ctrl-C (clean teardown, every finished load kept);
- SIGHUP, when the process was started with it ignored (``nohup``), stays without effect on
  the process itself, which is what the user asked ``nohup`` for; otherwise it unwinds the run
  like SIGINT, so a closed terminal still removes what the run made.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A handled no-op: ignored here, default again in every child after ``exec``."""


def interrupt_handler(owner_pid: int) -> Callable[[int, FrameType | None], None]:
    """A handler that unwinds the owner process like Ctrl-C, and in a forked copy (which
    inherits handlers, e.g. pyroute2's helpers) simply ends it as the default action would."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner_pid:
            os._exit(128 + signum)  # a forked copy (no exec) just ends, as the default would
        raise KeyboardInterrupt(f"signal {signum}")

    return handler


def restore_default_signals() -> None:
    """Install the dispositions above (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    hup = signal.getsignal(signal.SIGHUP)
    if hup == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _ignore)
    elif hup == signal.SIG_DFL:
        signal.signal(signal.SIGHUP, interrupt_handler(os.getpid()))
