"""The cell's pluggable policies as the emulator binary lists them.

``policies.json`` beside this file is the cell crate's policy registry as
``clawbed-emu --list-policies --json`` prints it; a Rust test keeps the two equal
(``CLAWBED_BLESS=1 cargo test -p emulator --lib config`` rewrites the file). A scheduler,
queue policy, loss model, RRC/DRX model or stall process added in the cell crate therefore reaches the emulator's config
model, the CLIs' choices and the specs' validation through this file alone. Light on
purpose (no pydantic): CLIs read it to build their choices.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Each category (``scheduler``, ``queue``, ``loss``, ``rrc``, ``stall``): its config key, default, summary and
#: policies (name, summary, parameter schema: name, type, min, max, default, doc).
POLICIES: dict[str, dict[str, Any]] = {
    c["category"]: c for c in json.loads(Path(__file__).with_name("policies.json").read_text())
}


def policy_names(category: str) -> tuple[str, ...]:
    """The names of the policies of ``category`` (``scheduler``, ``queue``, ``loss``)."""
    return tuple(p["name"] for p in POLICIES[category]["policies"])


def default_policy(category: str) -> str:
    """The policy of ``category`` the binary runs when the config names none."""
    return str(POLICIES[category]["default"])


#: Scheduler names, for CLI choices and spec validation.
SCHEDULERS: tuple[str, ...] = policy_names("scheduler")
#: The scheduler the binary runs when the config names none.
DEFAULT_SCHEDULER: str = default_policy("scheduler")
