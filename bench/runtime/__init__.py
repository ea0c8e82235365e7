"""Benches of pieces every family shares (attention, matmuls, offload, step caches ...)."""
