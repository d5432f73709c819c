"""NewReno (Linux reno): AIMD — the kernel's ``reno``, nothing beside it."""

from __future__ import annotations

from clawbed.claw.schemes.base import KernelScheme, register_scheme


@register_scheme
class Reno(KernelScheme):
    name = "reno"
    description = "NewReno (Linux reno): AIMD"
