"""The long-lived evaluation worker process: `python -m engine.evaluate.child.worker_process`, one per GPU.

This is the process; the engine drives it through `engine.evaluate.host.worker.Worker` (the handle the
evaluator holds). "_process" in the name keeps the two apart, as `child` is the one-shot process.

Saves each evaluation the start-up of a fresh process (Python, torch, the harness: seconds) without
letting one candidate's process serve another: it is a fork server. Prepared once, it never imports a
candidate; each request is served by a process forked from it ahead of the request (its CUDA context
made then, before the device's lock), which exits after that one candidate
(hooks or rebound functions left by one candidate once reached the next one's verdict).
The engine writes one request per line on stdin — `{"job": PATH, "result": PATH, "log": PATH}` — and
the server answers on its original stdout, one JSON line per message: `{"ready": pid}` once; then per
request, relayed from its child, `{"taken": PATH}` as soon as the job is read (a death before that is
not the job's doing: the engine sends it again to a new worker), before the candidate's import the
clean facts (`{"clean": {...}}`, then `{"importing": 1}`: engine.evaluate.harness.outbox), any number
of `{"phase": "checking"|"timing"}` and one `{"done": PATH}` after the result file is in place; then
the child serves the judge's fresh-input calls (`{"audit": {...}}` -> `{"audited": ...}`:
engine.evaluate.child.audit) until `{"end": 1}`; last, from the server itself, `{"exited": code}`.
The child never holds the server's channel to the engine: whatever it writes goes through the server,
which drops the keys only it may send (SERVER_KEYS).
A request with `"warm": "1"` comes before the engine takes the GPU's lock: a Triton solution's
kernels are compiled, not run (engine.evaluate.languages.triton.triton_prewarm), in a child of its own.
Started with `--standby` (the engine starts the next server of a device ahead), it prepares, says
`{"standby": pid}` and waits for a line `{"activate": 1}`, then says `{"ready": pid}`. The CUDA context
is each child's (it does not survive a fork); a standby forks none, and holds no GPU memory.
The candidate's own output (Python prints and C++ printf alike) goes to the request's log file,
never into the protocol.

The engine replaces the server after a timeout (it is killed with its child), a death, and every K
evaluations; see engine.evaluate.host.worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
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


def _prepare(judge: bool = False) -> None:
    """What every evaluation needs, done at start: torch and the modules an evaluation imports
    (the extension loader, the integrity checks, the timer, the NVML probe). The CUDA context
    comes after (`_cuda_context`). The judge's server (`judge`) needs torch and the timer only: no
    candidate is checked there."""
    import torch

    from engine.evaluate.harness import timing  # noqa: F401

    if judge:
        return
    import torch.utils.cpp_extension  # noqa: F401

    from engine.evaluate.harness import fastbuild, gpuload, integrity, noise  # noqa: F401

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
    (harness.expected_cache.after_evaluation: on a GPU its check set dropped, the allocator's free
    blocks returned: this process serves no other candidate), and its peak GPU memory in
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


# Messages only the server sends: the same keys from its child are dropped on the way (a candidate
# that wrote `{"exited": 0}` would have the engine send the next job while it still listens).
SERVER_KEYS = frozenset({"ready", "standby", "exited"})


def _non_dumpable() -> None:
    """No ptrace and no /proc/PID/mem of this process by its children or siblings (a process
    without CAP_SYS_PTRACE: any process under strict isolation)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def _lines(fd: int, buffer: bytearray) -> list[bytes]:
    """The complete lines read from fd now ([] at end of file: b"" in the list)."""
    chunk = os.read(fd, 1 << 16)
    if not chunk:
        return [b""]
    buffer += chunk
    lines = []
    while b"\n" in buffer:
        line, _, rest = bytes(buffer).partition(b"\n")
        buffer[:] = rest
        lines.append(line + b"\n")
    return lines


