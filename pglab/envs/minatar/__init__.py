"""Batched MinAtar games."""
