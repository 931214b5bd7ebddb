"""A GPU worker's process: spawned pinned to one GPU, or begun early and handed its work later.

A worker (:class:`tuner.runner.GpuWorker`) is a spawned process that sees one GPU, as its device
0, from its first instruction on (``CUDA_VISIBLE_DEVICES``, set around its start). Its first
seconds go to imports (a spawned process imports the main module again: the sweep's torch,
Triton, Optuna) and to CUDA's start, as the sweep's own first seconds go to the same imports.
On the H200 the main job's worker was ready 19.5 s after the process began: 6.7 s of the
parent's imports, then 11.9 s of the worker's start and SDPA baselines, while the first
trials' compiles were done at 15.6 s (docs/results/2026-12-01-h200-tuner-speed.md).

:func:`start_early` begins a worker process at once, pinned to a GPU, which imports and starts
CUDA while the parent goes on; :func:`spawn_worker` hands it its work (the function it serves
and that function's arguments) when a worker for that GPU is asked for, else spawns one.

The compile pool's processes (:class:`tuner.budget.CompilePool`) are forked by a compile server
(:func:`compile_context`): one process, begun early (:func:`start_compile_server`), that imports
the compiler once, where each spawned compile process had imported it for itself. On the H200 the
main job's 14 spawned compile processes each took 5.5-8.3 s over their first compile (the
imports of all of them at once, at a low priority, beside the sweep's and the GPU worker's own),
and the first trial reached the GPU 6.5 s after the first compile was handed out (``--trace``,
2026-12-07). :func:`start_early_for_sweep` is the sweep's first statement. Plain Python, no
project imports.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import signal
import sys
import threading

from tuner.console import quiet_stderr

__all__ = ["COMPILE_PRELOAD", "EARLY_ENV", "compile_context", "ignore_interrupts", "quiet_interrupt_while_starting",
           "sigint_blocked", "spawn_worker", "start_compile_server", "start_early", "start_early_for_sweep",
           "visible_device", "without_interpreter"]

_LOCK = threading.Lock()            # the environment a worker inherits is set around its start
_EARLY: dict = {}                   # pin -> (process, conn): begun early, not yet handed its work
_WATCHER = "fa2-tuner-sigterm"      # a child's thread that takes its SIGTERM (ignore_interrupts)
NVIDIA_DRIVER = "/dev/nvidiactl"    # present where an NVIDIA driver is loaded: a GPU is likely
# The sweep begins its first worker early unless this is "0". On by default: from cold caches the
# main job's worker start and SDPA baselines took 5 s with it, 12 s without, and the whole job 60.7
# and 63.6 s against 68.2 and 69.5 s (H200, A B A B, stage early33 of scripts/device_run.sh; those
# runs with it also timed fewer configs: docs/results/2026-12-01-h200-tuner-speed.md). On a CPU
# machine nothing is begun either way.
EARLY_ENV = "FA2_TUNER_EARLY_WORKER"
# What every compile imports (tuner.budget._compile.import_compiler, and the module a task's function lives in):
# imported once, by the compile server, before it forks a compile process.
COMPILE_PRELOAD = ("triton.compiler", "tuner.kernels", "tuner.budget._compile")
# What a GPU worker's start imports (tuner.runner's loop, the kernels, the timers): imported by a worker begun
# early while it waits for its work, which otherwise began with them (the H100's trace of 2026-12-07: the worker's
# start and SDPA baselines, 6.9 s from being handed its work, held back the first trial until 12.1 s).
WORKER_PRELOAD = ("tuner.runner", "tuner.kernels", "kernel.measure.timing")


def visible_device(index: int) -> str:
    """What ``CUDA_VISIBLE_DEVICES`` pins a worker to the parent's ``index``-th GPU."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return visible[index] if index < len(visible) else str(index)


@contextlib.contextmanager
def _pinned(pin: str | None):
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    if pin is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = pin
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