def _child(reply_fd: int, request_fd: int) -> None:
    """A forked process, made ahead on a GPU (its CUDA context too, before the device's lock), on
    the cpu once its request came (`_warm_checks`), that serves one request: the only process that
    ever runs this candidate's code. It reads its request and, after its verdict, the judge's
    fresh-input calls (engine.evaluate.child.audit, until `{"end": 1}`) on `request_fd`, and answers
    on `reply_fd` (through the server)."""
    from engine.evaluate.harness import outbox

    out = os.fdopen(reply_fd, "w", buffering=1)
    requests = os.fdopen(request_fd, "r")

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    _cuda_context()
    warmed = None  # the solution this process compiled before the lock (Triton's JIT), if any
    while True:
        line = requests.readline()
        if not line.strip():
            return  # dropped unused (the server is going)
        request = json.loads(line)
        if "judge" in request:  # the judge's clean process: never a candidate (child.judge_process)
            from engine.evaluate.child import judge_process

            judge_process.serve(requests, out)
            return
        if "job" not in request:
            return  # `end`: dropped after its warm-up, its evaluation never came
        with open(request["job"]) as f:
            job = EvalJob.from_dict(json.load(f))
        if warmed is not None and job.solution_source != warmed:
            return  # another candidate's job: never served here (the engine sends it again)
        send({"taken": request["job"]})
        work = os.path.dirname(request["job"])
        os.environ["TMPDIR"] = work  # what it writes lives in its job's dir, removed after it
        with contextlib.suppress(OSError):
            os.chdir(work)
        log_fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.unlink(request["job"])  # the job (its input seed) is not left for the candidate to read
        if warmed is None:
            _reset_extension_versions()
        if not request.get("warm"):
            break
        # Before the GPU's lock: Triton's JIT only (languages.triton.triton_prewarm). The process
        # stays for this candidate's evaluation, its kernels loaded, and serves no other.
        _write_result(request["result"], _prewarm(job))
        warmed = job.solution_source
        send({"done": request["result"]})
    _reset_peak_memory()
    if warmed is None:  # (a warmed process ran the candidate's module already: nothing it says is clean)
        outbox.listen(send)  # the clean facts, until the candidate's import (harness.outbox)
    verdict = child.run_evaluate(job, on_phase=lambda name: send({"phase": name}))
    outbox.seal()
    verdict = _after_evaluation(verdict)
    _write_result(request["result"], verdict.to_dict())
    send({"done": request["result"]})
    from engine.evaluate.child import audit

    for line in requests:
        message = json.loads(line) if line.strip() else {}
        if "audit" in message:
            send(audit.call(message["audit"]))
        elif "end" in message:
            return


@dataclasses.dataclass
class _Forked:
    pid: int
    up: int  # its messages, read here
    down: int  # the engine's lines for it, written here


def _warm_checks(line: bytes) -> None:
    """On the cpu, the server makes a job's check set itself (its inputs and fp64 answers:
    engine.evaluate.harness.expected_cache) before it forks the job's child: made once per problem
    in this clean process, every later child inherits it by the fork instead of making it again.
    On one thread: a fork copies no thread pool, and a child whose parent had started OpenMP's
    would hang in its first parallel region (the child sets its own count: harness.timing.fix_threads).
    Anything that fails here is left to the child, which makes the set itself and says what fails."""
    import torch

    from engine.evaluate.child.check import checks_key, reference_checks
    from engine.evaluate.child.load import make_reference
    from engine.evaluate.harness import expected_cache
    from engine.evaluate.loading import load_module_from_path

    try:
        request = json.loads(line)
        if not isinstance(request, dict) or "job" not in request or request.get("warm"):
            return
        with open(request["job"]) as f:
            job = EvalJob.from_dict(json.load(f))
        if job.backend != "cpu":
            return
        made = checks_key(job, "cpu")[:-1]
        if any(key[:-1] == made for key in expected_cache.held()):
            return  # made for an earlier job (a child whose reference's weights differ makes its own)
        torch.set_num_threads(1)
        problem = load_module_from_path(job.problem_path, job.sizes)
        ref, _, cast = make_reference(job, problem, "cpu")  # (as the child makes its own)
        checks = reference_checks(job, problem, ref, expected_cache.Fp64Reference(ref), "cpu", cast)
        if checks.live:  # (drawn and answered again per trial: by the child's own reference)
            expected_cache.clear()
        checks.live_fns = ()  # nothing kept holds this process's reference: its weights go now
    except BaseException:  # noqa: BLE001
        expected_cache.clear()


