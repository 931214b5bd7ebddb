"""The measured route: which kernel a default call runs, by pass, head dim, causal, length and
batch x heads (read by kernel/route.py; regenerate it for your GPU with the command below).

Measured by ``python -m benchmarks.route --table kernel/route_table.py --markdown .cache/device/route.md --json .cache/device/route.json``
on NVIDIA H200 (sm_90, 132 SMs), torch 2.11.0+cu130, Triton 3.6.0, 2026-12-03 11:36 UTC.
Each entry is the faster of our two kernels there, timed side by side with SDPA-cuDNN
(paired rounds); the comment gives each one's speed as a ratio to cuDNN's.
"""

MEASURED = {
    "command": 'python -m benchmarks.route --table kernel/route_table.py --markdown .cache/device/route.md --json .cache/device/route.json',
    "gpu": 'NVIDIA H200 (sm_90, 132 SMs)',
    "torch": '2.11.0+cu130',
    "triton": '3.6.0',
    "date": '2026-12-03 11:36 UTC',
}

FORWARD = {   # (head dim, causal, length, batch x heads) -> kernel
    (64, False, 256, 32): 'ws',   # triton 0.86, ws 0.87
    (64, False, 256, 256): 'triton',   # triton 0.77, ws 0.65
    (64, False, 512, 32): 'ws',   # triton 0.84, ws 0.86
    (64, False, 512, 256): 'ws',   # triton 0.78, ws 0.85
    (64, False, 1024, 32): 'triton',   # triton 0.95, ws 0.74
    (64, False, 1024, 256): 'ws',   # triton 0.85, ws 0.92
    (64, False, 2048, 32): 'ws',   # triton 0.92, ws 0.94
    (64, False, 2048, 256): 'ws',   # triton 0.90, ws 1.07
    (64, False, 4096, 32): 'ws',   # triton 0.93, ws 1.07
    (64, False, 4096, 256): 'ws',   # triton 0.94, ws 1.07
    (64, False, 8192, 32): 'ws',   # triton 0.95, ws 1.13
    (64, False, 8192, 256): 'ws',   # triton 0.96, ws 1.13
    (64, False, 16384, 32): 'ws',   # triton 0.96, ws 1.13
    (64, False, 16384, 256): 'ws',   # triton 0.97, ws 1.12
    (64, True, 256, 32): 'triton',   # triton 1.00, ws 0.77
    (64, True, 256, 256): 'triton',   # triton 0.72, ws 0.44
    (64, True, 512, 32): 'triton',   # triton 0.88, ws 0.80
    (64, True, 512, 256): 'triton',   # triton 0.72, ws 0.58
    (64, True, 1024, 32): 'triton',   # triton 0.88, ws 0.84
    (64, True, 1024, 256): 'triton',   # triton 0.77, ws 0.61
    (64, True, 2048, 32): 'ws',   # triton 0.90, ws 0.96
    (64, True, 2048, 256): 'triton',   # triton 0.85, ws 0.79
    (64, True, 4096, 32): 'ws',   # triton 0.92, ws 1.00
    (64, True, 4096, 256): 'triton',   # triton 0.92, ws 0.90
    (64, True, 8192, 32): 'ws',   # triton 0.97, ws 1.07
    (64, True, 8192, 256): 'ws',   # triton 0.98, ws 1.02
    (64, True, 16384, 32): 'ws',   # triton 1.01, ws 1.09
    (64, True, 16384, 256): 'ws',   # triton 1.02, ws 1.11
    (128, False, 256, 32): 'ws',   # triton 0.88, ws 1.04
    (128, False, 256, 256): 'ws',   # triton 0.57, ws 0.80
    (128, False, 512, 32): 'ws',   # triton 0.90, ws 1.06
    (128, False, 512, 256): 'ws',   # triton 0.62, ws 0.87
    (128, False, 1024, 32): 'ws',   # triton 0.78, ws 0.97
    (128, False, 1024, 256): 'ws',   # triton 0.70, ws 0.94
    (128, False, 2048, 32): 'ws',   # triton 0.79, ws 0.98
    (128, False, 2048, 256): 'ws',   # triton 0.78, ws 1.00
    (128, False, 4096, 32): 'ws',   # triton 0.82, ws 1.01
    (128, False, 4096, 256): 'ws',   # triton 0.81, ws 1.02
    (128, False, 8192, 32): 'ws',   # triton 0.85, ws 1.02
    (128, False, 8192, 256): 'ws',   # triton 0.83, ws 1.02
    (128, False, 16384, 32): 'ws',   # triton 0.84, ws 1.03
    (128, False, 16384, 256): 'ws',   # triton 0.88, ws 1.01
    (128, True, 256, 32): 'ws',   # triton 0.80, ws 1.03
    (128, True, 256, 256): 'ws',   # triton 0.58, ws 0.81
    (128, True, 512, 32): 'ws',   # triton 0.85, ws 1.07
    (128, True, 512, 256): 'ws',   # triton 0.56, ws 0.80
    (128, True, 1024, 32): 'ws',   # triton 1.00, ws 1.13
    (128, True, 1024, 256): 'ws',   # triton 0.62, ws 0.85
    (128, True, 2048, 32): 'ws',   # triton 0.94, ws 1.10
    (128, True, 2048, 256): 'ws',   # triton 0.71, ws 0.92
    (128, True, 4096, 32): 'ws',   # triton 0.93, ws 1.10
    (128, True, 4096, 256): 'ws',   # triton 0.80, ws 1.01
    (128, True, 8192, 32): 'ws',   # triton 0.92, ws 1.09
    (128, True, 8192, 256): 'ws',   # triton 0.87, ws 1.08
    (128, True, 16384, 32): 'ws',   # triton 0.93, ws 1.08
    (128, True, 16384, 256): 'ws',   # triton 0.89, ws 1.06
}

