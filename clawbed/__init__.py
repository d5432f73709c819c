"""clawbed: a trace-driven LTE emulation testbed for PHY-informed transport protocols."""

__version__ = "0.1.0"
