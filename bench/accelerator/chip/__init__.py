"""Runs for the chip itself, each its own entry point: every family's DiT at its native size (`every_dit`), a
`vidax-gen` run with the device's memory peak (`native_run`), the 720p blocks' memory (`memory_720p`)."""
