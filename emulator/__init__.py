"""The Python side of the emulator: topology, config, process control, diag feed and ground truth.

The emulator itself is the Rust binary ``clawbed-emu`` (``emulator/dataplane/``); this package
builds the namespaces it runs between, writes its config, starts and stops it, and reads
what it produces.
"""
