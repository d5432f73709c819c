"""PHY traces: the format (``schema``, ``io``), its validator, generators, importers and tools."""
