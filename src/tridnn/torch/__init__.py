"""PyTorch integration: custom ops (torch.ops.tridnn.*) with autograd and torch.compile
support, torch.nn layers computing with tridnn, and convert(model).

    import tridnn.torch
    model = tridnn.torch.convert(model)     # Conv*, BatchNorm*, activations, pooling, softmax
    y = torch.ops.tridnn.conv_forward(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1)

CPU tensors run on the NumPy backend without copies; CUDA tensors run on the Triton
backend (``Handle(device="cuda")``). torch is imported only by this package.
"""
try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without torch
    from ..errors import RuntimePrerequisiteMissingError
    raise RuntimePrerequisiteMissingError(
        f"tridnn.torch needs PyTorch ({exc}); install it with pip install torch") from None

from . import nn, ops  # noqa: E402
from .convert import convert, converted_layers  # noqa: E402

__all__ = ["ops", "nn", "convert", "converted_layers"]
