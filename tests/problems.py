"""Convolution problems for the tests: the regression suite as is, the other suites
scaled down (channels and spatial sizes capped, structure kept: depthwise stays
depthwise, strides, dilations and kernels unchanged)."""
from tridnn import shapes


def scaled(p, max_c=8, max_spatial=9):
    q = dict(p)
    g = p["groups"]
    if g == p["C"] == p["K"]:  # depthwise
        c = min(p["C"], max_c)
        q.update(C=c, K=c, groups=c)
    else:
        cg, kg = p["C"] // g, p["K"] // g
        q.update(C=min(cg, max_c) * g, K=min(kg, max_c) * g)
    spatial = []
    for size, k, d, pad in zip(p["spatial"], p["kernel"], p["dilation"], p["pad"]):
        need = d * (k - 1) + 1 - 2 * pad  # keep the output non-empty
        spatial.append(max(min(size, max_spatial), need, 1))
    q["spatial"] = tuple(spatial)
    return q


def suite_problems(names=("resnet50", "mobilenetv2_dw", "dilated", "conv1d", "conv3d")):
    out = []
    for name in names:
        for p in shapes.SUITES[name]:
            out.append(scaled(p, max_spatial=6 if len(p["spatial"]) == 3 else 9))
    return out


REGRESSION = list(shapes.REGRESSION)


def call_api(h, direction, descs, algo, x, w, y, ws, alpha, beta):
    """One convolution through the public API: descs = (x, w, conv, y) descriptors; the
    output is y (forward), x (backward data) or w (backward filter)."""
    import tridnn
    xd, wd, cd, yd = descs
    if direction == "fwd":
        tridnn.convolution_forward(h, alpha, xd, x, wd, w, cd, algo, ws, beta, yd, y)
    elif direction == "bwd_data":
        tridnn.convolution_backward_data(h, alpha, wd, w, yd, y, cd, algo, ws, beta, xd, x)
    else:
        tridnn.convolution_backward_filter(h, alpha, xd, x, yd, y, cd, algo, ws, beta, wd, w)

