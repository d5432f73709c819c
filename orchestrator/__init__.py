"""Experiment matrices, the result store, resumable sweeps and PLT regression checks."""
