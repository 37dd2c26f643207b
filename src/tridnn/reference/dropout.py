"""Reference dropout: given a mask, the forward and backward are one multiply each."""
from __future__ import annotations

import numpy as np


def dropout_apply(x, mask, probability):
    return np.where(np.asarray(mask) != 0, np.asarray(x, np.float64) / (1.0 - probability), 0.0)
