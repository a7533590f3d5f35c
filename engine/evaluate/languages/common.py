"""What every kernel language's loading shares, beside the candidate (the evaluation child):
the failure a verdict status comes from, the build dir's key and lock, the problem's inputs and
models on the device at the job's precision, a time limit on a first call.

Runs in the child's process; torch and the standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import traceback
from collections.abc import Iterator
from typing import Any

from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import log_tail


class EvalFailure(Exception):
    """A failure with a verdict status (compile_error, runtime_error, incorrect)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def format_exc(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return log_tail(text)


def build_key(job: EvalJob, env: dict[str, str] | None = None) -> str:
    """The build dir's name. (Levers and flags are not in it: ninja rebuilds whatever a changed
    command line touches, so a build dir is always consistent with the last build.) `env`: the
    environment the build runs in, where it is not this process's (the engine asking)."""
    import torch

    parts = [
        job.solution_source,
        job.backend,
        torch.__version__,
        platform.python_version(),
        (os.environ if env is None else env).get("TORCH_CUDA_ARCH_LIST", ""),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def solution_build_dir(job: EvalJob) -> tuple[str, str]:
    """(the build key, its dir in the build cache), the dir made where the cache may be written (an
    evaluation sees it read-only: it loads what is there)."""
    key = build_key(job)
    build_dir = os.path.join(job.cache_dir, key)
    with contextlib.suppress(OSError):
        os.makedirs(build_dir, exist_ok=True)
    return key, build_dir


@contextlib.contextmanager
def build_dir_lock(build_dir: str) -> Iterator[None]:
    """One builder per build dir at a time, under a lock the kernel drops when its holder dies.
    torch's own lock file stays behind when a build is killed (a timeout), and every later build
    of that source would wait on it forever: holding ours, any such file is stale, so remove it."""
    import fcntl
    from pathlib import Path

    path = os.path.join(build_dir, ".ktree-build.lock")
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:  # an evaluation, which sees the build dirs read-only: it only loads
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            yield
            return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for stale in Path(build_dir).glob("*/lock"):
            with contextlib.suppress(OSError):
                stale.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)  # releases the lock


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(OSError):
        with open(tmp, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)


def to_device(obj: Any, device: str, dtype: Any = None) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        if dtype is not None and obj.is_floating_point():
            return obj.to(device=device, dtype=dtype)
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device, dtype) for o in obj)
    return obj


PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def precision_dtype(job: EvalJob) -> Any:
    """The dtype `job.precision` casts to (None: the problem's own)."""
    import torch

    return getattr(torch, PRECISIONS[job.precision]) if job.precision else None


def model_to(model: Any, device: str, dtype: Any) -> Any:
    """`model` on `device`, in `dtype` where given (a --precision cast): its parameters and buffers,
    and its floating plain tensor attributes too (an LSTM's `self.h0 = torch.randn(...)`, which
    `.to` leaves in their precision: the cast model would meet its own state in another dtype)."""
    import torch

    if dtype is None:
        return model.to(device)
    model = model.to(device=device, dtype=dtype)
    if isinstance(model, torch.nn.Module):
        for module in model.modules():
            for name, value in list(vars(module).items()):
                if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
                    setattr(module, name, value.to(dtype=dtype))
    return model


def make_inputs(problem: Any, device: str, dtype: Any = None) -> Any:
    """The problem's inputs, made on the device itself. A KernelBench get_inputs() builds them
    with factory calls (torch.randn, ...) that would otherwise run on the host: seconds per call
    for a 1 GiB input, four calls per evaluation. Seeded by the caller as before (manual_seed
    seeds every device), and still moved in case get_inputs() builds them elsewhere."""
    import torch

    with torch.device(device):
        return to_device(problem.get_inputs(), device, dtype)


class WarmupTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise WarmupTimeout in this (main) thread after `seconds`; no limit off the main thread
    (the runner's own timeout on the whole evaluation still applies)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise WarmupTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
