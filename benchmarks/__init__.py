"""Benchmark scripts: one per paper figure, each writing JSON + PNG with a baseline from the same run."""
