# ruff: noqa: E501 -- the mutants quote source lines as they are
"""The 2026-12-05 mutants: one-line bugs in what that day's battery run fixed (long names, batch x heads, a stderr
that cannot be written, Ctrl-C twice as the compile pool closes, a pasted list under the interpreter, the lse's
own rounding in the gradient rule) and in the sweep's wait for a trial that died, for ``scripts/mutants.py
--group battery``. Each is (name, file, text before, text after, tests).
"""

BAD_INPUTS = ["tests/tuner/test_bad_inputs.py"]
CONSOLE = ["tests/tuner/test_console.py"]
POOL = ["tests/tuner/budget/test_compile_pool.py"]
PIPELINE = ["tests/tuner/test_pipeline.py"]
WAIT = ["tests/tuner/test_concurrency.py"]
GRADIENTS = ["tests/kernel/triton/test_backward.py"]

BATTERY = [
    # ---------------------------------------------------------------- paths and study limits
    ("paths: a name four times the limit taken", "tuner/paths.py", "    if len(longest) > _name_max(probe):",
     "    if len(longest) > 4 * _name_max(probe):", BAD_INPUTS),
    ("paths: only a missing path taken as absent", "tuner/paths.py", "    except OSError:\n        return False",
     "    except FileNotFoundError:\n        return False", BAD_INPUTS),
    # (--trace's name left unchecked is left out: a test it fails runs on into the article's whole budget stage,
    # half an hour of compiles on 2 cores, before the failure shows)
    ("study: batch alone against the grid's limit", "tuner/study.py", "        if b * h > MAX_BATCH_HEADS:",
     "        if b > MAX_BATCH_HEADS:", ["tests/tuner/test_study.py"]),
    # ---------------------------------------------------------------- a stderr that cannot be written
    ("console: a failed stderr write raised", "tuner/console.py",
     "        except OSError:\n            _to_devnull(self.fileno())\n            return len(data)",
     "        except OSError:\n            raise", CONSOLE),
    ("console: stderr left unwrapped", "tuner/console.py", "    _watch_stdout()\n    quiet_stderr()",
     "    _watch_stdout()", CONSOLE),
    # ---------------------------------------------------------------- Ctrl-C twice, a trial that died
    ("pool: processes left running on a second Ctrl-C", "tuner/budget/_pool.py",
     "            except KeyboardInterrupt:       # Ctrl-C again: the compiles in flight are dropped\n                self._kill()",
     "            except KeyboardInterrupt:       # Ctrl-C again: the compiles in flight are dropped\n                self._executor = None",
     POOL),
    ("pipeline: a failure never signalled", "tuner/pipeline.py", "                    failed.set()",
     "                    failed.clear()", PIPELINE),
    ("driver: a twin waits on a dead leader", "tuner/driver.py", "            if self.failed.is_set():",
     "            if self.failed.is_set() and rows:", WAIT),
    # ---------------------------------------------------------------- a pasted list, the gradient rule
    ("autotune: the interpreter timed by a driver", "kernel/triton/autotune.py",
     "    if interpreting():\n        return [0.0] * len(quantiles)", "    if not interpreting():\n        return [0.0] * len(quantiles)",
     ["tests/tuner/test_emit.py"]),
    ("gradient rule: the lse's rounding ignored", "kernel/reference.py",
     "    least = max(GRAD_FLOOR[dtype], lse_rounding(lse) if lse is not None else 0.0)", "    least = GRAD_FLOOR[dtype]",
     GRADIENTS),
    ("gradient rule: the lse's rounding 16x looser", "kernel/reference.py",
     "    return float(finite.abs().max()) * 2.0**-24 if finite.numel() else 0.0",
     "    return float(finite.abs().max()) * 2.0**-20 if finite.numel() else 0.0", GRADIENTS),
]
