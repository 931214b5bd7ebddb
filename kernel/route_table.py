"""The measured route: which kernel a default call runs, by pass, head dim, causal, length and
batch x heads (read by kernel/route.py; regenerate it for your GPU with the command below).

Measured by ``python -m benchmarks.route --pass bwd --head-dim 64 --bh 4x8 --bh 16x16 --n 4096 --n 8192 --n 16384 --table kernel/route_table.py --update --json routeb64l.json --markdown routeb64l.md``
on NVIDIA H200 (sm_90, 132 SMs), torch 2.11.0+cu130, Triton 3.6.0, 2026-12-07 05:45 UTC.
Each entry is the fastest of our candidates there (kernel/candidates.py), timed side by side
with SDPA-cuDNN (paired rounds); the comment gives each one's speed as a ratio to cuDNN's.
The buckets this command did not measure keep the entries of the table it updated (measured 2026-12-03 11:36 UTC to 2026-12-07 05:44 UTC).
"""

MEASURED = {
    "command": 'python -m benchmarks.route --pass bwd --head-dim 64 --bh 4x8 --bh 16x16 --n 4096 --n 8192 --n 16384 --table kernel/route_table.py --update --json routeb64l.json --markdown routeb64l.md',
    "gpu": 'NVIDIA H200 (sm_90, 132 SMs)',
    "torch": '2.11.0+cu130',
    "triton": '3.6.0',
    "date": '2026-12-07 05:45 UTC',
}

