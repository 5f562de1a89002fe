"""Benchmark implementations behind ``pglab bench NAME`` and ``bench/*.py``."""
