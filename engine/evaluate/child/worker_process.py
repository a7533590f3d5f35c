"""The long-lived evaluation worker process: `python -m engine.evaluate.child.worker_process`, one per GPU.

This is the process; the engine drives it through `engine.evaluate.host.worker.Worker` (the handle the
evaluator holds). "_process" in the name keeps the two apart, as `child` is the one-shot process.

Saves each evaluation the start-up of a fresh process (Python, torch, CUDA context: seconds on
the H100 box). The engine writes one request per line on stdin — `{"job": PATH, "result": PATH,
"log": PATH}` — and the worker answers on its original stdout, one JSON line per message:
`{"ready": pid}` once, then per request `{"taken": PATH}` as soon as it is read (a death before
that is not the job's doing: the engine sends it again to a new worker), any number of
`{"phase": "checking"|"timing"}` and one `{"done": PATH}` after the result file is in place.
A request with `"warm": "1"` comes before the engine takes the GPU's lock: a Triton solution's
kernels are compiled, not run (engine.evaluate.languages.triton.triton_prewarm); its result is that
report, and the process stays.
Started with `--standby` (the engine starts the next process of a device ahead, before the one in
use retires), it prepares all but the CUDA context, says `{"standby": pid}` and waits for a line
`{"activate": 1}`; then it makes the context and says `{"ready": pid}` as any other. A standby
holds no GPU memory and runs nothing on the GPU while another process times there.
The candidate's own output (Python prints and C++ printf alike) goes to the request's log file,
never into the protocol.

The engine restarts the worker after any verdict that may have left it unusable (a CUDA error
poisons the context; a crash or flag may leave patched modules or threads behind), after a
timeout (it is killed), and every K evaluations; see engine.evaluate.host.worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from engine.evaluate.child import evaluation as child
from engine.evaluate.jobs import EvalJob


def _reset_extension_versions() -> None:
    """torch numbers same-named extensions built in one process (name_v1, ...); a worker sees
    many solutions, each prebuilt as version 0 by the compile pool: start each from zero."""
    from torch.utils import cpp_extension

    cpp_extension.JIT_EXTENSION_VERSIONER.entries.clear()


def _prepare() -> None:
    """What every evaluation needs, done at start: torch and the modules an evaluation imports
    (the extension loader, the integrity checks, the timer, the NVML probe). The CUDA context
    comes after (`_cuda_context`)."""
    import torch
    import torch.utils.cpp_extension  # noqa: F401

    from engine.evaluate.harness import fastbuild, gpuload, integrity, noise, timing  # noqa: F401

    # The op recorder's first use costs seconds (measured: 5.7 s on a 2-core box; the first check
    # phase of every new worker on the H100 box took 4.5-6.2 s against 0.03-0.16 s after): pay it
    # here, on a CPU op (no GPU kernel runs before the lock is held).
    integrity.torch_compute_ops(lambda: torch.ones(2) + 1)


def _cuda_context() -> None:
    """On a GPU, the CUDA context (an allocation: no kernel runs, so a timing elsewhere on the GPU
    is not disturbed)."""
    import torch

    if torch.cuda.is_available():
        with contextlib.suppress(Exception):
            torch.empty(1, device="cuda")


def _reset_peak_memory() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        with contextlib.suppress(Exception):
            torch.cuda.reset_peak_memory_stats()


def _after_evaluation(verdict: Any) -> Any:
    """Before the engine lets the GPU's lock go: this process's memory made small
    (harness.expected_cache.after_evaluation: a device-resident check set offloaded where another
    ktree process shares the GPU, the allocator's free blocks returned), and its peak GPU memory in
    this evaluation recorded (`timing.memory`: peak_reserved, peak_allocated, kept_reserved bytes)."""
    import dataclasses

    import torch

    from engine.evaluate.harness import expected_cache

    memory: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            memory = {"peak_reserved": torch.cuda.max_memory_reserved(),
                      "peak_allocated": torch.cuda.max_memory_allocated()}
    try:
        done = expected_cache.after_evaluation()
    except Exception as exc:  # never the verdict's business: said, and the set dropped
        done = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        with contextlib.suppress(Exception):
            expected_cache.clear()
    memory.update(done)
    if "device_reserved" in memory:
        memory["kept_reserved"] = memory.pop("device_reserved")
    if memory and verdict.timing is not None:
        verdict = dataclasses.replace(verdict, timing={**verdict.timing, "memory": memory})
    return verdict


def _write_result(path: str, data: dict[str, Any]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def _prewarm(job: EvalJob) -> dict[str, Any]:
    from engine.evaluate.languages import for_job

    try:
        return for_job(job).prewarm(job)
    except BaseException as exc:  # noqa: BLE001  (never the verdict's business)
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def serve(request_fd: int, protocol_fd: int, standby: bool = False) -> None:
    out = os.fdopen(protocol_fd, "w", buffering=1)
    requests = os.fdopen(request_fd, "r")

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    _prepare()  # paid once, before the first request (and before the device's lock is taken)
    if standby:  # ready but for the CUDA context, until the one in use retires
        send({"standby": os.getpid()})
        if not requests.readline().strip():
            return  # dropped unused
    _cuda_context()
    send({"ready": os.getpid()})
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        send({"taken": request["job"]})
        log_fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        with open(request["job"]) as f:
            job = EvalJob.from_dict(json.load(f))
        os.unlink(request["job"])  # the job (its input seed) is not left for the candidate to read
        if request.get("warm"):  # before the GPU's lock: Triton's JIT only (languages.triton.triton_prewarm)
            _reset_extension_versions()
            _write_result(request["result"], _prewarm(job))
            send({"done": request["result"]})
            continue
        _reset_extension_versions()
        _reset_peak_memory()
        verdict = child.run_evaluate(job, on_phase=lambda name: send({"phase": name}))
        verdict = _after_evaluation(verdict)
        _write_result(request["result"], verdict.to_dict())
        send({"done": request["result"]})


def main() -> int:
    child._die_with_parent()
    child.pin_cores()
    # The protocol keeps the real stdin/stdout on private fds; the candidate's fd 0 reads nothing
    # and its fds 1 and 2 are the request's log.
    request_fd, protocol_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    serve(request_fd, protocol_fd, standby="--standby" in sys.argv[1:])
    sys.stdout.flush()
    os._exit(0)  # skip teardown: a candidate's extension may crash in its destructors


if __name__ == "__main__":
    sys.exit(main())
