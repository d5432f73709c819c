"""BBR (v1, Linux bbr): model-based, paced — the kernel's ``bbr``, nothing beside it."""

from __future__ import annotations

from clawbed.claw.schemes.base import KernelScheme, register_scheme


@register_scheme
class Bbr(KernelScheme):
    name = "bbr"
    description = "BBR (v1, Linux bbr): model-based, paced"