BACKWARD = {   # (head dim, causal, length, batch x heads) -> kernel
    (64, False, 256, 32): 'gluon',   # triton 0.90, gluon 1.22
    (64, False, 256, 256): 'triton',   # triton 1.04, gluon 1.04
    (64, False, 512, 32): 'gluon',   # triton 0.86, gluon 1.07
    (64, False, 512, 256): 'triton',   # triton 0.97, gluon 0.95
    (64, False, 1024, 32): 'gluon',   # triton 0.93, gluon 0.96
    (64, False, 1024, 256): 'gluon',   # triton 0.92, gluon 0.96
    (64, False, 2048, 32): 'gluon',   # triton 0.89, gluon 0.95
    (64, False, 2048, 256): 'gluon',   # triton 0.89, gluon 0.94
    (64, False, 4096, 32): 'gluon',   # triton 0.88, gluon 0.93
    (64, False, 4096, 256): 'gluon',   # triton 0.89, gluon 0.92
    (64, False, 8192, 32): 'gluon',   # triton 0.88, gluon 0.94
    (64, False, 8192, 256): 'gluon',   # triton 0.89, gluon 0.91
    (64, False, 16384, 32): 'gluon',   # triton 0.88, gluon 0.93
    (64, False, 16384, 256): 'gluon',   # triton 0.85, gluon 0.90
    (64, True, 256, 32): 'gluon',   # triton 1.12, gluon 1.36
    (64, True, 256, 256): 'gluon',   # triton 0.93, gluon 1.24
    (64, True, 512, 32): 'gluon',   # triton 1.03, gluon 1.24
    (64, True, 512, 256): 'gluon',   # triton 0.88, gluon 0.92
    (64, True, 1024, 32): 'gluon',   # triton 0.93, gluon 1.42
    (64, True, 1024, 256): 'triton',   # triton 0.86, gluon 0.64
    (64, True, 2048, 32): 'gluon',   # triton 0.90, gluon 1.26
    (64, True, 2048, 256): 'triton',   # triton 0.85, gluon 0.52
    (64, True, 4096, 32): 'gluon',   # triton 0.87, gluon 1.10
    (64, True, 4096, 256): 'triton',   # triton 0.85, gluon 0.44
    (64, True, 8192, 32): 'gluon',   # triton 0.86, gluon 1.02
    (64, True, 8192, 256): 'triton',   # triton 0.85, gluon 0.41
    (64, True, 16384, 32): 'gluon',   # triton 0.86, gluon 0.97
    (64, True, 16384, 256): 'triton',   # triton 0.87, gluon 0.41
    (128, False, 256, 32): 'gluon',   # triton 0.92, gluon 1.09
    (128, False, 256, 256): 'gluon',   # triton 0.88, gluon 1.03
    (128, False, 512, 32): 'gluon',   # triton 0.90, gluon 1.09
    (128, False, 512, 256): 'gluon',   # triton 0.81, gluon 0.98
    (128, False, 1024, 32): 'gluon',   # triton 0.83, gluon 1.03
    (128, False, 1024, 256): 'gluon',   # triton 0.77, gluon 0.97
    (128, False, 2048, 32): 'gluon',   # triton 0.78, gluon 0.99
    (128, False, 2048, 256): 'gluon',   # triton 0.76, gluon 0.98
    (128, False, 4096, 32): 'gluon',   # triton 0.76, gluon 0.99
    (128, False, 4096, 256): 'gluon',   # triton 0.77, gluon 0.99
    (128, False, 8192, 32): 'gluon',   # triton 0.77, gluon 0.99
    (128, False, 8192, 256): 'gluon',   # triton 0.79, gluon 0.99
    (128, False, 16384, 32): 'gluon',   # triton 0.77, gluon 0.98
    (128, False, 16384, 256): 'gluon',   # triton 0.78, gluon 1.02
    (128, True, 256, 32): 'gluon',   # triton 0.99, gluon 1.08
    (128, True, 256, 256): 'gluon',   # triton 0.85, gluon 0.97
    (128, True, 512, 32): 'gluon',   # triton 0.88, gluon 1.07
    (128, True, 512, 256): 'gluon',   # triton 0.79, gluon 0.85
    (128, True, 1024, 32): 'gluon',   # triton 0.89, gluon 1.31
    (128, True, 1024, 256): 'gluon',   # triton 0.74, gluon 0.77
    (128, True, 2048, 32): 'gluon',   # triton 0.82, gluon 1.18
    (128, True, 2048, 256): 'gluon',   # triton 0.72, gluon 0.73
    (128, True, 4096, 32): 'gluon',   # triton 0.75, gluon 1.06
    (128, True, 4096, 256): 'gluon',   # triton 0.70, gluon 0.73
    (128, True, 8192, 32): 'gluon',   # triton 0.72, gluon 1.01
    (128, True, 8192, 256): 'gluon',   # triton 0.69, gluon 0.77
    (128, True, 16384, 32): 'gluon',   # triton 0.68, gluon 0.97
    (128, True, 16384, 256): 'triton',   # triton 0.72, gluon 0.72
}
