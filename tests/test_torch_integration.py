"""tridnn.torch: custom ops (checked with torch.library.opcheck), nn layers, convert(),
a converted ResNet-18 against the original, and torch.compile."""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import tridnn.torch as tt  # noqa: E402
from tridnn.errors import NotSupportedError  # noqa: E402


# -- torchvision's ResNet-18, written out (torchvision is not installed here) -----------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(64, 2)
        self.layer2 = self._make_layer(128, 2, stride=2)
        self.layer3 = self._make_layer(256, 2, stride=2)
        self.layer4 = self._make_layer(512, 2, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def assert_close(got, want, rtol, name):
    """Relative to the tensor's scale: float32 sums through many layers differ in the last bits."""
    scale = want.abs().max().item() or 1.0
    err = (got - want).abs().max().item() / scale
    assert err <= rtol, f"{name}: max error {err:.3g} of scale {scale:.3g} > {rtol}"


def test_resnet18_converted_matches_the_original_forward_and_backward():
    """In float64, so the comparison is not swamped by float32 rounding amplified by the
    batch norms of layer4 (two values per channel at this size)."""
    torch.manual_seed(0)
    original = ResNet18().double()
    model = tt.convert(copy.deepcopy(original))
    converted = tt.converted_layers(model)
    assert len([n for n in converted if "conv" in n or "downsample.0" in n]) == 20
    assert len([n for n in converted if "bn" in n or "downsample.1" in n]) == 20
    assert {"maxpool", "avgpool", "relu"} <= set(converted) and "fc" not in converted
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    for m in (original, model):
        m.train()
    want = original(x)
    got = model(x)
    assert_close(got, want, 1e-9, "train-mode logits")
    want.square().sum().backward()
    got.square().sum().backward()
    params = dict(original.named_parameters())
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert_close(p.grad, params[name].grad, 1e-7, f"grad of {name}")
    for (name, buf), (_, ref) in zip(model.named_buffers(), original.named_buffers()):
        assert_close(buf.double(), ref.double(), 1e-9, f"buffer {name}")
    original.eval()
    model.eval()
    with torch.no_grad():
        assert_close(model(x), original(x), 1e-9, "eval-mode logits")


def test_convert_shares_parameters_and_state_dict():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    conv_weight = model[0].weight
    running_mean = model[1].running_mean
    tt.convert(model)
    assert type(model[0]) is tt.nn.Conv2d and model[0].weight is conv_weight
    assert model[1].running_mean is running_mean
    state = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).state_dict()
    model.load_state_dict(state)  # the same keys
    assert torch.equal(model[0].weight, state["0.weight"])
    assert tt.convert(nn.ReLU()).__class__ is tt.nn.ReLU  # a bare layer is replaced and returned


def test_convert_keeps_unsupported_layers_and_says_so():
    model = nn.Sequential(nn.MaxPool2d(2, ceil_mode=True), nn.AvgPool2d(2, divisor_override=3),
                          nn.MaxPool2d(3, padding=1))
    with pytest.warns(UserWarning, match="ceil_mode"):
        tt.convert(model)
    assert type(model[0]) is nn.MaxPool2d and type(model[1]) is nn.AvgPool2d
    assert type(model[2]) is tt.nn.MaxPool2d
    with pytest.raises(NotSupportedError, match="ceil_mode"):
        tt.nn.MaxPool2d(2, ceil_mode=True)(torch.randn(1, 1, 5, 5))


