"""The algorithm contract (after MIOpen's solvers) and the perf record (after cuDNN's).

An algorithm is a stateless object. ``not_applicable`` says why it cannot run a
problem (None when it can); ``buffers`` lists its workspace temporaries, from which
``workspace_size`` follows; ``estimate`` is a cheap cost model used by ``get``; and
``run`` computes ``out = alpha * op(...) + beta * out`` for the problem's direction.

Forward algorithms also take ``epilogue``: a callable ``epilogue(acc, index)`` applied
to the blended accumulator (in the accumulator dtype) before the one rounding to the
output; ``index`` is the tuple of slices of the output that ``acc`` covers. It is how
``convolution_bias_activation_forward`` fuses bias, residual and activation without
another pass over y.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Status
from ..types import Determinism, MathType
from ..workspace import layout_size


class Algorithm:
    id: int = -1                 # stable registry id, set by the registry
    op: str = "conv"
    direction: str = "fwd"       # "fwd" | "bwd_data" | "bwd_filter"
    enum = None                  # the cuDNN-style enum member it implements
    backend: str = "numpy"       # "numpy" | "triton"
    deterministic: bool = True
    math_type: MathType = MathType.DEFAULT

    def not_applicable(self, problem) -> str | None:
        return None

    def buffers(self, problem) -> list:
        """Workspace temporaries as ``workspace.Buffer`` specs; none by default."""
        return []

    def workspace_size(self, problem) -> int:
        return layout_size(self.buffers(problem))

    def estimate(self, problem) -> float:
        """Predicted seconds; only the ranking between algorithms matters."""
        raise NotImplementedError

    def run(self, problem, tensors: dict, workspace, alpha: float, beta: float,
            epilogue=None) -> None:
        raise NotImplementedError

    def replay(self, problem, tensors: dict, workspace, alpha: float, beta: float):
        """What a ``run`` just made for these very tensors and workspace (same addresses,
        alpha, beta) and can repeat without its dispatch: a callable ``replay(tensors)`` (the
        same views), or None (the default: every call runs). The API's fast path keeps it per
        address set, so a training loop's repeated call skips the plan, tuner and record
        lookups."""
        return None

    @property
    def name(self) -> str:
        return self.enum.name if self.enum is not None else type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.backend} {self.op} {self.direction} {self.name} (id {self.id})>"


@dataclass
class PerfResult:
    """cudnnConvolution*AlgoPerf_t plus ``reason`` and whether ``time_ms`` was measured.

    ``get`` fills ``time_ms`` with the heuristic's estimate (measured=False); ``find``
    with the measured median (measured=True). Unsupported entries have status
    NOT_SUPPORTED, time -1 and a reason.
    """
    algo: object
    status: Status
    time_ms: float
    memory: int
    determinism: Determinism
    math_type: MathType
    reason: str | None = None
    measured: bool = False
    algorithm: Algorithm | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict:
        return dict(algo=getattr(self.algo, "name", str(self.algo)), status=self.status.name,
                    time_ms=self.time_ms, memory=self.memory, determinism=self.determinism.name,
                    math_type=self.math_type.name, reason=self.reason, measured=self.measured)