FORWARD = {   # (head dim, causal, length, batch x heads) -> candidate
    (64, False, 256, 32): 'ws_64_p2',   # triton 0.89, triton_64x64 1.03, ws 0.89, ws_128 1.06, ws_64 1.39, ws_64x64 1.33, ws_64_p2 1.40, ws_64x64_p2 1.33, ws_64x64_r144 1.33, ws_64x64_p3 1.33, ws_64x64_p4 1.30
    (64, False, 256, 256): 'ws_64x64_p4',   # triton 0.77, triton_64x64 0.68, ws 0.65, ws_128 0.80, ws_64 0.79, ws_64x64 0.73, ws_64_p2 0.95, ws_64x64_p2 0.89, ws_64x64_r144 0.85, ws_64x64_p3 0.96, ws_64x64_p4 1.07
    (64, False, 256, 512): 'ws_64x64_p4',   # triton 0.68, triton_64x64 0.62, ws 0.62, ws_128 0.77, ws_64 0.75, ws_64x64 0.68, ws_64_p2 0.90, ws_64x64_p2 0.84, ws_64x64_r144 0.85, ws_64x64_p3 1.01, ws_64x64_p4 1.06
    (64, False, 512, 32): 'ws_64_p2',   # triton 0.85, triton_64x64 0.94, ws 0.86, ws_128 1.05, ws_64 1.16, ws_64x64 1.08, ws_64_p2 1.16, ws_64x64_p2 1.08, ws_64x64_r144 1.09, ws_64x64_p3 1.09, ws_64x64_p4 1.05
    (64, False, 512, 256): 'ws_64x64_p4',   # triton 0.78, triton_64x64 0.72, ws 0.85, ws_128 0.84, ws_64 0.83, ws_64x64 0.73, ws_64_p2 0.96, ws_64x64_p2 0.84, ws_64x64_r144 0.91, ws_64x64_p3 1.02, ws_64x64_p4 1.02
    (64, False, 512, 512): 'ws_64x64_p4',   # triton 0.76, triton_64x64 0.74, ws 0.85, ws_128 0.83, ws_64 0.82, ws_64x64 0.72, ws_64_p2 0.96, ws_64x64_p2 0.83, ws_64x64_r144 0.92, ws_64x64_p3 1.00, ws_64x64_p4 1.01
    (64, False, 1024, 32): 'ws_64x64_p4',   # triton 0.95, triton_64x64 0.73, ws 0.75, ws_128 0.94, ws_64 0.96, ws_64x64 0.86, ws_64_p2 1.01, ws_64x64_p2 0.90, ws_64x64_r144 0.82, ws_64x64_p3 0.83, ws_64x64_p4 1.02
    (64, False, 1024, 256): 'ws_64x64_p3',   # triton 0.85, triton_64x64 0.83, ws 0.91, ws_128 0.89, ws_64 0.88, ws_64x64 0.76, ws_64_p2 0.97, ws_64x64_p2 0.82, ws_64x64_r144 0.94, ws_64x64_p3 0.97, ws_64x64_p4 0.97
    (64, False, 1024, 512): 'ws_64x64_p4',   # triton 0.85, triton_64x64 0.84, ws 0.93, ws_128 0.91, ws_64 0.89, ws_64x64 0.77, ws_64_p2 0.99, ws_64x64_p2 0.84, ws_64x64_r144 0.96, ws_64x64_p3 0.96, ws_64x64_p4 1.00
    (64, False, 2048, 32): 'ws_64_p2',   # triton 0.92, triton_64x64 0.87, ws 0.95, ws_128 0.92, ws_64 0.94, ws_64x64 0.80, ws_64_p2 0.98, ws_64x64_p2 0.84, ws_64x64_r144 0.94, ws_64x64_p3 0.84, ws_64x64_p4 0.96
    (64, False, 2048, 256): 'ws',   # triton 0.90, triton_64x64 0.90, ws 1.06, ws_128 0.92, ws_64 0.94, ws_64x64 0.80, ws_64_p2 0.99, ws_64x64_p2 0.84, ws_64x64_r144 0.97, ws_64x64_p3 0.94, ws_64x64_p4 0.98
    (64, False, 2048, 512): 'ws',   # triton 0.90, triton_64x64 0.89, ws 1.05, ws_128 0.92, ws_64 0.93, ws_64x64 0.79, ws_64_p2 0.98, ws_64x64_p2 0.83, ws_64x64_r144 0.96, ws_64x64_p3 0.94, ws_64x64_p4 0.96
    (64, False, 4096, 32): 'ws',   # triton 0.93, ws 1.07, ws_64x64_r144 0.94, ws_64x64_p4 0.94
    (64, False, 4096, 256): 'ws',   # triton 0.94, ws 1.06, ws_64x64_r144 0.97, ws_64x64_p4 0.96
    (64, False, 8192, 32): 'ws',   # triton 0.95, ws 1.13, ws_64x64_r144 0.96, ws_64x64_p4 0.95
    (64, False, 8192, 256): 'ws',   # triton 0.96, ws 1.13, ws_64x64_r144 0.98, ws_64x64_p4 0.95
    (64, False, 16384, 32): 'ws',   # triton 0.96, ws 1.13, ws_64x64_r144 0.98, ws_64x64_p4 0.97
    (64, False, 16384, 256): 'ws',   # triton 0.97, ws 1.11, ws_64x64_r144 0.97, ws_64x64_p4 0.94
    (64, True, 256, 32): 'ws_64x64_r144',   # triton 0.99, triton_64x64 1.00, ws 0.73, ws_128 1.00, ws_64 1.25, ws_64x64 1.27, ws_64_p2 1.25, ws_64x64_p2 1.27, ws_128_p1 1.00, ws_64x64_r144 1.30, ws_64x64_p3 1.29, ws_64x64_p4 1.27
    (64, True, 256, 256): 'ws_64x64_p4',   # triton 0.71, triton_64x64 0.72, ws 0.42, ws_128 0.66, ws_64 0.75, ws_64x64 0.78, ws_64_p2 0.89, ws_64x64_p2 0.97, ws_128_p1 0.80, ws_64x64_r144 0.94, ws_64x64_p3 1.04, ws_64x64_p4 1.11
    (64, True, 256, 512): 'ws_64x64_p3',   # triton 0.64, triton_64x64 0.65, ws 0.36, ws_128 0.57, ws_64 0.66, ws_64x64 0.68, ws_64_p2 0.79, ws_64x64_p2 0.86, ws_128_p1 0.73, ws_64x64_r144 0.80, ws_64x64_p3 0.96, ws_64x64_p4 0.93
    (64, True, 512, 32): 'ws_64_p2',   # triton 0.88, triton_64x64 0.94, ws 0.77, ws_128 0.97, ws_64 1.17, ws_64x64 1.13, ws_64_p2 1.17, ws_64x64_p2 1.13, ws_128_p1 0.97, ws_64x64_r144 1.16, ws_64x64_p3 1.15, ws_64x64_p4 1.12
    (64, True, 512, 256): 'ws_64x64_p4',   # triton 0.71, triton_64x64 0.74, ws 0.55, ws_128 0.67, ws_64 0.73, ws_64x64 0.75, ws_64_p2 0.85, ws_64x64_p2 0.89, ws_128_p1 0.74, ws_64x64_r144 0.92, ws_64x64_p3 1.05, ws_64x64_p4 1.11
    (64, True, 512, 512): 'ws_64x64_p4',   # triton 0.68, triton_64x64 0.70, ws 0.52, ws_128 0.62, ws_64 0.68, ws_64x64 0.69, ws_64_p2 0.82, ws_64x64_p2 0.84, ws_128_p1 0.71, ws_64x64_r144 0.85, ws_64x64_p3 1.01, ws_64x64_p4 1.08
    (64, True, 1024, 32): 'ws_64x64_r144',   # triton 0.88, triton_64x64 0.91, ws 0.80, ws_128 1.09, ws_64 1.16, ws_64x64 1.20, ws_64_p2 1.15, ws_64x64_p2 1.09, ws_128_p1 0.99, ws_64x64_r144 1.34, ws_64x64_p3 1.14, ws_64x64_p4 1.24
    (64, True, 1024, 256): 'ws_64x64_p4',   # triton 0.76, triton_64x64 0.79, ws 0.61, ws_128 0.71, ws_64 0.80, ws_64x64 0.76, ws_64_p2 0.90, ws_64x64_p2 0.89, ws_128_p1 0.83, ws_64x64_r144 0.96, ws_64x64_p3 1.02, ws_64x64_p4 1.05
    (64, True, 1024, 512): 'ws_64x64_p4',   # triton 0.75, triton_64x64 0.78, ws 0.59, ws_128 0.69, ws_64 0.76, ws_64x64 0.73, ws_64_p2 0.88, ws_64x64_p2 0.86, ws_128_p1 0.83, ws_64x64_r144 0.93, ws_64x64_p3 1.01, ws_64x64_p4 1.03
    (64, True, 2048, 32): 'ws_64x64_r144',   # triton 0.89, triton_64x64 0.91, ws 0.94, ws_128 0.99, ws_64 1.06, ws_64x64 1.02, ws_64_p2 1.07, ws_64x64_p2 0.97, ws_128_p1 0.97, ws_64x64_r144 1.19, ws_64x64_p3 1.11, ws_64x64_p4 1.14
    (64, True, 2048, 256): 'ws_64x64_p4',   # triton 0.84, triton_64x64 0.87, ws 0.78, ws_128 0.78, ws_64 0.85, ws_64x64 0.79, ws_64_p2 0.93, ws_64x64_p2 0.86, ws_128_p1 0.89, ws_64x64_r144 0.99, ws_64x64_p3 0.99, ws_64x64_p4 1.00
    (64, True, 2048, 512): 'ws_64x64_p3',   # triton 0.84, triton_64x64 0.87, ws 0.77, ws_128 0.76, ws_64 0.84, ws_64x64 0.77, ws_64_p2 0.92, ws_64x64_p2 0.86, ws_128_p1 0.89, ws_64x64_r144 0.97, ws_64x64_p3 0.98, ws_64x64_p4 0.97
    (64, True, 4096, 32): 'ws_64x64_r144',   # triton 0.92, ws 0.99, ws_64x64_r144 1.13, ws_64x64_p4 1.04
    (64, True, 4096, 256): 'ws_64x64_r144',   # triton 0.91, ws 0.88, ws_64x64_r144 1.00, ws_64x64_p4 0.97
    (64, True, 4096, 512): 'ws_64x64_r144',   # triton 0.92, ws 0.87, ws_64x64_r144 0.99, ws_64x64_p4 0.97
    (64, True, 8192, 32): 'ws_64x64_r144',   # triton 0.97, ws 1.06, ws_64x64_r144 1.07, ws_64x64_p4 1.00
    (64, True, 8192, 256): 'ws_64x64_r144',   # triton 0.98, ws 0.99, ws_64x64_r144 1.01, ws_64x64_p4 0.96
    (64, True, 16384, 32): 'ws',   # triton 1.00, ws 1.08, ws_64x64_r144 1.04, ws_64x64_p4 0.96
    (64, True, 16384, 256): 'ws',   # triton 1.02, ws 1.05, ws_64x64_r144 1.02, ws_64x64_p4 0.99
    (128, False, 256, 32): 'ws_64x64',   # triton 0.89, triton_64x64 1.12, ws 1.04, ws_64x64 1.33, ws_64x64_p2 1.33, ws_p0 1.04
    (128, False, 256, 256): 'ws_64x64_p2',   # triton 0.58, triton_64x64 0.66, ws 0.82, ws_64x64 0.78, ws_64x64_p2 0.91, ws_p0 0.71
    (128, False, 256, 512): 'ws_64x64_p2',   # triton 0.52, triton_64x64 0.58, ws 0.77, ws_64x64 0.71, ws_64x64_p2 0.87, ws_p0 0.64
    (128, False, 512, 32): 'ws_64x64',   # triton 0.90, triton_64x64 0.94, ws 1.05, ws_64x64 1.07, ws_64x64_p2 1.07, ws_p0 1.05
    (128, False, 512, 256): 'ws_64x64_p2',   # triton 0.62, triton_64x64 0.65, ws 0.87, ws_64x64 0.79, ws_64x64_p2 0.89, ws_p0 0.75
    (128, False, 512, 512): 'ws_64x64_p2',   # triton 0.61, triton_64x64 0.64, ws 0.88, ws_64x64 0.78, ws_64x64_p2 0.89, ws_p0 0.74
    (128, False, 1024, 32): 'ws',   # triton 0.78, triton_64x64 0.78, ws 0.97, ws_64x64 0.88, ws_64x64_p2 0.92, ws_p0 0.91
    (128, False, 1024, 256): 'ws',   # triton 0.71, triton_64x64 0.70, ws 0.95, ws_64x64 0.82, ws_64x64_p2 0.88, ws_p0 0.85
    (128, False, 1024, 512): 'ws',   # triton 0.71, triton_64x64 0.70, ws 0.97, ws_64x64 0.83, ws_64x64_p2 0.90, ws_p0 0.86
    (128, False, 2048, 32): 'ws',   # triton 0.79, triton_64x64 0.76, ws 0.98, ws_64x64 0.86, ws_64x64_p2 0.89, ws_p0 0.93
    (128, False, 2048, 256): 'ws',   # triton 0.78, triton_64x64 0.75, ws 0.99, ws_64x64 0.86, ws_64x64_p2 0.89, ws_p0 0.93
    (128, False, 2048, 512): 'ws',   # triton 0.77, triton_64x64 0.75, ws 1.00, ws_64x64 0.85, ws_64x64_p2 0.89, ws_p0 0.93
    (128, False, 4096, 32): 'ws',   # triton 0.83, ws 1.01
    (128, False, 4096, 256): 'ws',   # triton 0.81, ws 1.02
    (128, False, 8192, 32): 'ws',   # triton 0.85, ws 1.02
    (128, False, 8192, 256): 'ws',   # triton 0.83, ws 1.02
    (128, False, 16384, 32): 'ws',   # triton 0.85, ws 1.03
    (128, False, 16384, 256): 'ws',   # triton 0.87, ws 1.01
    (128, True, 256, 32): 'ws_64x64_p2',   # triton 0.81, triton_64x64 1.05, ws 1.01, ws_64x64 1.28, ws_64x64_p2 1.29, ws_p0 1.02
    (128, True, 256, 256): 'ws_64x64_p2',   # triton 0.58, triton_64x64 0.67, ws 0.80, ws_64x64 0.79, ws_64x64_p2 0.91, ws_p0 0.71
    (128, True, 256, 512): 'ws_64x64_p2',   # triton 0.47, triton_64x64 0.54, ws 0.73, ws_64x64 0.69, ws_64x64_p2 0.80, ws_p0 0.64
    (128, True, 512, 32): 'ws_64x64',   # triton 0.85, triton_64x64 0.98, ws 1.03, ws_64x64 1.15, ws_64x64_p2 1.15, ws_p0 1.03
    (128, True, 512, 256): 'ws_64x64_p2',   # triton 0.56, triton_64x64 0.55, ws 0.81, ws_64x64 0.78, ws_64x64_p2 0.93, ws_p0 0.72
    (128, True, 512, 512): 'ws_64x64_p2',   # triton 0.51, triton_64x64 0.50, ws 0.80, ws_64x64 0.73, ws_64x64_p2 0.83, ws_p0 0.68
    (128, True, 1024, 32): 'ws_64x64',   # triton 1.00, triton_64x64 0.97, ws 1.13, ws_64x64 1.29, ws_64x64_p2 1.17, ws_p0 1.20
    (128, True, 1024, 256): 'ws',   # triton 0.62, triton_64x64 0.54, ws 0.98, ws_64x64 0.84, ws_64x64_p2 0.94, ws_p0 0.81
    (128, True, 1024, 512): 'ws',   # triton 0.60, triton_64x64 0.51, ws 0.95, ws_64x64 0.81, ws_64x64_p2 0.91, ws_p0 0.78
    (128, True, 2048, 32): 'ws_p0',   # triton 0.93, triton_64x64 0.86, ws 1.08, ws_64x64 1.10, ws_64x64_p2 1.04, ws_p0 1.13
    (128, True, 2048, 256): 'ws',   # triton 0.71, triton_64x64 0.56, ws 1.03, ws_64x64 0.89, ws_64x64_p2 0.92, ws_p0 0.91
    (128, True, 2048, 512): 'ws',   # triton 0.69, triton_64x64 0.52, ws 1.02, ws_64x64 0.87, ws_64x64_p2 0.88, ws_p0 0.89
    (128, True, 4096, 32): 'ws',   # triton 0.93, ws 1.01
    (128, True, 4096, 256): 'ws',   # triton 0.79, ws 1.05
    (128, True, 4096, 512): 'ws',   # triton 0.79, ws 1.05
    (128, True, 8192, 32): 'ws',   # triton 0.92, ws 1.00
    (128, True, 8192, 256): 'ws',   # triton 0.86, ws 1.07
    (128, True, 16384, 32): 'ws',   # triton 0.93, ws 1.08
    (128, True, 16384, 256): 'ws',   # triton 0.89, ws 1.08
}

