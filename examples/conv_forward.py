"""cuDNN's forward-convolution workflow, step by step, on the CPU with NumPy."""
import numpy as np

import tridnn
from tridnn import reference

rng = np.random.default_rng(0)
with tridnn.Handle() as handle:                                           # cudnnCreate
    x_desc = tridnn.TensorDescriptor.nchw(8, 64, 28, 28)                  # input, NCHW float32
    w_desc = tridnn.FilterDescriptor((128, 64, 3, 3))                     # K, C, R, S
    conv = tridnn.ConvolutionDescriptor(padding=1, stride=1, dilation=1)  # cross-correlation
    y_desc = tridnn.TensorDescriptor.nchw(*conv.output_dims(x_desc, w_desc))
    print("output dims:", y_desc.dims)

    print("heuristic ranking (get):")
    for r in tridnn.get_convolution_forward_algorithm(handle, x_desc, w_desc, conv, y_desc):
        print(f"  {r.algo.name:22s} {r.status.name:14s} est {r.time_ms:8.2f} ms  ws {r.memory:>10d} B"
              + (f"  ({r.reason})" if r.reason else ""))
    print("measured ranking (find):")
    perf = tridnn.find_convolution_forward_algorithm(handle, x_desc, w_desc, conv, y_desc)
    for r in perf:
        if r.status == tridnn.Status.SUCCESS:
            print(f"  {r.algo.name:22s} {r.time_ms:8.2f} ms  ws {r.memory:>10d} B")

    algo = perf[0].algo
    ws = np.empty(tridnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc, algo),
                  np.uint8)
    x = rng.standard_normal(x_desc.dims).astype(np.float32)
    w = rng.standard_normal(w_desc.dims).astype(np.float32)
    y = np.empty(y_desc.dims, np.float32)
    tridnn.convolution_forward(handle, 1.0, x_desc, x, w_desc, w, conv, algo, ws, 0.0, y_desc, y)
    err = np.abs(y - reference.conv_forward(x, w, 1, 1)).max()
    print(f"ran {algo.name}; max |error| against the float64 reference: {err:.2e}")
