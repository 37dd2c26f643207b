"""The tridnn command: info, cache, find, run (reproducers) and bench, on tiny problems."""
import json
import os
import shlex
import textwrap

import numpy as np
import pytest

import tridnn
from tridnn import cli
from tridnn.algorithms import registry
from tridnn.reproduce import ConvSpec
from tridnn.types import ConvFwdAlgo

TINY = "mb2ic4ih7oc6kh3ph1"


def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def problem_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("problem "))


def reproduce_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("reproduce: ")).split(": ", 1)[1]


# -- problem strings -------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [
    ConvSpec.make(8, 64, 64, (56, 56), 3, pad=1),
    ConvSpec.make(2, 4, 6, (10, 11), (3, 2), stride=(2, 1), pad=(1, 0), pad_post=(2, 1),
                  dilation=(2, 1), groups=2, name="odd"),
    ConvSpec.make(1, 3, 5, (17,), 5, stride=2, pad=2),
    ConvSpec.make(1, 8, 8, (4, 6, 5), (3, 1, 2), pad=(1, 0, 1), groups=8),
])
def test_problem_string_round_trip(spec):
    assert ConvSpec.parse(spec.to_string()) == spec


def test_problem_string_benchdnn_defaults():
    spec = ConvSpec.parse("mb8ic64ih56oc64kh3ph1")
    assert spec == ConvSpec.make(8, 64, 64, (56, 56), 3, pad=1)
    assert ConvSpec.parse("g2mb1ic4id5ih6iw7oc4kd1kh3kw3dh1_n\"x\"").dilation == (1, 2, 2)
    assert ConvSpec.parse("ic3iw9oc2kw3").spatial == (9,)  # 1D, batch defaults to 2 as in benchdnn
    assert ConvSpec.parse('mb1ic2ih5oc2kh3n"res 2"').name == "res 2"


@pytest.mark.parametrize("text, message", [
    ("mb2ic4xx7", "cannot read problem"),
    ("mb2ic4ih7ih8oc2", "twice"),
    ("mb2ih7oc2", "needs ic"),
    ("mb2ic4oc2kh3", "no input size"),
    ("mb2ic4ih7oc4kh3ph2oh5", "does not fit"),
    ("mb2ic4ih7oc6g4kh3", "divisible by groups"),
])
def test_problem_string_errors(text, message):
    with pytest.raises(tridnn.BadParamError, match=message):
        ConvSpec.parse(text)


# -- tridnn info / cache / find --------------------------------------------------------------
def test_info(capsys, tmp_path):
    rc, out, _ = run_cli(capsys, "info")
    assert rc == 0
    assert f"tridnn {tridnn.__version__}" in out
    assert "numpy" in out and "cpu:" in out
    assert str(tmp_path / "cache") in out  # conftest points the find cache here


def test_find_fills_the_cache_and_cache_clears_it(capsys):
    rc, out, _ = run_cli(capsys, "cache")
    assert rc == 0 and "entries: 0" in out
    rc, out, _ = run_cli(capsys, "find", TINY, "mb1ic3iw9oc2kw3", "--direction", "fwd,bwd_data",
                         "--time-budget", "0.01", "--no-progress")
    assert rc == 0, out
    assert out.count("fwd") >= 2 and "bwd_data" in out
    rc, out, _ = run_cli(capsys, "cache", "--list")
    assert "entries: 4" in out
    assert "conv/fwd/FLOAT" in out
    rc, out, _ = run_cli(capsys, "cache", "--clear")
    assert rc == 0 and "cleared 4 entries" in out
    _, out, _ = run_cli(capsys, "cache")
    assert "entries: 0" in out


