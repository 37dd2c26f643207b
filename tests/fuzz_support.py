"""Shared pieces of the property-based tests: the profile, run counters and a write guard.

Profiles: the CI profile (the default) draws a few dozen problems per test, the same
ones every run; the long profile (``TRIDNN_FUZZ=long``, driven by
``benchmarks/fuzz_long.py``) draws ``TRIDNN_FUZZ_EXAMPLES`` new problems per test.
With ``TRIDNN_FUZZ_STATS=<file>`` every test module appends its counts (problems,
algorithm runs, per algorithm) to that file as one JSON line, which is where
docs/reliability.md's figures come from.
"""
from __future__ import annotations

import collections
import json
import os

import numpy as np
from hypothesis import HealthCheck, settings

from tridnn.testing import seed_salt

PROFILE = os.environ.get("TRIDNN_FUZZ", "ci")
if PROFILE not in ("ci", "long"):
    raise RuntimeError(f"TRIDNN_FUZZ must be 'ci' or 'long', got {PROFILE!r}")


def fuzz_settings(ci_examples: int):
    """Hypothesis settings for one property: small in CI, large in the long profile.

    The CI profile draws the same examples in every run (derandomized), as the ``rng``
    fixture does, so CI's verdict depends on the commit alone; the long profile, or a
    ``TRIDNN_TEST_SEED`` salt, draws new ones."""
    long_examples = int(os.environ.get("TRIDNN_FUZZ_EXAMPLES", "2000"))
    fixed = PROFILE == "ci" and not seed_salt()
    return settings(max_examples=ci_examples if PROFILE == "ci" else long_examples,
                    derandomize=fixed, database=None if fixed else settings.default.database,
                    deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


class Stats:
    """Counts of problems drawn and algorithm runs checked, per test module."""

    def __init__(self, module: str):
        self.module = module
        self.counts = collections.Counter()

    def problem(self, kind: str) -> None:
        self.counts[f"problems/{kind}"] += 1

    def ran(self, kind: str, algo_name: str) -> None:
        self.counts[f"runs/{kind}"] += 1
        self.counts[f"runs/{kind}/{algo_name}"] += 1

    def not_applicable(self, kind: str, algo_name: str) -> None:
        self.counts[f"not_applicable/{kind}/{algo_name}"] += 1

    def add(self, key: str, amount: int) -> None:
        self.counts[key] += int(amount)

    def dump(self) -> None:
        path = os.environ.get("TRIDNN_FUZZ_STATS")
        if path and self.counts:
            with open(path, "a") as f:
                f.write(json.dumps({"module": self.module, "profile": PROFILE,
                                    "counts": dict(self.counts)}) + "\n")


def root_buffer(view: np.ndarray) -> np.ndarray:
    """The array that owns ``view``'s memory (the end of the .base chain)."""
    root = view
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root


class WriteGuard:
    """Fills everything around an output view with a sentinel, so a write outside the
    view (into the gaps of a strided layout) is caught after the call."""

    SENTINEL = 7.0

    def __init__(self, view: np.ndarray):
        self.root = root_buffer(view).reshape(-1)
        item = view.itemsize
        offset = (view.__array_interface__["data"][0] - self.root.__array_interface__["data"][0]) // item
        marker = np.zeros(self.root.size, bool)
        if view.size:
            inside = np.lib.stride_tricks.as_strided(marker[offset:], view.shape,
                                                     [s // item for s in view.strides])
            inside[...] = True
        self.outside = ~marker
        self.root[self.outside] = self.SENTINEL

    def check(self, name: str) -> None:
        around = np.asarray(self.root[self.outside], np.float64)
        if not np.all(around == self.SENTINEL):
            raise AssertionError(f"{name}: {int((around != self.SENTINEL).sum())} elements outside "
                                 f"the output view were overwritten")