def _fork(server_fds: tuple[int, ...]) -> _Forked:
    """The next child, forked now: it waits for its request (`_child`)."""
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            for fd in (up_r, down_w, *server_fds):  # the server's channels: never the child's
                os.close(fd)
            _child(up_w, down_r)
        except BaseException:  # noqa: BLE001  (said on its log; the server says it exited)
            import traceback

            with contextlib.suppress(Exception):
                traceback.print_exc()
            os._exit(1)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skip teardown: a candidate's extension may crash in its destructors
    os.close(up_w)
    os.close(down_r)
    return _Forked(pid, up_r, down_w)


def _serve_one(child_: _Forked, request: bytes, out: Any, request_fd: int, buffer: bytearray) -> bool:
    """Hand the request to the waiting child and relay between it and the engine until it exits;
    then say so (`{"exited": code}`). False when the engine went away meanwhile."""
    import selectors

    os.write(child_.down, request)
    alive = True
    relay = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(child_.up, selectors.EVENT_READ, "child")
        sel.register(request_fd, selectors.EVENT_READ, "engine")
        child_open = True
        while child_open:
            for key, _ in sel.select():
                if key.data == "child":
                    for line in _lines(child_.up, relay):
                        if not line:
                            child_open = False
                            break
                        with contextlib.suppress(ValueError):
                            message = json.loads(line)
                            if isinstance(message, dict) and not SERVER_KEYS & message.keys():
                                out.write(json.dumps(message) + "\n")
                                out.flush()
                else:
                    for line in _lines(request_fd, buffer):
                        if not line:  # the engine is gone: so is the child
                            alive = False
                            with contextlib.suppress(OSError):
                                os.kill(child_.pid, 9)
                            break
                        with contextlib.suppress(OSError):
                            os.write(child_.down, line)
                    if not alive:
                        child_open = False
    os.close(child_.up)
    os.close(child_.down)
    # (Its own children, if any, are the engine's to kill: kill_tree after a timeout.)
    _, status = os.waitpid(child_.pid, 0)
    if alive:
        out.write(json.dumps({"exited": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()
    return alive


def serve(request_fd: int, protocol_fd: int, standby: bool = False, judge: bool = False) -> None:
    """The server: prepared once (torch, the harness), clean for ever after: it never imports a
    candidate. Each request is served by a process forked from it (`_child`), made ahead while the
    server waits, so no process runs a second candidate's code after a first's, and what one
    candidate changes in its process (torch's functions, global module hooks, ktree's modules)
    reaches no other. The CUDA context is the child's (it does not survive a fork)."""
    out = os.fdopen(protocol_fd, "w", buffering=1)

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    _non_dumpable()
    _prepare(judge)  # paid once, before the first request (and before the device's lock is taken)
    import torch

    if torch.cuda.is_initialized():  # its children could not use the GPU: said, never a hang
        raise SystemExit("the worker's server initialized CUDA before forking")
    buffer = bytearray()
    pending: list[bytes] = []

    def next_line() -> bytes:
        while not pending:
            pending.extend(_lines(request_fd, buffer))
        return pending.pop(0)

    if standby:  # ready, until the one in use retires
        send({"standby": os.getpid()})
        if not next_line().strip():
            return  # dropped unused
    send({"ready": os.getpid()})
    # Without a GPU no child is forked ahead (none has a CUDA context to make): the server makes the
    # job's check set first (`_warm_checks`), then forks its child.
    ahead = torch.cuda.is_available()
    while True:
        waiting = _fork((request_fd, protocol_fd)) if ahead else None
        line = next_line()
        while line and not line.strip():
            line = next_line()
        if line and waiting is None:
            _warm_checks(line)
            waiting = _fork((request_fd, protocol_fd))
        if not line or waiting is None or not _serve_one(waiting, line, out, request_fd, buffer):
            if waiting is not None:
                with contextlib.suppress(OSError):
                    os.kill(waiting.pid, 9)
            return


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
    serve(request_fd, protocol_fd, standby="--standby" in sys.argv[1:], judge="--judge" in sys.argv[1:])
    sys.stdout.flush()
    os._exit(0)  # skip teardown: a candidate's extension may crash in its destructors


if __name__ == "__main__":
    sys.exit(main())