def test_find_a_torch_model(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "tiny_model.py").write_text(textwrap.dedent("""
        import torch
        def build():
            return torch.nn.Sequential(
                torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                torch.nn.Conv2d(4, 4, 3, padding=1),                 # same problem as the next one
                torch.nn.Conv2d(4, 4, 3, padding=1),
                torch.nn.Conv2d(4, 6, 2, stride=2, padding="valid"),
                torch.nn.Conv2d(6, 6, 3, padding="same", dilation=2, groups=3))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    from tridnn.bench import model_conv_specs
    specs = model_conv_specs("tiny_model:build", (1, 3, 8, 8))
    assert [s.name for s in specs] == ["0", "2", "4", "5"]  # the duplicate layer is found once
    assert specs[2].stride == (2, 2) and specs[2].spatial == (8, 8)
    assert specs[3].pad == (2, 2) and specs[3].pad_post == (2, 2) and specs[3].groups == 3
    rc, out, _ = run_cli(capsys, "find", "--model", "tiny_model:build", "--input-shape", "1,3,8,8",
                         "--direction", "fwd", "--time-budget", "0.01", "--no-progress")
    assert rc == 0, out
    assert "(4 entries)" in out


def test_find_model_errors(capsys):
    rc, _, err = run_cli(capsys, "find", "--model", "no_colon_here", "--no-progress")
    assert rc == 2 and "module:attr" in err
    rc, _, err = run_cli(capsys, "find", "--model", "json:nothing_here", "--no-progress")
    assert rc == 2 and "cannot load" in err


# -- tridnn run conv ---------------------------------------------------------------------------
def test_run_conv_from_flags_matches_the_problem_string(capsys):
    rc, out_flags, _ = run_cli(capsys, "run", "conv", "--n", "2", "--c", "4", "--h", "7", "--w", "7",
                               "--k", "6", "--r", "3", "--s", "3", "--pad", "1", "--stride", "1",
                               "--dilation", "1", "--groups", "1", "--dtype", "float32",
                               "--layout", "NHWC", "--direction", "fwd", "--algo", "auto")
    assert rc == 0, out_flags
    rc, out_string, _ = run_cli(capsys, "run", "conv", TINY, "--layout", "NHWC")
    assert rc == 0
    assert problem_line(out_flags) == problem_line(out_string)
    assert " ok " in out_flags and ("exact" in out_flags or "within tolerance" in out_flags)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("dtype, layout", [("float32", "NCHW"), ("float16", "NHWC"),
                                           ("bfloat16", "strided"), ("float64", "NHWC")])
def test_run_conv_every_algorithm_checks_out(capsys, direction, dtype, layout):
    rc, out, err = run_cli(capsys, "run", "conv", "mb2ic4ih7iw6oc6kh3kw2sh2ph1", "--direction", direction,
                           "--dtype", dtype, "--layout", layout, "--algo", "all", "--repeat", "1",
                           "--alpha", "2", "--beta", "0.5")
    assert rc == 0, out + err
    table = out.split("-----", 1)[1]
    assert "mismatch" not in table and " ok " in table
    for algo in registry.algorithms("conv", direction, "numpy"):
        assert algo.name in table


def test_run_conv_reproduce_line_reruns_the_same_problem(capsys):
    rc, out, _ = run_cli(capsys, "run", "conv", "g2mb1ic4ih6iw5oc4oh4kh3kw2sh2ph1pw0dh1",
                         "--mode", "convolution", "--algo", "DIRECT", "--beta", "1", "--repeat", "1")
    assert rc == 0
    line = reproduce_line(out)
    argv = shlex.split(line)
    assert argv[:3] == ["tridnn", "run", "conv"] and "--pad-post" in argv and "DIRECT" in argv
    rc, again, _ = run_cli(capsys, *argv[1:])
    assert rc == 0
    assert problem_line(again) == problem_line(out)
    assert reproduce_line(again) == line


def test_run_conv_detects_a_wrong_result(capsys, monkeypatch):
    direct = registry.by_enum("conv", "fwd", "numpy", ConvFwdAlgo.DIRECT)
    real_run = direct.run

    def off_by_one(problem, tensors, workspace, alpha, beta, epilogue=None):
        real_run(problem, tensors, workspace, alpha, beta)
        tensors["y"][0, 0, 0, 0] += 1
    monkeypatch.setattr(direct, "run", off_by_one)
    rc, out, err = run_cli(capsys, "run", "conv", TINY, "--algo", "DIRECT", "--repeat", "1")
    assert rc == 1
    assert "mismatch" in out and "MISMATCH" in err


def test_run_conv_not_applicable_algorithm_is_reported(capsys):
    # FFT_TILING declines a plane that fits one FFT tile; a single algorithm that cannot run fails.
    rc, out, err = run_cli(capsys, "run", "conv", TINY, "--algo", "FFT_TILING")
    assert rc == 2
    assert "not supported" in out and "FFT_TILING" in err


@pytest.mark.parametrize("argv, message", [
    (["mb2ic4ih7oc6kh3", "--c", "4"], "not both"),
    (["--c", "4", "--k", "4", "--r", "3"], "input size"),
    (["--c", "4", "--h", "5", "--k", "4"], "kernel size"),
    (["--c", "4", "--w", "5", "--k", "4", "--r", "3"], "--r do not apply to a 1D"),
    (["--c", "4", "--h", "5", "--k", "4", "--r", "3", "--pad", "1,1,1"], "3 entries"),
    (["--c", "4", "--h", "5", "--k", "4", "--r", "3", "--stride", "x"], "--stride must be"),
    ([TINY, "--layout", "NCWH"], "unknown layout 'NCWH'"),
    ([TINY, "--dtype", "int8"], "unsupported data type"),
    ([TINY, "--direction", "sideways"], "unknown direction 'sideways'"),
    ([TINY, "--algo", "MAGIC"], "unknown fwd convolution algorithm 'MAGIC'"),
    (["mb2ic4ih3oc6kh5"], "output would be"),
])
def test_run_conv_bad_input(capsys, argv, message):
    rc, _, err = run_cli(capsys, "run", "conv", *argv)
    assert rc == 2
    assert message in err


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("info", "demo", "bench", "find", "cache", "run"):
        assert command in out


# -- tridnn bench -------------------------------------------------------------------------------
def test_bench_against_torch_writes_json_and_plot(capsys, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    json_path, png_path = tmp_path / "b.json", tmp_path / "b.png"
    rc, out, _ = run_cli(capsys, "bench", TINY, "mb1ic3iw9oc2kw3sw2", "--direction", "fwd,bwd_data",
                         "--compare", "torch", "--repeat", "2", "--time-budget", "0.01",
                         "--json", str(json_path), "--plot", str(png_path), "--no-progress")
    assert rc == 0, out
    assert "ratio" in out and "geomean" in out
    doc = json.loads(json_path.read_text())
    rows = doc["rows"]
    assert len(rows) == 4 and all(r["status"] == "ok" and r["best"] for r in rows)
    assert all(r["ms"] > 0 and r["torch_ms"] > 0 and r["ratio"] == pytest.approx(r["ms"] / r["torch_ms"])
               for r in rows)
    assert doc["summary"]["compared"] == 4
    assert doc["environment"]["tridnn"] == tridnn.__version__
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_all_algorithms_marks_the_fastest(capsys, tmp_path):
    json_path = tmp_path / "all.json"
    rc, out, _ = run_cli(capsys, "bench", "--suite", "regression", "--layers", "c1_k1,pad3_k1",
                         "--algo", "all", "--repeat", "1", "--json", str(json_path), "--no-progress")
    assert rc == 0, out
    rows = json.loads(json_path.read_text())["rows"]
    for layer in ("c1_k1", "pad3_k1"):
        mine = [r for r in rows if r["layer"] == layer]
        assert len(mine) == len(registry.algorithms("conv", "fwd", "numpy"))
        ok = [r for r in mine if r["status"] == "ok"]
        best = [r for r in mine if r["best"]]
        assert len(best) == 1 and best[0]["ms"] == min(r["ms"] for r in ok)
        assert all(r["status"] in ("ok", "not supported") for r in mine)


def test_bench_bad_suite_and_layer(capsys):
    rc, _, err = run_cli(capsys, "bench", "--suite", "vgg", "--no-progress")
    assert rc == 2 and "unknown suite 'vgg'" in err
    rc, _, err = run_cli(capsys, "bench", "--suite", "regression", "--layers", "nope", "--no-progress")
    assert rc == 2 and "unknown layers ['nope']" in err


def test_bench_uses_the_suite_weights(capsys):
    from tridnn import bench, shapes
    spec = ConvSpec.from_shape(shapes.RESNET50[2], 1)  # res2_3x3 occurs 3 times
    spec = ConvSpec.make(1, 4, 4, (5, 5), 3, pad=1, name=spec.name)
    config = bench.BenchConfig(repeat=1, check=False)
    rows = bench.run_bench(tridnn.Handle(), [spec], config, progress=False, weights={spec.name: 3})
    assert rows[0].count == 3
    s = bench.summarize(rows)
    assert s["total_ms"] == pytest.approx(3 * rows[0].ms)
    assert np.isnan(s["geomean_ratio"])


# -- the README ----------------------------------------------------------------------------------
README = __import__("pathlib").Path(__file__).resolve().parent.parent / "README.md"


def test_readme_commands_come_first():
    first_block = README.read_text().split("```")[1].splitlines()[1:]
    assert first_block == ['pip install -e ".[demo]" && tridnn demo',
                           'pip install -e ".[test]" && python -m pytest -q -n auto --dist loadfile']


def test_readme_python_examples_run():
    """Every python block of the README runs as written (in order, as a reader would)."""
    pytest.importorskip("torch")
    import re
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 3
    namespace = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md python block {i}", "exec"), namespace)


# -- tridnn run pool / softmax / activation / batchnorm -------------------------------------------
@pytest.mark.parametrize("argv", [
    "pool --dims 2,3,7,8 --window 3 --stride 2 --pad 1",
    "pool --dims 2,3,7,8 --mode avg_exclude --window 2 --pad 1 --direction bwd --layout NHWC --beta 0.5",
    "pool --dims 1,2,5,6,7 --mode average_count_include_padding --window 2,3,2 --dtype float16",
    "softmax --dims 2,5,3,3 --algo log --direction bwd --alpha 2",
    "softmax --dims 4,10 --mode instance --dtype bfloat16",
    "activation --dims 2,3,4,4 --mode gelu --direction bwd --layout strided",
    "activation --dims 2,3,9 --mode clipped_relu --coef 1.5 --beta 1",
    "batchnorm --dims 4,3,5,5",
    "batchnorm --dims 4,3,5,5 --direction bwd --alpha 2 --beta 1 --layout NHWC",
    "batchnorm --dims 4,3,5,5 --direction inference --mode per_activation --dtype float64",
])
def test_run_layer_checks_out(capsys, argv):
    rc, out, err = run_cli(capsys, "run", *argv.split())
    assert rc == 0, out + err
    assert "within tolerance" in out
    assert reproduce_line(out) == "tridnn run " + argv


def test_run_layer_detects_a_wrong_result(capsys, monkeypatch):
    from tridnn.cpu import softmax as cpu_softmax
    real = cpu_softmax.softmax_forward

    def skewed(**kwargs):
        real(**kwargs)
        kwargs["y"][0, 0] += 0.01
    monkeypatch.setattr(cpu_softmax, "softmax_forward", skewed)
    rc, out, err = run_cli(capsys, "run", "softmax", "--dims", "2,5")
    assert rc == 1
    assert "mismatch" in out and "MISMATCH" in err


@pytest.mark.parametrize("argv, message", [
    ("pool --dims 2,3", "needs N,C and at least one spatial dim"),
    ("pool --dims 2,3,x", "--dims must be integers"),
    ("pool --dims 2,3,8,8 --window 2,2,2", "3 entries"),
    ("pool --dims 2,3,8,8 --mode median", "median"),
    ("softmax --dims 2,5 --direction sideways", "unknown direction 'sideways'"),
    ("activation --dims 2,3,4 --mode clipped_relu", "coef > 0"),
    ("batchnorm --dims 2,3,4 --direction bwd_data", "valid: fwd, inference, bwd"),
])
def test_run_layer_bad_input(capsys, argv, message):
    rc, _, err = run_cli(capsys, "run", *argv.split())
    assert rc == 2
    assert message in err


def test_run_conv_on_the_triton_backend_through_the_interpreter(capsys):
    """The device path of the reproducer (torch tensors in, torch tensors out), on the CPU."""
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest unless TRIDNN_GPU_TESTS=1)")
    rc, out, err = run_cli(capsys, "run", "conv", "mb1ic2ih4oc3kh3ph1", "--backend", "triton",
                           "--algo", "IMPLICIT_GEMM", "--repeat", "1", "--beta", "0.5")
    assert rc == 0, out + err
    assert "exact" in out and "cpu/triton" in out
    assert reproduce_line(out).endswith("--beta 0.5 --backend triton")


def test_run_float64_on_the_triton_backend_keeps_float64(capsys):
    """Inputs go into torch tensors and results come back through float64: a float32 hop
    would put a float64 batch norm ~1e-8 off its 1e-9 tolerance."""
    pytest.importorskip("triton")
    rc, out, err = run_cli(capsys, "run", "batchnorm", "--dims", "2,3,7", "--mode", "spatial_persistent",
                           "--epsilon", "0.0001", "--dtype", "float64", "--layout", "NCHW", "--direction", "bwd",
                           "--backend", "triton")
    assert rc == 0, out + err
    assert "mismatch" not in out.split("-----", 1)[1]
