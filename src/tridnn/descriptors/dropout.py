"""The dropout descriptor (cudnnDropoutDescriptor_t): probability, seed and RNG state.

The state is a small host byte array holding (seed, offset) as two uint64. The mask
is a counter-based function of (seed, offset + element index), so it does not
depend on blocking or on the backend; each forward call advances the offset by the
element count, so successive calls draw new masks, and a descriptor set up again
with the same seed replays the same sequence of masks.
"""
from __future__ import annotations

import numpy as np

from ..errors import BadParamError, check_finite_scalar, check_positive_int

DROPOUT_STATES_SIZE = 64  # bytes: seed and offset (uint64 each), padded to a cache line


def dropout_get_states_size(handle=None) -> int:
    """cudnnDropoutGetStatesSize."""
    return DROPOUT_STATES_SIZE


def dropout_get_reserve_space_size(x_desc) -> int:
    """cudnnDropoutGetReserveSpaceSize: one byte of mask per element."""
    return int(x_desc.size)


class DropoutDescriptor:
    """``DropoutDescriptor(probability, seed, states)`` initializes ``states`` (a uint8
    array of at least dropout_get_states_size() bytes; allocated when None), as
    cudnnSetDropoutDescriptor. ``DropoutDescriptor.restore(...)`` keeps the state as is
    (cudnnRestoreDropoutDescriptor)."""

    def __init__(self, probability: float = 0.5, seed: int = 0, states=None, *, _restore=False):
        p = check_finite_scalar("dropout probability", probability)
        if not 0.0 <= p < 1.0:
            raise BadParamError(f"dropout probability must be in [0, 1), got {p}")
        seed = check_positive_int("dropout seed", seed, minimum=0)
        if seed >= 1 << 64:
            raise BadParamError(f"dropout seed must fit in 64 bits, got {seed}")
        if states is None:
            if _restore:
                raise BadParamError("restore needs the states array of the original descriptor")
            states = np.zeros(DROPOUT_STATES_SIZE, np.uint8)
        if not isinstance(states, np.ndarray) or states.dtype != np.uint8 or not states.flags.c_contiguous \
                or not states.flags.writeable:
            raise BadParamError("dropout states must be a writable contiguous uint8 NumPy array")
        if states.nbytes < DROPOUT_STATES_SIZE:
            raise BadParamError(f"dropout states of {states.nbytes} bytes are smaller than the "
                                f"{DROPOUT_STATES_SIZE} bytes dropout_get_states_size gives")
        self.probability = p
        self.states = states
        self._words = states.reshape(-1)[:16].view(np.uint64)
        if not _restore:
            self._words[0] = seed
            self._words[1] = 0

    @classmethod
    def restore(cls, probability: float, states, seed: int = 0) -> "DropoutDescriptor":
        return cls(probability, seed, states, _restore=True)

    @property
    def seed(self) -> int:
        return int(self._words[0])

    @property
    def offset(self) -> int:
        """The Philox counter the next forward call starts at."""
        return int(self._words[1])

    def advance(self, count: int) -> None:
        self._words[1] = np.uint64((self.offset + int(count)) % (1 << 64))

    def __repr__(self) -> str:
        return f"DropoutDescriptor(probability={self.probability}, seed={self.seed}, offset={self.offset})"
