import os

# Triton kernels run on the CPU through Triton's interpreter unless a GPU run asks otherwise;
# this must be set before anything imports triton.
if os.environ.get("TRIDNN_GPU_TESTS") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util
import sys

import numpy as np
import pytest

if os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton"):
    # Python float kernel arguments become fp32 scalars, as the GPU compiler types them.
    import interpreter_fidelity

    interpreter_fidelity.install()

from tridnn import testing  # noqa: E402  (after the interpreter patch)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own find-cache directory."""
    monkeypatch.setenv("TRIDNN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def _seeded_torch(request):
    """torch's global generator starts each test from the test's own seed: under xdist a
    file's tests share a worker with other files, so the state left behind differs run to run."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(testing.seed_for(request.node.nodeid))


@pytest.fixture
def rng(request):
    """Fresh random inputs per test, the same in every run (salt: TRIDNN_TEST_SEED)."""
    return np.random.default_rng(testing.seed_for(request.node.nodeid))


def pytest_report_header(config):
    return f"tridnn test seeds: salt TRIDNN_TEST_SEED={testing.seed_salt()!r}"


def pytest_addoption(parser):
    parser.addoption("--gpu", action="store_true", help="run the tests marked gpu (needs CUDA)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--gpu"):
        skip = pytest.mark.skip(reason="GPU test: run with --gpu on a CUDA machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    if not os.environ.get("TRIDNN_SLOW"):
        skip = pytest.mark.skip(reason="slow test: set TRIDNN_SLOW=1")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)

