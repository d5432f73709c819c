"""The CLAW server: the struct_ops congestion control and tc ingress program (``claw/bpf``),
their loader (:mod:`.loader`, :mod:`.libbpf`, :mod:`.bpfmap`, :mod:`.maps`), the feedback
agent (:mod:`.agent`) and the namespace's TCP settings (:mod:`.sysctls`)."""
