"""The Gluon forward candidates of kernel/candidates.py cross-compiled for sm_90 under the installed Triton:
each one's config, shared memory, registers at launch and stack (spills), as a Markdown table.

    python scripts/candidate_resources.py          # run with each Triton's venv (no GPU needed)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel.candidates import FORWARD  # noqa: E402
from kernel.gluon.fwd.launch import config_from  # noqa: E402


def cases() -> list[dict]:
    found = []
    for name, candidate in FORWARD.items():
        if candidate.kernel != "ws":
            continue
        for head_dim in candidate.head_dims:
            for causal in (False, True):
                config = config_from("ws", head_dim, causal, candidate.settings)
                found.append(dict(config=asdict(config), head_dim=head_dim, causal=causal, n_q=1000, n_k=1000,
                                  split=config.may_split and not causal, name=name))
    return found


def main() -> int:
    import triton

    chosen = cases()
    done = subprocess.run([sys.executable, "-m", "kernel.gluon.fwd.compile"], input=json.dumps(chosen),
                          capture_output=True, text=True, env=dict(os.environ, TRITON_INTERPRET="0"), check=True)
    print(f"Triton {triton.__version__}, sm_90, N_q = N_k = 1000\n")
    print("| candidate | D | mask | tile | stages | persistent | consumer regs | shared B | regs at launch | stack B |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case, report in zip(chosen, json.loads(done.stdout)):
        c, res = case["config"], report.get("resources") or {}
        print(f"| {case['name']} | {case['head_dim']} | {'causal' if case['causal'] else 'full'} | "
              f"{c['block_m']}x{c['block_n']} | {c['num_stages']} | {c['persistent']} | {c['consumer_regs']} | "
              f"{report.get('shared', report.get('error'))} | {res.get('REG', 'n/a')} | {res.get('STACK', 'n/a')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
