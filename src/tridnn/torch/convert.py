"""convert(model): swap a model's torch layers for tridnn ones, in place.

Every Conv*, BatchNorm*, ReLU-style activation, pooling and softmax layer whose
exact type has a tridnn counterpart (tridnn.torch.nn.REPLACEMENTS) and whose options
tridnn supports is replaced by a tridnn layer object that shares the original's
state: the same Parameter and buffer objects, hooks and attributes, so optimizers,
state_dicts and weight tying keep working. Subclasses of torch layers are left
alone (their forward may do more than the base class's).
"""
from __future__ import annotations

import warnings

from torch import nn

from .nn import REPLACEMENTS, unsupported_reason


def _swapped(module: nn.Module):
    cls = REPLACEMENTS.get(type(module))
    if cls is None:
        return None, None
    reason = unsupported_reason(module)
    if reason is not None:
        return None, reason
    new = cls.__new__(cls)
    new.__dict__.update(module.__dict__)  # shares _parameters, _buffers, hooks, ...
    return new, None


def convert(model: nn.Module, warn: bool = True) -> nn.Module:
    """Replace supported layers of ``model`` in place; returns the model (or, when the
    model itself is a single supported layer, its tridnn replacement). Layers left as
    they are because of an unsupported option are named in a warning."""
    skipped = []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent._modules.items()):
            if child is None:
                continue
            new, reason = _swapped(child)
            if new is not None:
                parent._modules[name] = new
            elif reason is not None:
                skipped.append(f"{parent_name + '.' if parent_name else ''}{name} ({reason})")
    root, reason = _swapped(model)
    if reason is not None:
        skipped.append(f"<root> ({reason})")
    if skipped and warn:
        warnings.warn("tridnn.torch.convert kept these torch layers: " + "; ".join(skipped),
                      stacklevel=2)
    return root if root is not None else model


def converted_layers(model: nn.Module) -> list[str]:
    """Names of the layers of ``model`` that compute with tridnn."""
    tridnn_classes = set(REPLACEMENTS.values())
    return [name for name, m in model.named_modules() if type(m) in tridnn_classes]