@pytest.mark.parametrize("backend, dtype", [("inductor", torch.float32), ("aot_eager", torch.float64)])
def test_torch_compile_of_a_converted_model(backend, dtype):
    """Inductor compiles the custom ops' neighbours with gcc; a fake kernel with the
    wrong shape or strides fails here."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 4, 3, stride=2, padding="valid"),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LogSoftmax(dim=1)).to(dtype)
    reference = copy.deepcopy(model)
    tt.convert(model)
    x = torch.randn(2, 3, 12, 12, dtype=dtype)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    got = compiled(x)
    want = reference(x)
    assert_close(got, want, 1e-5, "compiled logits")
    got.sum().backward()
    want.sum().backward()
    ref_params = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        assert_close(p.grad, ref_params[name].grad, 1e-4, f"compiled grad of {name}")


def test_torch_compile_resnet18_runs():
    torch.manual_seed(3)
    model = tt.convert(ResNet18()).eval()
    reference = ResNet18()
    reference.load_state_dict(model.state_dict())
    reference.eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert_close(compiled(x), reference(x), 1e-4, "compiled ResNet-18")


# -- ops ---------------------------------------------------------------------------------------
def _opcheck(op, args):
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration",
                                                "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("channels_last", [False, True])
def test_opcheck_convolution(channels_last):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64).to(memory_format=fmt).requires_grad_()
    w = torch.randn(6, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    geometry = ([2, 1], [1, 0], [1, 1], [1, 2], 2)
    _opcheck(torch.ops.tridnn.conv_forward.default, (x, w, b, *geometry))
    y = tt.ops.conv_forward(x, w, b, *geometry)
    assert y.is_contiguous(memory_format=fmt)
    want = torch.nn.functional.conv2d(torch.nn.functional.pad(x, (0, 1, 1, 1)), w, b, (2, 1), 0, (1, 2), 2)
    torch.testing.assert_close(y, want)
    dy = torch.randn_like(y)
    _opcheck(torch.ops.tridnn.conv_backward_data.default, (dy, w, list(x.shape), *geometry))
    _opcheck(torch.ops.tridnn.conv_backward_filter.default, (x, dy, list(w.shape), *geometry))
    assert torch.autograd.gradcheck(lambda a, b_, c: tt.ops.conv_forward(a, b_, c, *geometry),
                                    (x.detach()[:1].clone().requires_grad_(), w, b), atol=1e-7)


def test_opcheck_layers():
    x = torch.randn(2, 3, 6, 5, dtype=torch.float64, requires_grad=True)
    _opcheck(torch.ops.tridnn.pool.default, (x, "max", [2, 2], [2, 1], [1, 0]))
    _opcheck(torch.ops.tridnn.pool.default, (x, "avg_exclude_pad", [3, 3], [2, 2], [1, 1]))
    _opcheck(torch.ops.tridnn.adaptive_pool.default, (x, "average", [2, 3]))
    _opcheck(torch.ops.tridnn.activation.default, (x, "gelu", 0.0, 1.0))
    _opcheck(torch.ops.tridnn.softmax.default, (x, 3, True))
    w = torch.rand(3, dtype=torch.float64, requires_grad=True)
    b = torch.rand(3, dtype=torch.float64, requires_grad=True)
    _opcheck(torch.ops.tridnn.batch_norm_training.default,
             (x, w, b, torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), 0.1, 1e-5))
    _opcheck(torch.ops.tridnn.batch_norm_inference.default,
             (x, torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), w, b, 1e-5))
    for fn in (lambda a: tt.ops.pool(a, "avg", [2, 2], [1, 1], [1, 1]),
               lambda a: tt.ops.activation(a, "swish", 0.0, 1.5),
               lambda a: tt.ops.softmax(a, 1, False),
               lambda a: tt.ops.batch_norm_train(a, w, b, None, None, 0.1, 1e-5),
               lambda a: tt.ops.batch_norm_inference(a, w.detach(), b.detach() + 1, w, b, 1e-5)):
        assert torch.autograd.gradcheck(fn, (x,), atol=1e-7)


def test_conv_bias_activation_op():
    x = torch.randn(1, 3, 5, 5)
    w = torch.randn(4, 3, 3, 3)
    b = torch.randn(4)
    z = torch.randn(1, 4, 5, 5)
    y = tt.ops.conv_bias_activation(x, w, b, z, 1.0, 0.5, "relu", 0.0, [1, 1], [1, 1], [1, 1], [1, 1], 1)
    torch.testing.assert_close(y, torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1) + 0.5 * z))
    _opcheck(torch.ops.tridnn.conv_bias_activation.default,
             (x, w, b, z, 1.0, 0.5, "relu", 0.0, [1, 1], [1, 1], [1, 1], [1, 1], 1))


def test_bfloat16_and_channels_last_on_the_cpu():
    torch.manual_seed(4)
    conv = nn.Conv2d(4, 8, 3, padding=1).to(torch.bfloat16)
    mine = tt.convert(copy.deepcopy(conv))
    x = torch.randn(2, 4, 6, 6).to(torch.bfloat16).to(memory_format=torch.channels_last)
    got = mine(x)
    assert got.dtype == torch.bfloat16 and got.is_contiguous(memory_format=torch.channels_last)
    want = nn.functional.conv2d(x.float(), conv.weight.float(), conv.bias.float(), padding=1)
    assert_close(got.float(), want, 1e-2, "bf16 conv")


# -- nn layers ----------------------------------------------------------------------------------
LAYERS = [
    lambda: nn.Conv1d(4, 6, 3, stride=2, padding="valid", groups=2),
    lambda: nn.Conv1d(4, 6, 4, padding="same", dilation=2),
    lambda: nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect"),
    lambda: nn.Conv3d(4, 2, (2, 3, 3), padding=(0, 1, 1)),
    lambda: nn.BatchNorm1d(4),
    lambda: nn.BatchNorm2d(4, momentum=None),
    lambda: nn.BatchNorm3d(4, affine=False),
    lambda: nn.BatchNorm2d(4, track_running_stats=False),
    lambda: nn.ReLU6(), lambda: nn.LeakyReLU(0.3), lambda: nn.ELU(0.5), lambda: nn.Sigmoid(),
    lambda: nn.Tanh(), lambda: nn.SiLU(), lambda: nn.GELU(approximate="tanh"), lambda: nn.Softplus(2.0),
    lambda: nn.Hardswish(),
    lambda: nn.MaxPool1d(3, 2, 1), lambda: nn.AvgPool3d(2, 1, 1, count_include_pad=False),
    lambda: nn.AdaptiveAvgPool2d((None, 2)), lambda: nn.AdaptiveMaxPool1d(3),
    lambda: nn.Softmax(dim=-1), lambda: nn.LogSoftmax(dim=1),
]
INPUTS = {nn.Conv1d: (2, 4, 9), nn.Conv3d: (2, 4, 4, 5, 5), nn.BatchNorm1d: (5, 4),
          nn.BatchNorm3d: (2, 4, 2, 3, 3), nn.MaxPool1d: (2, 4, 9), nn.AvgPool3d: (2, 4, 3, 4, 4),
          nn.AdaptiveMaxPool1d: (2, 4, 9)}


@pytest.mark.parametrize("make", LAYERS, ids=lambda f: repr(f()))
def test_layer_matches_torch(make):
    torch.manual_seed(5)
    original = make().double()
    mine = tt.convert(copy.deepcopy(original))
    assert type(mine) is not type(original), "the layer was not converted"
    x = torch.randn(*INPUTS.get(type(original), (2, 4, 6, 7)), dtype=torch.float64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    for _ in range(2):  # twice: running statistics and num_batches_tracked evolve alike
        want, got = original(x), mine(x2)
    torch.testing.assert_close(got, want)
    dy = torch.randn_like(want)
    want.backward(dy)
    got.backward(dy)
    torch.testing.assert_close(x2.grad, x.grad)
    for (name, p), q in zip(mine.named_parameters(), original.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    for (name, a), b in zip(mine.named_buffers(), original.buffers()):
        torch.testing.assert_close(a, b, msg=name)


def test_batch_norm_1d_on_a_batch_of_vectors_in_eval_mode():
    bn = nn.BatchNorm1d(3).double()
    bn.running_mean.uniform_()
    bn.running_var.uniform_(0.5, 2)
    mine = tt.convert(copy.deepcopy(bn)).eval()
    bn.eval()
    x = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(mine(x), bn(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tt.convert(nn.Sequential(nn.Linear(2, 2)))  # nothing to convert, nothing to warn about


# -- CUDA tensors: the Triton backend (run with --gpu on a CUDA machine) -----------------------------
def _cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.gpu
def test_gpu_converted_cnn_matches_torch_forward_and_backward():
    _cuda_or_skip()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(6)
    reference = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Conv2d(16, 8, 3, stride=2, padding=1),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LogSoftmax(dim=1)).cuda()
    model = tt.convert(copy.deepcopy(reference))
    x = torch.randn(4, 3, 16, 16, device="cuda")
    got, want = model(x), reference(x)
    assert got.is_cuda
    assert_close(got, want, 1e-4, "CUDA logits")
    got.sum().backward()
    want.sum().backward()
    ref_params = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        assert_close(p.grad, ref_params[name].grad, 1e-3, f"CUDA grad of {name}")


@pytest.mark.gpu
def test_gpu_torchvision_resnet18_converted():
    _cuda_or_skip()
    torchvision = pytest.importorskip("torchvision")
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(7)
    reference = torchvision.models.resnet18(num_classes=10).cuda().double()
    model = tt.convert(copy.deepcopy(reference))
    x = torch.randn(2, 3, 64, 64, device="cuda", dtype=torch.float64)
    got, want = model(x), reference(x)
    assert_close(got, want, 1e-9, "torchvision ResNet-18 on CUDA")
    got.square().sum().backward()
    want.square().sum().backward()
    ref_params = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        assert_close(p.grad, ref_params[name].grad, 1e-7, f"grad of {name}")
    compiled = torch.compile(model.eval(), backend="inductor", dynamic=False)
    with torch.no_grad():
        assert_close(compiled(x), reference.eval()(x), 1e-9, "compiled on CUDA")
