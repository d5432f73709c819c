"""Cubic, Linux's default: the baseline CLAW is compared with — the kernel's ``cubic``, nothing beside it."""

from __future__ import annotations

from clawbed.claw.schemes.base import KernelScheme, register_scheme


@register_scheme
class Cubic(KernelScheme):
    name = "cubic"
    description = "Cubic, Linux's default: the baseline CLAW is compared with"
