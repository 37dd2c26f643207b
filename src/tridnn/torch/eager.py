"""Eager calls of tridnn's custom ops without PyTorch's custom-op dispatch.

A ``torch.library.custom_op`` call in eager mode goes through the dispatcher, an
autograd.Function generated per op, a redispatch below autograd and a torch.compile
guard before it reaches the op's Python body: measured on the H200's host, a relu on a
tiny tensor took 150 us in the body and 341 us through the op with autograd (torch.relu:
13 us). For a training loop that calls ~300 ops a step, that dispatch is a third of the
step. So the nn layers call ``caller(op)`` instead, which in plain eager mode runs the
op's body directly (no autograd needed) or through one plain autograd.Function built
from the op's own registered formulas (setup_context, backward), and otherwise (under
torch.compile, jit tracing, a dispatch or function mode such as FakeTensorMode,
functorch transforms, tensor subclasses) calls the registered op, so tracing still sees
``torch.ops.tridnn.*`` with its fake kernel.

Both routes run the same body and the same formulas, so they give the same results; a
test checks that, and that the traced route is taken where it must be.
"""
from __future__ import annotations

import torch

_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def plain_eager(args) -> bool:
    """Whether nothing but ordinary eager execution would see this call: no compiler or
    tracer, no dispatch/function mode, no functorch transform, no tensor subclass."""
    if torch._C._is_tracing() or torch._C._len_torch_dispatch_stack() \
            or torch._C._is_torch_function_mode_enabled() or torch._C._are_functorch_transforms_active():
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and type(a) not in _PLAIN_TYPES:
            return False
    return True


def caller(op, formulas=None):
    """A function with ``op``'s signature (positional arguments) that takes the direct
    route in plain eager mode. ``formulas``: (backward, setup_context) as registered with
    ``op.register_autograd``, or None for an op without autograd."""
    body = op._init_fn  # the Python function the op was defined from
    function = None
    if formulas is not None:
        backward, setup_context = formulas

        def forward(ctx, *args):
            out = body(*args)
            setup_context(ctx, args, out)
            return out

        name = f"Eager_{op._namespace}_{op._name}"
        function = type(name, (torch.autograd.Function,),
                        {"forward": staticmethod(forward), "backward": staticmethod(backward)})

    def call(*args):
        if torch.compiler.is_compiling() or not plain_eager(args):
            return op(*args)
        if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
            # an op without formulas raises PyTorch's own "no autograd formula" error
            return function.apply(*args) if function is not None else op(*args)
        return body(*args)

    call.__name__ = call.__qualname__ = op._name
    call.__doc__ = body.__doc__
    return call
