"""Every forward algorithm against the float64 reference.

Integer fills make direct and GEMM methods exact; transform methods get the
documented tolerance. Outputs are poisoned with NaN first, so an element that is
not written fails the check, and beta == 0 must not read them.
"""
import numpy as np
import pytest

import tridnn
from tridnn import reference, testing
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem
from tridnn.errors import NotSupportedError

from problems import REGRESSION, suite_problems

FWD = registry.algorithms("conv", "fwd", "numpy")
DTYPES = ["float32", "float64", "float16", "bfloat16"]


def run_case(algo, p, dtype, layout, rng, n=2, alpha=1.0, beta=0.0, mode=tridnn.ConvMode.CROSS_CORRELATION,
             pad_post=None):
    nd = len(p["spatial"])
    conv = tridnn.ConvolutionDescriptor(padding=p["pad"], pad_post=pad_post, stride=p["stride"],
                                        dilation=p["dilation"], groups=p["groups"], mode=mode, nd=nd)
    x_vals = testing.fill((n, p["C"], *p["spatial"]), dtype, rng)
    w_vals = testing.fill((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, layout, rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, layout, w_vals)
    y_dims = conv.output_dims(x_desc, w_desc)
    y_desc, y = testing.make_tensor(y_dims, dtype, layout, rng)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, conv)
    reason = algo.not_applicable(problem)
    if reason is not None:
        return reason
    if beta == 0:
        testing.poison(y)
        prior = None
    else:
        prior = testing.fill(y_dims, dtype, rng)
        y[...] = prior
    handle = tridnn.Handle(find_cache=None)
    ws = np.empty(tridnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc,
                                                                algo.enum), np.uint8)
    x_before = x.copy()
    tridnn.convolution_forward(handle, alpha, x_desc, x, w_desc, w, conv, algo.enum, ws, beta, y_desc, y)
    mode_name = "convolution" if mode == tridnn.ConvMode.CONVOLUTION else "cross_correlation"
    ref = reference.conv_forward(x_vals, w_vals, p["stride"], p["pad"], pad_post, p["dilation"],
                                 p["groups"], mode_name)
    testing.check_result(y, ref, dtype, algo.exact, alpha, beta, prior, name=f"{algo.name} y")
    assert np.array_equal(x, x_before, equal_nan=True), "input x was modified"
    return None


def skip_unless_applies(reason):
    """A problem the algorithm declares not applicable is reported as a skip, never a pass."""
    if reason is not None:
        pytest.skip(f"not applicable: {reason}")


def _ids(p):
    return p["name"]


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
@pytest.mark.parametrize("p", REGRESSION, ids=_ids)
@pytest.mark.parametrize("dtype", DTYPES)
def test_regression_suite_every_dtype(algo, p, dtype, rng):
    layout = "NHWC" if dtype in ("float16", "bfloat16") else "NCHW"
    skip_unless_applies(run_case(algo, p, dtype, layout, rng))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
@pytest.mark.parametrize("layout", testing.LAYOUTS)
@pytest.mark.parametrize("p", REGRESSION + suite_problems(), ids=_ids)
def test_suites_every_layout(algo, layout, p, rng):
    skip_unless_applies(run_case(algo, p, "float32", layout, rng))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.0), (0.5, 1.0), (-1.0, 2.0)])
def test_alpha_beta(algo, alpha, beta, rng):
    p = dict(REGRESSION[3])  # tails_17_20
    skip_unless_applies(run_case(algo, p, "float32", "NHWC", rng, alpha=alpha, beta=beta))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_convolution_mode_flips_filter(algo, rng):
    from tridnn.shapes import conv
    p = conv("flip", 4, 6, (7, 9), 3, 1, 1)
    skip_unless_applies(run_case(algo, p, "float64", "NCHW", rng, mode=tridnn.ConvMode.CONVOLUTION))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_asymmetric_padding(algo, rng):
    from tridnn.shapes import conv
    p = conv("asym", 3, 5, (8, 7), 3, 1, (0, 2))
    skip_unless_applies(run_case(algo, p, "float32", "NCHW", rng, pad_post=(2, 1)))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_empty_batch(algo, rng):
    from tridnn.shapes import conv
    p = conv("empty", 4, 4, (5, 5), 3, 1, 1)
    skip_unless_applies(run_case(algo, p, "float32", "NCHW", rng, n=0))


def test_every_algorithm_applies_somewhere(rng):
    """No registered algorithm is a stub that applies to nothing."""
    from tridnn.shapes import conv
    applied = {a.name: 0 for a in FWD}
    for p in REGRESSION + suite_problems() + [conv("w3", 8, 8, (12, 12), 3, 1, 1)]:
        for algo in FWD:
            if run_case(algo, p, "float32", "NCHW", rng) is None:
                applied[algo.name] += 1
    assert all(count > 0 for count in applied.values()), applied


def test_all_eight_forward_algorithms_registered():
    assert sorted(a.enum for a in FWD) == sorted(tridnn.ConvFwdAlgo)
    registry.check_table()
