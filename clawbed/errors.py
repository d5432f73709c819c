"""Errors that reach the user: each says what was being attempted and on which input."""


class ClawbedError(Exception):
    """Base of every error clawbed reports to the user as a one-line message (no traceback)."""


class InputError(ClawbedError):
    """Bad user input: a file, a line, a field or a flag. The message names which."""


class ResourceError(ClawbedError):
    """A system call on a namespace, link or process failed; the message says which and why."""
