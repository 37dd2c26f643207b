"""Algorithms: the plug-in contract, the registry table, get/find and the find cache."""
from .base import Algorithm, PerfResult
from .problem import ConvProblem

__all__ = ["Algorithm", "PerfResult", "ConvProblem"]