BACKWARD = {   # (head dim, causal, length, batch x heads) -> candidate
    (64, False, 256, 32): 'gluon',   # triton 0.90, gluon 1.24
    (64, False, 256, 256): 'triton',   # triton 1.04, gluon 1.03
    (64, False, 256, 512): 'triton',   # triton 1.03, gluon 1.00
    (64, False, 512, 32): 'gluon',   # triton 0.87, gluon 1.06
    (64, False, 512, 256): 'triton',   # triton 0.97, gluon 0.96
    (64, False, 512, 512): 'triton',   # triton 0.97, gluon 0.94
    (64, False, 1024, 32): 'gluon',   # triton 0.94, gluon 0.96
    (64, False, 1024, 256): 'gluon',   # triton 0.92, gluon 0.96
    (64, False, 1024, 512): 'gluon',   # triton 0.92, gluon 0.94
    (64, False, 2048, 32): 'gluon',   # triton 0.90, gluon 0.95
    (64, False, 2048, 256): 'gluon',   # triton 0.90, gluon 0.94
    (64, False, 2048, 512): 'gluon',   # triton 0.89, gluon 0.92
    (64, False, 4096, 32): 'gluon',   # triton 0.88, gluon 0.93
    (64, False, 4096, 256): 'gluon',   # triton 0.89, gluon 0.93
    (64, False, 8192, 32): 'gluon',   # triton 0.88, gluon 0.94
    (64, False, 8192, 256): 'gluon',   # triton 0.89, gluon 0.91
    (64, False, 16384, 32): 'gluon',   # triton 0.89, gluon 0.94
    (64, False, 16384, 256): 'gluon',   # triton 0.88, gluon 0.90
    (64, True, 256, 32): 'gluon',   # triton 1.13, gluon 1.32
    (64, True, 256, 256): 'gluon',   # triton 0.93, gluon 1.23
    (64, True, 256, 512): 'gluon',   # triton 0.89, gluon 1.09
    (64, True, 512, 32): 'gluon',   # triton 1.03, gluon 1.23
    (64, True, 512, 256): 'gluon',   # triton 0.88, gluon 1.10
    (64, True, 512, 512): 'gluon',   # triton 0.87, gluon 1.04
    (64, True, 1024, 32): 'gluon',   # triton 0.94, gluon 1.41
    (64, True, 1024, 256): 'gluon',   # triton 0.86, gluon 1.07
    (64, True, 1024, 512): 'gluon',   # triton 0.85, gluon 1.04
    (64, True, 2048, 32): 'gluon',   # triton 0.90, gluon 1.25
    (64, True, 2048, 256): 'gluon',   # triton 0.85, gluon 1.04
    (64, True, 2048, 512): 'gluon',   # triton 0.85, gluon 1.03
    (64, True, 4096, 32): 'gluon',   # triton 0.87, gluon 1.12
    (64, True, 4096, 256): 'gluon',   # triton 0.85, gluon 1.02
    (64, True, 8192, 32): 'gluon',   # triton 0.86, gluon 1.04
    (64, True, 8192, 256): 'gluon',   # triton 0.85, gluon 0.99
    (64, True, 16384, 32): 'gluon',   # triton 0.86, gluon 1.00
    (64, True, 16384, 256): 'gluon',   # triton 0.87, gluon 0.97
    (128, False, 256, 32): 'gluon_1c',   # triton 0.92, gluon 1.09, gluon_1c 1.21
    (128, False, 256, 256): 'gluon',   # triton 0.88, gluon 1.02, gluon_1c 0.83
    (128, False, 256, 512): 'gluon',   # triton 0.85, gluon 0.98, gluon_1c 0.79
    (128, False, 512, 32): 'gluon',   # triton 0.90, gluon 1.08, gluon_1c 0.83
    (128, False, 512, 256): 'gluon',   # triton 0.81, gluon 0.99, gluon_1c 0.73
    (128, False, 512, 512): 'gluon',   # triton 0.79, gluon 0.97, gluon_1c 0.72
    (128, False, 1024, 32): 'gluon',   # triton 0.82, gluon 1.03, gluon_1c 0.71
    (128, False, 1024, 256): 'gluon',   # triton 0.77, gluon 0.99, gluon_1c 0.69
    (128, False, 1024, 512): 'gluon',   # triton 0.76, gluon 0.98, gluon_1c 0.68
    (128, False, 2048, 32): 'gluon',   # triton 0.77, gluon 0.99, gluon_1c 0.66
    (128, False, 2048, 256): 'gluon',   # triton 0.76, gluon 0.99, gluon_1c 0.67
    (128, False, 2048, 512): 'gluon',   # triton 0.76, gluon 0.99, gluon_1c 0.66
    (128, False, 4096, 32): 'gluon',   # triton 0.76, gluon 0.99
    (128, False, 4096, 256): 'gluon',   # triton 0.77, gluon 1.00
    (128, False, 8192, 32): 'gluon',   # triton 0.77, gluon 0.99
    (128, False, 8192, 256): 'gluon',   # triton 0.79, gluon 0.99
    (128, False, 16384, 32): 'gluon',   # triton 0.79, gluon 0.99
    (128, False, 16384, 256): 'gluon',   # triton 0.80, gluon 1.02
    (128, True, 256, 32): 'gluon_1c',   # triton 0.99, gluon 1.07, gluon_1c 1.24
    (128, True, 256, 256): 'gluon',   # triton 0.85, gluon 1.01, gluon_1c 0.89
    (128, True, 256, 512): 'gluon',   # triton 0.82, gluon 0.95, gluon_1c 0.84
    (128, True, 512, 32): 'gluon_1c',   # triton 0.89, gluon 1.07, gluon_1c 1.11
    (128, True, 512, 256): 'gluon',   # triton 0.79, gluon 0.99, gluon_1c 0.81
    (128, True, 512, 512): 'gluon',   # triton 0.77, gluon 0.97, gluon_1c 0.78
    (128, True, 1024, 32): 'gluon',   # triton 0.89, gluon 1.31, gluon_1c 1.07
    (128, True, 1024, 256): 'gluon',   # triton 0.74, gluon 1.01, gluon_1c 0.77
    (128, True, 1024, 512): 'gluon',   # triton 0.73, gluon 0.99, gluon_1c 0.74
    (128, True, 2048, 32): 'gluon',   # triton 0.81, gluon 1.19, gluon_1c 0.88
    (128, True, 2048, 256): 'gluon',   # triton 0.72, gluon 1.00, gluon_1c 0.71
    (128, True, 2048, 512): 'gluon',   # triton 0.70, gluon 0.99, gluon_1c 0.69
    (128, True, 4096, 32): 'gluon',   # triton 0.75, gluon 1.09
    (128, True, 4096, 256): 'gluon',   # triton 0.70, gluon 1.00
    (128, True, 8192, 32): 'gluon',   # triton 0.72, gluon 1.04
    (128, True, 8192, 256): 'gluon',   # triton 0.69, gluon 1.00
    (128, True, 16384, 32): 'gluon',   # triton 0.67, gluon 1.01
    (128, True, 16384, 256): 'gluon',   # triton 0.74, gluon 1.03
}
