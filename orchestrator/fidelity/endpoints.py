"""What the table's conventions ask to record with every row: the kernel version and the TCP
sysctls of both ends (``tcp_frto``, ``tcp_recovery``, ``tcp_slow_start_after_idle``,
``tcp_no_metrics_save``, ``tcp_rmem``), read from the namespaces the row's flows ran in.

For rows run as page loads (a replay makes and removes its own namespaces), :func:`probe`
makes a server and a UE namespace, applies the settings a replay applies to its ends (the
scheme's server sysctls, the UE's receive buffer) and reads them back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from clawbed.claw.server.sysctls import apply_server_sysctls, read_sysctl
from clawbed.netns import Namespace, Resources

SYSCTLS = ("net.ipv4.tcp_frto", "net.ipv4.tcp_recovery", "net.ipv4.tcp_slow_start_after_idle",
           "net.ipv4.tcp_no_metrics_save", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_congestion_control")


def kernel() -> str:
    u = os.uname()
    return f"{u.sysname} {u.release} {u.version}"


def read_end(ns: Namespace) -> dict[str, str]:
    """The recorded sysctls of one namespace (short names)."""
    out = {}
    for key in SYSCTLS:
        try:
            out[key.rsplit(".", 1)[1]] = read_sysctl(ns, key)
        except Exception as e:  # noqa: BLE001 - a missing sysctl is recorded as such
            out[key.rsplit(".", 1)[1]] = f"unreadable: {e}"
    return out


def both_ends(server: Namespace, ue: Namespace, source: str) -> dict[str, Any]:
    return {"server": read_end(server), "ue": read_end(ue), "source": source}


def probe(run_id: str, out_dir: Path, ue_rmem: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """Both ends' sysctls as a replay sets them, read from a probe pair of namespaces."""
    from clawbed.replay.run import UE_TCP_RMEM_BYTES

    rmem = ue_rmem or UE_TCP_RMEM_BYTES
    out_dir.mkdir(parents=True, exist_ok=True)
    with Resources(run_id, out_dir / "ledger-probe.jsonl") as res:
        server = res.namespace("ps")
        ue = res.namespace("pu")
        apply_server_sysctls(server)
        ue.sysctl("net.ipv4.tcp_rmem", " ".join(str(v) for v in rmem))
        ends = both_ends(server, ue, "probe namespaces with the replay's settings (claw.server.sysctls.SERVER_SYSCTLS "
                                     "on the server, replay.run.UE_TCP_RMEM_BYTES on the UE)")
    return ends
