"""Side-by-side timing: ratios of medians measured in one run, with the candidates interleaved."""
from __future__ import annotations

import os
import statistics
import time
from typing import Callable

# make grade's environment: OpenMP threads that sleep at once, so that parallel graders do not spin on each other.
GRADING_ENV = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}


def medians(candidates: dict[str, Callable[[], object]], repeats: int = 30, warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each candidate; rounds alternate between candidates so that
    machine noise (another process, frequency changes) hits all of them alike."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}