@contextlib.contextmanager
def sigint_blocked():
    """SIGINT and SIGTERM held back in this thread while a child process is spawned: the child begins
    with them blocked (a signal mask survives fork and exec), so a Ctrl-C or a ``kill`` sent to the whole
    process group while the child still imports (a spawned process imports the main module again:
    seconds) stays pending in it, instead of ending it with a KeyboardInterrupt traceback or killing
    the trial it is about to run. The child then ignores SIGINT and unblocks it, which drops the
    pending one, and keeps SIGTERM for its parent alone (:func:`ignore_interrupts`). The parent's other
    threads still take the signals meanwhile, and Python hands them to the main thread as always."""
    if not hasattr(signal, "pthread_sigmask"):       # not on Windows: nothing to hold back
        yield
        return
    # The first spawn starts multiprocessing's resource tracker, which unblocks both signals in the spawning
    # thread on its way out (the child then began with neither blocked): it is started before they are blocked.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def without_interpreter():
    """``TRITON_INTERPRET`` left out of the environment while compile processes begin: a compile process
    imports the kernels (to unpickle its task) before anything else runs, and under the interpreter
    ``@triton.jit`` makes functions the compiler cannot take."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


def compile_context():
    """The multiprocessing context compile processes begin in: forked by the compile server where this
    platform has one (the server imports :data:`COMPILE_PRELOAD` once; it never touches CUDA, so forking
    it is safe, unlike forking the sweep), else spawned. A forked process inherits the server's
    environment, as it was when the server began: the pool hands each process the sweep's own as it
    starts (:func:`tuner.budget._compile.worker_init`)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(COMPILE_PRELOAD))
    return context


def start_compile_server() -> None:
    """Begin the compile server now, without waiting for its imports (it begins at the pool's first
    process otherwise): without ``TRITON_INTERPRET`` (:func:`without_interpreter`), its signals held
    back as a spawned worker's are (:func:`sigint_blocked`; it ignores SIGINT itself, its children
    inherit the mask). Nothing where processes are spawned instead."""
    context = compile_context()
    if context.get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    with without_interpreter(), sigint_blocked():
        forkserver.ensure_running()


def quiet_interrupt_while_starting() -> None:
    """A Ctrl-C before the sweep sets its own handler (while it imports torch, Triton, Optuna: seconds) ends
    the process with 130 and one line, not a KeyboardInterrupt traceback from an import; nothing is
    stored yet then. The sweep's run replaces this handler with its own (finish the trials in flight)."""
    def stop(_signum, _frame):
        print("\ninterrupted (Ctrl-C) while starting; nothing was stored", file=sys.stderr, flush=True)
        raise SystemExit(130)

    signal.signal(signal.SIGINT, stop)


