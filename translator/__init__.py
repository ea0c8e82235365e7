"""Weights translator."""
