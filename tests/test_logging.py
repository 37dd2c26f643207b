"""API-call logging (TRIDNN_LOGLEVEL / TRIDNN_LOGDEST) and the reproducer lines it writes."""
import inspect
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

import tridnn
from tridnn import cli
from tridnn import logging as tlog
from tridnn.reproduce import ConvSpec


@pytest.fixture(autouse=True)
def _logging_off_afterwards():
    yield
    tlog.configure("0", "stderr")


def conv_setup(layout="NHWC", dtype=np.float32, stride=1, pad=1, groups=1):
    handle = tridnn.Handle()
    fmt = tridnn.TensorFormat[layout]
    x_desc = tridnn.TensorDescriptor.packed((2, 4, 7, 6), dtype, fmt)
    w_desc = tridnn.FilterDescriptor((6, 4 // groups, 3, 2), dtype, fmt)
    conv = tridnn.ConvolutionDescriptor(padding=pad, stride=stride, groups=groups)
    y_desc = tridnn.TensorDescriptor.packed(conv.output_dims(x_desc, w_desc), dtype, fmt)
    arrays = {name: np.ones(d.physical_dims, dtype) for name, d in
              (("x", x_desc), ("w", w_desc.as_tensor()), ("y", y_desc))}
    return handle, x_desc, w_desc, conv, y_desc, arrays


def reproduce_lines(text):
    return [line.split("reproduce: ", 1)[1] for line in text.splitlines() if "reproduce: " in line]


def rerun(capsys, line):
    """Run a logged `tridnn run ...` line; returns the problem line it prints."""
    argv = shlex.split(line)
    assert argv[:2] == ["tridnn", "run"]
    capsys.readouterr()
    rc = cli.main(argv[1:])
    out = capsys.readouterr().out
    assert rc == 0, out
    return next(l for l in out.splitlines() if l.startswith("problem "))


def test_off_by_default_logs_nothing(capsys, tmp_path):
    tlog.configure("0", str(tmp_path / "log.txt"))
    handle, x_desc, w_desc, conv, y_desc, a = conv_setup()
    tridnn.convolution_forward(handle, 1.0, x_desc, a["x"], w_desc, a["w"], conv, "DIRECT",
                               handle.workspace(1 << 16), 0.0, y_desc, a["y"])
    assert not (tmp_path / "log.txt").exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_logged_call_reruns_the_same_problem(capsys, tmp_path, direction):
    log = tmp_path / "log.txt"
    tlog.configure("info", str(log))
    handle, x_desc, w_desc, conv, y_desc, a = conv_setup("NHWC", np.float16, stride=2, pad=(1, 0))
    ws = handle.workspace(1 << 20)
    if direction == "fwd":
        tridnn.convolution_forward(handle, 2.0, x_desc, a["x"], w_desc, a["w"], conv, "IMPLICIT_GEMM",
                                   ws, 0.5, y_desc, a["y"])
    elif direction == "bwd_data":
        tridnn.convolution_backward_data(handle, 1.0, w_desc, a["w"], y_desc, a["y"], conv, "ALGO_1",
                                         ws, 0.0, x_desc, a["x"])
    else:
        tridnn.convolution_backward_filter(handle, 1.0, x_desc, a["x"], y_desc, a["y"], conv, 0,
                                           ws, 0.0, w_desc, a["w"])
    text = log.read_text()
    name = {"fwd": "convolution_forward", "bwd_data": "convolution_backward_data",
            "bwd_filter": "convolution_backward_filter"}[direction]
    assert f"{name}() called" in text and f"{name}() returned" in text
    assert "conv_desc: ConvolutionDescriptor(padding=(1, 0)" in text
    [line] = reproduce_lines(text)
    assert f"--direction {direction}" in line and "--dtype float16" in line and "--layout NHWC" in line
    if direction == "fwd":
        assert "--alpha 2.0 --beta 0.5" in line and "--algo IMPLICIT_GEMM" in line
    tlog.configure("0")
    problem = rerun(capsys, line)
    expected = ConvSpec.from_descriptors(x_desc, w_desc, conv).to_string()
    assert problem.split()[1] == expected
    assert f"({direction}, float16, NHWC, cpu/numpy;" in problem


def test_functional_call_reproducer(capsys, tmp_path):
    log = tmp_path / "log.txt"
    tlog.configure("info", str(log))
    x = np.ones((1, 3, 8, 7), np.float32)
    w = np.ones((2, 3, 3, 3), np.float32)
    y = tridnn.conv(x, w, padding="same", stride=2)
    [line] = reproduce_lines(log.read_text())
    assert "--pad 0,1 --pad-post 1,1" in line or "--pad-post" in line
    tlog.configure("0")
    problem = rerun(capsys, line)
    spec = ConvSpec.parse(problem.split()[1])
    assert spec.out_spatial == y.shape[2:] and (spec.c, spec.k) == (3, 2)


def test_error_level_logs_only_failing_calls(capsys, tmp_path):
    log = tmp_path / "log.txt"
    tlog.configure("error", str(log))
    handle, x_desc, w_desc, conv, y_desc, a = conv_setup()
    ws = handle.workspace(1 << 16)
    tridnn.convolution_forward(handle, 1.0, x_desc, a["x"], w_desc, a["w"], conv, "DIRECT", ws, 0.0,
                               y_desc, a["y"])
    assert not log.exists() or log.read_text() == ""
    with pytest.raises(tridnn.BadParamError):
        tridnn.convolution_forward(handle, 1.0, x_desc, a["x"], w_desc, a["w"], conv, "DIRECT", ws,
                                   float("inf"), y_desc, a["y"])
    text = log.read_text()
    assert "convolution_forward() called" in text
    assert "E! #" in text and "raised BadParamError" in text and "beta must be finite" in text
    assert len(reproduce_lines(text)) == 1


def test_stdout_destination_and_results_unchanged(capsys):
    handle, x_desc, w_desc, conv, y_desc, a = conv_setup("NCHW")
    rng = np.random.default_rng(0)
    a["x"][...] = rng.integers(-2, 3, a["x"].shape)
    a["w"][...] = rng.integers(-2, 3, a["w"].shape)
    ws = handle.workspace(1 << 16)
    plain = tridnn.convolution_forward(handle, 1.0, x_desc, a["x"], w_desc, a["w"], conv, "GEMM", ws,
                                       0.0, y_desc, a["y"]).copy()
    tlog.configure("1", "stdout")
    logged = tridnn.convolution_forward(handle, 1.0, x_desc, a["x"], w_desc, a["w"], conv, "GEMM", ws,
                                        0.0, y_desc, a["y"])
    out = capsys.readouterr().out
    assert "convolution_forward() called" in out and "reproduce: tridnn run conv" in out
    np.testing.assert_array_equal(logged, plain)


def test_unwritable_destination_falls_back_to_stderr(capsys, tmp_path):
    tlog.configure("info", str(tmp_path / "no-such-dir" / "log.txt"))
    handle, x_desc, w_desc, conv, y_desc, a = conv_setup()
    tridnn.convolution_forward(handle, 1.0, x_desc, a["x"], w_desc, a["w"], conv, "DIRECT",
                               handle.workspace(1 << 16), 0.0, y_desc, a["y"])
    err = capsys.readouterr().err
    assert "cannot open TRIDNN_LOGDEST" in err and "convolution_forward() called" in err


def test_only_the_outermost_call_is_logged(capsys):
    namespace = {}

    def inner(v):
        return v + 1

    def outer(v):
        return namespace["inner"](v) * 2
    for fn in (inner, outer):
        fn.__module__ = "tridnn.api.example"
    namespace.update(inner=inner, outer=outer, _private=inner, helper=len)
    assert sorted(tlog.log_api_calls(namespace)) == ["inner", "outer"]
    tlog.configure("info", "stderr")
    assert namespace["outer"](1) == 4
    err = capsys.readouterr().err
    assert "outer() called" in err and "inner() called" not in err
    assert "i!     v: 1" in err


def test_wrapped_api_keeps_name_doc_and_signature():
    fn = tridnn.convolution_forward
    assert fn.__name__ == "convolution_forward" and fn.__doc__
    assert list(inspect.signature(fn).parameters)[:3] == ["handle", "alpha", "x_desc"]
    assert getattr(fn, "__tridnn_logged__", False)


def test_environment_variables_in_a_fresh_process(tmp_path):
    """The documented switch: set TRIDNN_LOGLEVEL and TRIDNN_LOGDEST before importing tridnn."""
    log = tmp_path / "env.log"
    code = ("import numpy as np, tridnn\n"
            "x = np.ones((1, 2, 5, 5), np.float32); w = np.ones((3, 2, 3, 3), np.float32)\n"
            "tridnn.conv(x, w, padding=1)\n")
    env = dict(os.environ, TRIDNN_LOGLEVEL="info", TRIDNN_LOGDEST=str(log))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    lines = reproduce_lines(log.read_text())
    assert len(lines) == 1 and lines[0].startswith("tridnn run conv --n 1 --c 2 --h 5 --w 5 --k 3")


@pytest.mark.parametrize("text, want", [(None, tlog.OFF), ("", tlog.OFF), ("0", tlog.OFF),
                                        ("off", tlog.OFF), ("error", tlog.ERRORS), ("1", tlog.CALLS),
                                        ("3", tlog.CALLS), ("info", tlog.CALLS)])
def test_levels(text, want):
    assert tlog.parse_level(text) == want


def test_every_exported_api_function_is_logged():
    """An export added below the logging block of tridnn/__init__.py would escape the log."""
    import tridnn.functional as functional
    for namespace in (vars(tridnn), vars(functional)):
        missed = [name for name, value in namespace.items()
                  if inspect.isfunction(value) and not name.startswith("_")
                  and (value.__module__.startswith("tridnn.api") or value.__module__ == "tridnn.functional")
                  and not getattr(value, "__tridnn_logged__", False)]
        assert not missed, f"not logged (exported after the logging block?): {missed}"


def test_logged_layer_calls_rerun(capsys, tmp_path):
    log = tmp_path / "log.txt"
    tlog.configure("info", str(log))
    h = tridnn.Handle()
    x_desc = tridnn.TensorDescriptor.nhwc(2, 3, 6, 6)
    x = np.random.default_rng(0).standard_normal((2, 6, 6, 3)).astype(np.float32)
    pool = tridnn.PoolingDescriptor("max", 2, stride=1)
    y_desc = tridnn.TensorDescriptor.nhwc(*tridnn.get_pooling_forward_output_dim(pool, x_desc))
    y = np.empty(y_desc.physical_dims, np.float32)
    tridnn.pooling_forward(h, pool, 1.0, x_desc, x, 0.0, y_desc, y)
    act = tridnn.ActivationDescriptor("elu", coef=0.5)
    tridnn.activation_forward(h, act, 2.0, x_desc, x, 0.0, x_desc, np.empty_like(x))
    tridnn.softmax_forward(h, "log", "channel", 1.0, x_desc, x, 0.0, x_desc, np.empty_like(x))
    bn_desc = tridnn.derive_bn_tensor_descriptor(x_desc, "spatial")
    ones, zeros = np.ones(bn_desc.dims, np.float32), np.zeros(bn_desc.dims, np.float32)
    tridnn.batch_norm_forward_inference(h, "spatial", 1.0, 0.0, x_desc, x, x_desc, np.empty_like(x), bn_desc,
                                        ones, zeros, zeros, ones, 1e-4)
    lines = reproduce_lines(log.read_text())
    assert [shlex.split(line)[2] for line in lines] == ["pool", "activation", "softmax", "batchnorm"]
    assert "--window 2 --pad 0 --stride 1" in lines[0] and "--layout NHWC" in lines[0]
    assert "--mode elu --coef 0.5" in lines[1] and "--alpha 2.0" in lines[1]
    assert "--algo log --mode channel" in lines[2]
    assert "--direction inference" in lines[3] and "--epsilon 0.0001" in lines[3]
    tlog.configure("0")
    for line in lines:
        assert "dims (2, 3, 6, 6)" in rerun(capsys, line)
