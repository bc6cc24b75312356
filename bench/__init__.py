"""Benchmarks: ratios measured side by side in one run (python bench/run.py)."""
