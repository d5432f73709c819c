"""CLAW without its wireline-bottleneck detector (the CLAW paper's Fig 14 baseline): the same
``claw`` congestion control and client, with the client's detector off, so a wireline
bottleneck in the core is never reported and the sender keeps following W_claw."""

from __future__ import annotations

from clawbed.claw.schemes.base import register_scheme
from clawbed.claw.schemes.claw import Claw


@register_scheme
class ClawNoDetector(Claw):
    name = "claw-nodetect"
    description = "CLAW with its wireline-bottleneck detector off (hybrid mode and loss flags stay)"
    client_flags = ("--no-bottleneck-detector",)
    bpffs_role = "bn"
