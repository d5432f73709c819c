"""One side of an A/B regression run (``orchestrator/ab.py``), run as a script under that
side's code: ``python -P ab_side.py`` with the side's ``clawbed`` package on the path.

Run by path, never imported as ``clawbed.orchestrator.ab_side``: the base revision need not
contain this file, and everything it runs must be the side's own code. It uses only
long-standing APIs (the runner's ``load_spec``, ``ReplayJob``, ``replay_job``; the emulator's
``EmulatedCell`` and the traffic tools).

Protocol, one JSON object a line: first ``{"ready": {"clawbed": <package path>, ...}}``; then,
for each request read from standard input — a round of a scenario (``ab.RoundRequest``'s
fields) or, with ``"kind": "cell"``, a determinism run (``determinism.CellRequest``'s) —
``{"load": <the load's record>}`` for every load as it ends and ``{"done": null}`` (or
``{"done": "<error>"}`` when it failed). Everything else the replay prints goes to
standard error (the side's log): standard output carries the protocol alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    # The protocol gets its own copy of stdout; fd 1 itself becomes stderr, so whatever the
    # replay or its children print cannot break a message.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    import clawbed
    from clawbed.errors import ClawbedError
    from clawbed.orchestrator import runner
    from clawbed.signals import restore_default_signals

    restore_default_signals()

    def send(message: dict[str, Any]) -> None:
        proto.write(json.dumps(message, default=str) + "\n")

    send({"ready": {"clawbed": str(Path(clawbed.__file__).resolve().parent),
                    "runner": str(Path(runner.__file__).resolve()), "python": sys.version.split()[0]}})
    specs: dict[str, Any] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            if request.get("kind") == "cell":
                emulator_run(request)
            else:
                replay_round(request, specs, send)
        except (ClawbedError, OSError) as e:
            send({"done": f"{type(e).__name__}: {e}"})
        else:
            send({"done": None})
    return 0


def replay_round(request: dict[str, Any], specs: dict[str, Any], send: Any) -> None:
    """Round ``repetition`` of the scenario labelled ``label`` of ``spec``: one replay of that
    round's loads (every scheme), each load's record sent as it ends."""
    from clawbed.errors import ClawbedError
    from clawbed.orchestrator import runner
    from clawbed.orchestrator.spec import load_spec

    spec = specs.get(request["spec"]) or load_spec(Path(request["spec"]))
    specs[request["spec"]] = spec
    matches = [s for s in spec.scenarios() if s.label == request["label"]]
    if not matches:
        raise ClawbedError(f"{request['spec']}: this side's code finds no scenario {request['label']!r}")
    sc = matches[0]
    r = int(request["repetition"])
    job_fields = {f.name for f in dataclasses.fields(runner.ReplayJob)}
    options: dict[str, Any] = {"inject_delay_ms": float(request["inject_delay_ms"]),
                               "rerun_late": bool(request["rerun_late"])}
    if options["inject_delay_ms"] and "inject_delay_ms" not in job_fields:
        raise ClawbedError("this side's code cannot inject a delay (ReplayJob has no inject_delay_ms)")
    # Round r of the scenario's full plan: the replay starts it at the trace time it would
    # have in one go (runs = the scenario's repetitions).
    job = runner.ReplayJob(sc, tuple((r, scheme) for scheme in sc.schemes), Path(request["run_dir"]),
                           request["run_id"], **{k: v for k, v in options.items() if k in job_fields})
    job.run_dir.parent.mkdir(parents=True, exist_ok=True)
    runner.replay_job(job, lambda record: send({"load": dataclasses.asdict(record)}))


def emulator_run(request: dict[str, Any]) -> None:
    """The determinism check's run (``orchestrator/determinism.py``): this side's emulator,
    configured by this side's code, on ``trace`` with ``seed`` for ``seconds`` of emulated
    time (it stops itself), with a UDP flow at ``rate`` from the core to the UE unless None;
    the ground truth in ``out``/emulator."""
    import time

    from clawbed.emulator.process import EmulatedCell
    from clawbed.emulator.traffic import UdpSink, send_udp_command

    out, seconds, rate, port = Path(request["out"]), float(request["seconds"]), request["rate"], int(request["port"])
    out.mkdir(parents=True, exist_ok=True)
    with EmulatedCell(1, out / "emulator", ue={"trace": request["trace"]}, seed=int(request["seed"]),
                      duration_s=seconds) as cell:
        ue = cell.topo.ues[0]
        if rate is not None:
            with UdpSink([ue.name], port):
                argv = send_udp_command(sys.executable, [(str(ue.address), port)], rate, int(request["payload_bytes"]),
                                        seconds)
                cell.topo.core.popen(argv, name="udp-send", log_path=out / "udp-send.log").popen.wait(timeout=seconds + 60)
        deadline = time.monotonic() + seconds + 30
        while cell.emulator.running and time.monotonic() < deadline:
            time.sleep(0.05)  # it stops itself at duration_s: every row is the model's
        cell.stop()


if __name__ == "__main__":
    sys.exit(main())