def ignore_interrupts(sender: int | None = None) -> None:
    """A child's first statement: Ctrl-C is the sweep's to handle (the trial in flight finishes, then
    the sweep closes its workers), so the child ignores it, and drops the one it may have been sent
    while it started (:func:`sigint_blocked`). SIGTERM is the sweep's too (:mod:`tuner.console` takes it
    as Ctrl-C): one sent to the whole group (``kill -TERM -PGID``, a service manager) would end the
    trial in flight, stored as crashed, so the child keeps it blocked, and a thread of its own waits for
    it: sent by the parent (multiprocessing's ``terminate``), it ends the child as SIGTERM does; sent by
    anyone else, it is dropped. A child whose parent is gone (``kill -9``) ends at once, quietly. ``sender``:
    the process whose SIGTERM counts, where that is not the parent (a compile worker forked by the
    compile server, :func:`compile_context`, is the server's child but the sweep's to end)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if hasattr(signal, "sigtimedwait") and not any(t.name == _WATCHER for t in threading.enumerate()):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})     # threads begun from here on inherit it
        parent = os.getppid()
        threading.Thread(target=_sigterm_from_parent_only, args=(parent, sender or parent), daemon=True,
                         name=_WATCHER).start()


def _sigterm_from_parent_only(parent: int, sender: int | None = None, poll_s: float = 1.0) -> None:
    """The child's SIGTERM, taken here alone (see :func:`ignore_interrupts`): ``sender``'s (default the parent's)."""
    sender = sender or parent
    while True:
        sent = signal.sigtimedwait({signal.SIGTERM}, poll_s)
        if os.getppid() != parent:          # the parent is gone: nobody waits for this child's answer
            os._exit(0)
        if sent is not None and sent.si_pid == sender:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            signal.raise_signal(signal.SIGTERM)     # its default action, in this thread: the process ends


def _quietly(target, conn, *args) -> None:
    """A worker's ``target(conn, *args)``, its signals settled first (:func:`ignore_interrupts`: it began with
    them blocked), ended quietly where its parent went away mid-answer (``kill -9``): a BrokenPipeError's
    traceback would be the last words of a process nobody listens to."""
    ignore_interrupts()
    quiet_stderr()          # the command's stderr, inherited: a write that fails there must not end the worker
    try:
        target(conn, *args)
    except (BrokenPipeError, ConnectionResetError):
        return


def _start(target, args: tuple, pin: str | None):
    context = multiprocessing.get_context("spawn")       # never fork a process that may hold CUDA
    conn, child = context.Pipe()
    process = context.Process(target=_quietly, args=(target, child, *args), daemon=True, name="fa2-tuner-worker")
    with _LOCK, _pinned(pin), sigint_blocked():
        process.start()
    child.close()
    return process, conn


def spawn_worker(target, args: tuple, pin: str | None):
    """``(process, conn)`` of a worker running ``target(conn, *args)`` on the GPU ``pin`` names (None:
    the GPUs this process sees): the one :func:`start_early` began for ``pin`` where it is alive,
    else a new one. ``target`` must be a module-level function (it is sent by reference)."""
    with _LOCK:
        early = _EARLY.pop(pin, None)
    if early is not None:
        process, conn = early
        with contextlib.suppress(OSError, EOFError):
            if process.is_alive():
                conn.send((target, args))
                return process, conn
        process.kill()
        conn.close()
    return _start(target, args, pin)


def start_early(pin: str | None, warm_cuda: bool = True) -> None:
    """Begin a worker process for ``pin`` now (at most one per pin): its imports and, with
    ``warm_cuda``, CUDA's context run while this process goes on; it waits for its work."""
    with _LOCK:
        if pin in _EARLY:
            return
    started = _start(_serve_when_told, (warm_cuda,), pin)
    with _LOCK:
        _EARLY[pin] = started


def _serve_when_told(conn, warm_cuda: bool) -> None:
    ignore_interrupts()      # as the worker's own loop: the sweep decides on Ctrl-C
    if warm_cuda:
        with contextlib.suppress(Exception):          # a failure shows again, and is reported, at the worker's start
            import torch

            torch.zeros(1, device="cuda")
        if "TRITON_INTERPRET" not in os.environ:     # the kernels as the GPU (not the interpreter) runs them
            for module in WORKER_PRELOAD:
                with contextlib.suppress(Exception):  # as above: an import error is the worker's start's to report
                    importlib.import_module(module)
    try:
        message = conn.recv()
    except EOFError:
        return
    if message is not None:
        target, args = message
        target(conn, *args)


def start_early_for_sweep(argv: list[str]) -> None:
    """The sweep's first statement, where the command is a run (not ``--help``, not ``--device``): begin the
    first GPU's worker (``visible_device(0)``, the first :class:`tuner.runner.GpuWorker`'s) where an NVIDIA
    driver is loaded, and the compile server (:func:`start_compile_server`; the budget stage compiles
    without a GPU too). Where they are never asked for (the inputs refused, no CUDA after all) they wait,
    idle, and end with the sweep. Neither with :data:`EARLY_ENV` set to 0."""
    if os.environ.get(EARLY_ENV, "1") == "0" or {"-h", "--help"} & set(argv) or "--device" in argv:
        return
    if os.path.exists(NVIDIA_DRIVER):
        start_early(visible_device(0))
    start_compile_server()
