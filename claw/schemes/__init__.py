"""Transport schemes behind one interface (:mod:`.base`): ``cubic``, ``reno``, ``bbr``,
``claw``, ``cqic``, ``vegas`` (one file each). Every module of this package is imported here, so a new scheme is one
new file with a :func:`~.base.register_scheme` class."""

from __future__ import annotations

import importlib
import pkgutil

from clawbed.claw.schemes.base import (
    SCHEMES,
    ClientAgent,
    Scheme,
    SchemeContext,
    UeEndpoint,
    get_scheme,
    register_scheme,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["SCHEMES", "ClientAgent", "Scheme", "SchemeContext", "UeEndpoint", "get_scheme", "register_scheme"]
