"""Limits and defaults of the client's settings, in a module without heavy imports: the
command line (:mod:`.cli`) checks them before it chooses which client runs."""

#: Most often feedback can be sent: every subframe, ms.
MIN_FEEDBACK_PERIOD_MS = 1
#: Least often: the feedback's longest window, ms.
MAX_FEEDBACK_PERIOD_MS = 10_000
#: Default time without a scheduled subframe after which the radio counts as idle, ms.
DEFAULT_IDLE_TIMEOUT_MS = 10_000
#: Default diag feed port (the emulator's default, ``clawbed.emulator.config.DEFAULT_DIAG_PORT``).
DEFAULT_DIAG_PORT = 5775
#: Feed formats: the JSON lines, or the diag byte stream (``.mi2log`` framing).
FEEDS = ("json", "mi2log")
#: The estimators (``analyzer.Variant``'s values; the first is the default).
VARIANTS = ("claw", "cqic")
#: LTE cell sizes, RBs (``clawbed.lte.VALID_N_RB``, sorted; a test holds them equal).
CELL_SIZES_RB = (6, 15, 25, 50, 75, 100)
