"""The CLAW client: what runs on the UE (design notes and departures: ``claw/DESIGN.md``, Client).

- :mod:`.analyzer` — the cellular load analyzer (Eq. 6–12 of the paper, as
  ``docs/claw-spec.md`` settles them): an RTT-sized sliding window of subframes,
  O(1) per subframe, giving L, N_t, N_a, N_I, N_s, N_f, the mean MCS and W_claw.
- :mod:`.detector` — the bottleneck detector and the saturation rule (pure state machines).
- :mod:`.feed` — the diag feed's MobileInsight-shaped messages → analyzer inputs, and the
  cumulative RLC/PDCP counters → loss events.
- :mod:`.core` — one client's logic without I/O: analyzer + detectors + feedback schedule +
  loss events; the daemon and the offline replay both drive it.
- :mod:`.daemon` — the asyncio daemon (diag feed in, feedback out, echoes in, ACK marks,
  estimates log): the reference client.
- :mod:`.cli` — ``python -m clawbed.claw.client --help``: one command line for both clients,
  checked before anything heavy is imported, and the choice between them (:mod:`.limits`
  holds the limits it checks).
- :mod:`.fast` — the compiled client (``claw/client-rs``), the default: how it is launched,
  and the reference replayed over a recorded feed to compare the two report by report.
- :mod:`.marking` — loads ``claw/bpf/ack_mark_egress.bpf.c`` on the UE's device and writes
  loss events into its map.
- :mod:`.estimates` — the per-subframe estimates log (CSV) and its reader.
- :mod:`.offline` — the client over a recorded diag file, scored against ground truth.
- :mod:`.fakefeed` — a hand-driven diag feed for tests and demos.
- :mod:`.bench` — estimator accuracy per sample trace, clients per core at the 1 ms feed and
  CLAW's per-load set-up (``python -m clawbed.claw.client.bench``).
"""
