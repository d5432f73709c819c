"""The fidelity suite: the 27 phenomena of ``docs/fidelity-table.md``, each an experiment the
testbed runs through its real parts (kernel TCP in namespaces, the real emulator, nginx and
Chromium where a page load is measured), scored against the source papers.

- :mod:`.definitions`: one YAML file per row in ``rows/`` (experiment, parameters of the full
  and the quick profile, the paper's value, the criterion, the mechanisms it needs);
- :mod:`.mechanisms`: whether a mechanism a row needs is in this build, found out at run time
  (the emulator's own ``--check`` of a config key, the scheme registry, the replay's options);
- :mod:`.flows` and :mod:`.bulk`: purpose-built experiments over the emulated cell (bulk flows
  with ``TCP_INFO`` samples, pings, handshakes), listed in :mod:`.bulk` and each in a module
  named after what it studies: :mod:`.queueing`, :mod:`.cellstats`, :mod:`.observers`,
  :mod:`.radio`, :mod:`.rwnd`;
- :mod:`.pageloads`: the rows that are page loads, as orchestrator suite specs; :mod:`.loadfacts`:
  what their loads say (PLTs, TCP samples and counters, ground truth); :mod:`.spdy`: the SPDY
  rows' profiles, per-load radio facts and checks;
- :mod:`.runner`, :mod:`.results`, :mod:`.report`: running rows, the store's ``fidelity_rows``
  table, the terminal and HTML reports; :mod:`.cli`: ``clawbed fidelity``.
"""
