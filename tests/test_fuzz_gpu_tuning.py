"""benchmarks/fuzz_gpu.py's untimed tuning: over the templates, every launch config runs.

Why: the fuzz replaced the timing tuner by the first config (even templates) or the last
(odd ones), so a wrong config in the middle of a list could never be found; WINOGRAD's
wrong config happened to be the first. ``rotate`` (the default) starts template t at
candidate t mod the list's length."""
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fuzz_gpu  # noqa: E402
from tridnn.cuda import common  # noqa: E402


def _picks(monkeypatch, mode, templates, candidates, too_big=()):
    monkeypatch.setattr(common.Tuner, "pick", common.Tuner.pick)  # restored after the test
    monkeypatch.setattr(fuzz_gpu, "_TUNING", dict(fuzz_gpu._TUNING))
    fuzz_gpu.limit_tuning(mode)

    def launch(cfg, out):
        if cfg in too_big:
            raise RuntimeError("out of resources: shared memory")
    picks = []
    for t in templates:
        fuzz_gpu._TUNING["template"] = t
        picks.append(common.Tuner().pick("k", candidates, launch, torch.zeros(4), types.SimpleNamespace(type="cuda")))
    return picks


def test_rotate_runs_every_config(monkeypatch):
    cands = ["a", "b", "c", "d", "e"]
    assert _picks(monkeypatch, "rotate", range(7), cands) == ["a", "b", "c", "d", "e", "a", "b"]
    # alternate, for contrast: the middle configs never run
    assert set(_picks(monkeypatch, "alternate", range(7), cands)) == {"a", "e"}


def test_rotate_skips_a_config_that_does_not_fit(monkeypatch):
    assert _picks(monkeypatch, "rotate", [1, 2], ["a", "b", "c"], too_big=("b",)) == ["c", "c"]
