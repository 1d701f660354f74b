"""Benchmarks: `make bench` (python -m bench). Figures are printed, never asserted."""
