"""Convolution problem sets for tridnn's benchmarks and tests (a copy of shared/bench/shapes.py,
shipped in the package so `tridnn bench` works after a pip install; a test keeps them equal).

Each problem is a dict:
    name      label
    C, K      input and output channels
    spatial   input spatial size, one entry per spatial dim (1D, 2D or 3D)
    kernel    filter size per spatial dim
    stride, pad, dilation   per spatial dim (pad is symmetric here)
    groups    feature groups (groups == C == K is depthwise)
    repeat    how many times the layer occurs in the network (for weighted totals)
The batch size is chosen by the caller. The shapes are facts of published
architectures (ResNet-50 v1.5 as in torchvision, MobileNetV2, DeepLab ASPP, C3D)
and of well-known regression cases for padding and dilation.
"""


def conv(name, C, K, spatial, kernel, stride=1, pad=0, dilation=1, groups=1, repeat=1):
    nd = len(spatial)
    as_tuple = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd
    return dict(name=name, C=C, K=K, spatial=tuple(spatial), kernel=as_tuple(kernel),
                stride=as_tuple(stride), pad=as_tuple(pad), dilation=as_tuple(dilation),
                groups=groups, repeat=repeat)


# ResNet-50 v1.5: every distinct convolution of a 224x224 forward pass (53 layers in all).
RESNET50 = [
    conv("conv1",        3,   64, (224, 224), 7, 2, 3),
    conv("res2_1x1a",   64,   64, (56, 56), 1),
    conv("res2_3x3",    64,   64, (56, 56), 3, 1, 1, repeat=3),
    conv("res2_1x1c",   64,  256, (56, 56), 1, repeat=4),
    conv("res2_1x1r",  256,   64, (56, 56), 1, repeat=2),
    conv("res3_1x1a",  256,  128, (56, 56), 1),
    conv("res3_3x3s2", 128,  128, (56, 56), 3, 2, 1),
    conv("res3_ds",    256,  512, (56, 56), 1, 2),
    conv("res3_3x3",   128,  128, (28, 28), 3, 1, 1, repeat=3),
    conv("res3_1x1c",  128,  512, (28, 28), 1, repeat=4),
    conv("res3_1x1r",  512,  128, (28, 28), 1, repeat=3),
    conv("res4_1x1a",  512,  256, (28, 28), 1),
    conv("res4_3x3s2", 256,  256, (28, 28), 3, 2, 1),
    conv("res4_ds",    512, 1024, (28, 28), 1, 2),
    conv("res4_3x3",   256,  256, (14, 14), 3, 1, 1, repeat=5),
    conv("res4_1x1c",  256, 1024, (14, 14), 1, repeat=6),
    conv("res4_1x1r", 1024,  256, (14, 14), 1, repeat=5),
    conv("res5_1x1a", 1024,  512, (14, 14), 1),
    conv("res5_3x3s2", 512,  512, (14, 14), 3, 2, 1),
    conv("res5_ds",   1024, 2048, (14, 14), 1, 2),
    conv("res5_3x3",   512,  512, (7, 7), 3, 1, 1, repeat=2),
    conv("res5_1x1c",  512, 2048, (7, 7), 1, repeat=3),
    conv("res5_1x1r", 2048,  512, (7, 7), 1, repeat=2),
]

# MobileNetV2 depthwise 3x3 convolutions (17 layers in all).
MOBILENETV2_DW = [
    conv("dw32_112",    32,  32, (112, 112), 3, 1, 1, groups=32),
    conv("dw96_112s2",  96,  96, (112, 112), 3, 2, 1, groups=96),
    conv("dw144_56",   144, 144, (56, 56), 3, 1, 1, groups=144),
    conv("dw144_56s2", 144, 144, (56, 56), 3, 2, 1, groups=144),
    conv("dw192_28",   192, 192, (28, 28), 3, 1, 1, groups=192, repeat=2),
    conv("dw192_28s2", 192, 192, (28, 28), 3, 2, 1, groups=192),
    conv("dw384_14",   384, 384, (14, 14), 3, 1, 1, groups=384, repeat=4),
    conv("dw576_14",   576, 576, (14, 14), 3, 1, 1, groups=576, repeat=2),
    conv("dw576_14s2", 576, 576, (14, 14), 3, 2, 1, groups=576),
    conv("dw960_7",    960, 960, (7, 7), 3, 1, 1, groups=960, repeat=3),
]

# Atrous (dilated) 3x3 convolutions as in DeepLab's ASPP head.
DILATED = [
    conv("aspp_d2",  512, 512, (64, 64), 3, 1, 2, 2),
    conv("aspp_d4",  512, 512, (64, 64), 3, 1, 4, 4),
    conv("aspp_d12", 256, 256, (33, 33), 3, 1, 12, 12),
]

# 1D and 3D convolutions.
CONV1D = [
    conv("speech_k11", 256, 256, (400,), 11, 1, 5),
    conv("speech_k3s2", 512, 512, (200,), 3, 2, 1),
]
CONV3D = [
    conv("c3d_conv2",  64, 128, (16, 56, 56), 3, 1, 1),
    conv("c3d_conv3", 128, 256, (8, 28, 28), 3, 1, 1),
    conv("vnet_down",  32,  64, (64, 64, 32), 2, 2, 0),
]

# Small cases that cross applicability boundaries: padding larger than the kernel,
# taps that fall wholly into padding, channel tails, odd sizes, strides and dilations.
REGRESSION = [
    conv("pad7_k5",       16, 16, (10, 10), 5, 1, 7),
    conv("pad5_k3",       16, 16, (10, 10), 3, 1, 5),
    conv("pad3_k1",       16, 16, (10, 10), 1, 1, 3),
    conv("tails_17_20",   17, 20, (13, 31), 3, 1, 1),
    conv("stride3_dil3",   4,  6, (10, 10), 3, 3, 2, 3),
    conv("k7_stride3",     4,  6, (18, 18), 7, 3, 1, 2),
    conv("grouped_g2",    96, 96, (57, 57), 5, 2, 1, groups=2),
    conv("dw_dil2",       64, 64, (112, 112), 3, 2, 1, 2, groups=64),
    conv("one_pixel",    128, 16, (1, 1), 3, 1, 1),
    conv("c1_k1",          1,  1, (5, 7), 1),
]

SUITES = {
    "resnet50": RESNET50,
    "mobilenetv2_dw": MOBILENETV2_DW,
    "dilated": DILATED,
    "conv1d": CONV1D,
    "conv3d": CONV3D,
    "regression": REGRESSION,
}


def output_size(p):
    """Output spatial size of a problem (floor mode, symmetric padding)."""
    return tuple((i + 2 * pd - d * (k - 1) - 1) // s + 1
                 for i, k, s, pd, d in zip(p["spatial"], p["kernel"], p["stride"], p["pad"], p["dilation"]))


def flops(p, n):
    """Multiply-adds times two for a forward pass at batch n."""
    out = 1
    for o in output_size(p):
        out *= o
    taps = 1
    for k in p["kernel"]:
        taps *= k
    return 2.0 * n * p["K"] * out * (p["C"] // p["groups"]) * taps
