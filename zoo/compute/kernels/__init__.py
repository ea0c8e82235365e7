"""Attention kernels per backend, behind `vidax.zoo.compute.attention`'s one entry point.

All take q `[B, Sq, H, D]`, k/v `[B, Skv, H, D]`, an optional kv_mask `[B, Skv]` (True = attend)
and an explicit scale; rows whose keys are all masked return zeros, never NaN.
"""
