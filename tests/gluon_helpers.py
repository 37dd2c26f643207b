"""What the Gluon kernel tests (test_gluon_conv, test_gluon_wgrad, test_gluon_stream) share:
the offline sm_90 compile's SASS and resource usage through Triton's own cuobjdump, and the
skip when that tool is not installed."""
import os
import re
import subprocess
import tempfile
from contextlib import contextmanager

import pytest


def cuobjdump():
    """Triton's bundled cuobjdump, or None."""
    import triton
    path = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    return path if os.path.exists(path) else None


def need_cuobjdump():
    """Skip the calling test where the SASS cannot be read."""
    if cuobjdump() is None:
        pytest.skip("Triton's cuobjdump is not installed")


def _dump(kernel, flag) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([cuobjdump(), flag, f.name], capture_output=True, text=True, check=True).stdout


def sass(kernel) -> str:
    """The SASS of a compiled kernel."""
    return _dump(kernel, "--dump-sass")


def registers(kernel) -> int:
    """Registers a thread of a compiled kernel."""
    return int(re.search(r"REG:(\d+)", _dump(kernel, "--dump-resource-usage")).group(1))


@contextmanager
def not_interpreted():
    """TRITON_INTERPRET unset for the block (an offline compile is not interpreted)."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


def need_hopper():
    """Skip the calling GPU test off a Hopper GPU; fail it under the interpreter (Gluon
    kernels do not run there)."""
    import torch
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper GPU")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.fail("Gluon does not run under the interpreter: set TRIDNN_GPU_TESTS=1")
