"""The engine's handle on a long-lived evaluation worker: `Worker`, one per device.

Two modules, two sides: this one runs in the engine and is what the evaluator holds (hence the
plain name, `worker.Worker`); the process it drives is `engine.evaluate.child.worker_process`
(`python -m engine.evaluate.child.worker_process`), named for what it is, next to `child` (the one-shot
evaluation process). The line protocol between them is described there.

One `Worker` per device. It starts the process on first use, sends it one job at a time, turns
whatever happens (result, crash, hang) into an outcome like `runner.run_child` does, and replaces
the process after a timeout (killed), a death, a crash or a flag (what the candidate left running,
a double fork's orphan, goes with it), and every `max_jobs` evaluations. The process is a fork
server: each job runs in a child forked for it, which exits after its one candidate, so nothing of
one candidate's process is the next one's (docs/judge.md). Messages about the job come
from that child through the server; the child's exit comes from the server alone (`exited`).

After a `correct` claim the judge checks it from outside while the child still lives
(engine.evaluate.host.judge: its clean process, fresh-input calls timed here); what the judge learnt
(`judged`: the clean facts sent before the candidate's import, the fresh-input calls) is the
evaluator's to compose into the verdict.

A planned retirement costs the device next to no wait: with `standby` (a GPU's worker), the next
process is started while the last job of the one in use runs, prepared (Python, torch, the modules
an evaluation imports: the seconds of a start), and only activated when the one in use is gone.
With `standby="always"` (the evaluator's choice on a GPU) the next process is kept started whenever
one is in use, so a replacement after a crash, a timeout or a death is activated too (measured on
two H100s: idle while variants waited 36 % -> 0.7 %). A standby that cannot see a new problem file
is dropped and a fresh process started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from engine import settings
from engine.evaluate.base import PhaseCallback
from engine.evaluate.host.eval_limit import EvalLimit
from engine.evaluate.host.judge import Judge
from engine.evaluate.host.runner import _read_tail
from engine.evaluate.host.sandbox import (
    WRITABLE_IN_CACHE,
    Sandbox,
    evaluation_binds,
    kill_tree,
    make_workdir,
    watch,
)
from engine.evaluate.jobs import EvalJob

# A GPU worker's standbys starting at once. One start (Python, torch, in the sandbox) can outlast a
# short evaluation: KernelBench level 1's wrapped references, each flagged and so followed by a restart,
# held an H200 3.7 s on average but came one per 9.9 s with one standby (each waited for the last's
# start); two overlap their starts.
GPU_STANDBYS = 2


def ledger_dir(cache_dir: str) -> str:
    """The host-wide memory ledger (engine.evaluate.harness.ledger): in the one dir of the build cache an
    evaluation process may write."""
    return os.path.join(cache_dir, WRITABLE_IN_CACHE, "memory")


MEMORY_VARS = ("KTREE_CHECK_CACHE_DEVICE_MB", "KTREE_CHECK_CACHE_HOST_MB", "KTREE_CHECK_ANSWERS",
               "KTREE_TIMING_ROTATION_MB")


def memory_env() -> dict[str, str]:
    """The check-set budgets a user set (engine.evaluate.harness.ledger), for an evaluation process (the
    sandbox passes no KTREE_ variable of its own accord)."""
    return {name: settings.get(name) or "" for name in MEMORY_VARS if settings.get(name)}


START_TIMEOUT_S = 300.0
KEEP_AFTER = frozenset({"correct", "incorrect"})  # verdicts after which the server is kept
AUDIT_S = 60.0  # the least time the judge's fresh-input calls get (engine.evaluate.host.judge)


def _dead(pid: int) -> bool:
    """The process is gone or a zombie (killed, not yet reaped by the event loop). Where /proc
    cannot tell, it is taken as alive."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith(("Z", "X"))
    except FileNotFoundError:
        return True
    except (OSError, IndexError):
        return False


async def _drop(proc: asyncio.subprocess.Process) -> None:
    kill_tree(proc.pid)
    await proc.wait()


class Worker:
    """The process runs in the evaluator's sandbox (same isolation and limits as a one-shot
    child); under strict isolation it sees the problem files of the jobs it was started for, so
    a job for another problem file starts a new process, which sees that file and every one the
    last process saw (a suite's problems alternate on a device: each new file costs one restart,
    not one per change of problem)."""

    def __init__(self, extra_env: dict[str, str] | None = None, sandbox: Sandbox | None = None,
                 cache_dir: str = "", max_jobs: int = 32, standby: bool | str = False, standby_depth: int = 1,
                 judge: bool = True):
        self.extra_env = dict(extra_env or {})
        self.sandbox = sandbox or Sandbox()
        self.cache_dir = cache_dir
        self.max_jobs = max_jobs
        self.proc: asyncio.subprocess.Process | None = None
        # start the next process ahead: of a planned retirement (True), or of any replacement ("always")
        self.standby = standby
        # how many standbys are kept starting at once: a start (Python, torch) takes longer than a
        # short evaluation, so one after another each waits for the last; two overlap
        self.standby_depth = max(1, standby_depth)
        self._standbys: list[asyncio.Task[tuple[asyncio.subprocess.Process, tuple[str, ...]] | None]] = []
        self.standby_used = 0  # starts that activated a standby
        self._standby_procs: set[asyncio.subprocess.Process] = set()  # the standbys spawned, not taken
        self._spawned = 0
        self._stderr: dict[int, Path] = {}  # each process's stderr file, by pid
        self._problems: tuple[str, ...] = ()  # the problem files this process can read
        self.jobs_done = 0  # by the current process
        self.starts = 0
        self.restarts: list[str] = []  # why each restart happened, in order
        self.busy_s = 0.0  # time spent evaluating (for idle fractions)
        self.started_ok = True  # False after its last start failed
        self.last_start_s = 0.0  # how long the last start took (Python, torch, the CUDA context)
        self.warming = False  # in warm(): compiling a Triton solution's kernels before the device's lock
        self._dir = make_workdir("worker")
        # The judge's clean process and its fresh-input calls after a `correct` claim
        # (engine.evaluate.host.judge); what the judge learnt of the last job, in `judged`.
        self.judge: Judge | None = Judge(self._env(), self.sandbox, cache_dir, self._dir) if judge else None
        self.judged: dict[str, Any] = {}
        self._warmed: str | None = None  # the solution whose warm-up process waits for its evaluation
        self._starting = asyncio.Lock()  # one start at a time (an early start and a job's)
        weakref.finalize(self, shutil.rmtree, self._dir, True)

    async def _spawn(self, problems: tuple[str, ...], standby: bool = False) -> asyncio.subprocess.Process:
        cache_ro, cache_rw = evaluation_binds(self.cache_dir)
        argv = self.sandbox.command(
            [sys.executable, "-m", "engine.evaluate.child.worker_process", *(["--standby"] if standby else [])],
            workdir=self._dir, read_only=[*problems, *cache_ro], writable=cache_rw)
        self._spawned += 1
        stderr_path = self._dir / f"worker-{self._spawned}-stderr.txt"
        with open(stderr_path, "wb") as err:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=self._dir, env=self.sandbox.env(self._env(), workdir=self._dir),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                start_new_session=True,
            )
        self._stderr[proc.pid] = stderr_path
        for pid in list(self._stderr)[:-1 - self.standby_depth]:  # the one in use and its standbys are kept
            with contextlib.suppress(OSError):
                self._stderr.pop(pid).unlink()
        return proc

    async def _start(self, problems: tuple[str, ...]) -> str | None:
        """Start the process (a standby that sees these problem files activated, else a new
        one); None when ready, else why it could not start."""
        t0 = time.monotonic()
        waiting = await self._take_standby(problems)
        if waiting is not None:
            self.proc = waiting
            self.standby_used += 1
            with contextlib.suppress(BrokenPipeError, ConnectionResetError, AssertionError):
                assert waiting.stdin is not None
                waiting.stdin.write(b'{"activate": 1}\n')
                await waiting.stdin.drain()
        else:
            self.proc = await self._spawn(problems)
        self._problems = problems
        self.starts += 1
        self.jobs_done = 0
        try:
            line = await asyncio.wait_for(self._readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = None
        self.last_start_s = time.monotonic() - t0
        self.started_ok = line is not None and "ready" in line
        if not self.started_ok:
            stderr_path = self._stderr.get(self.proc.pid if self.proc else -1, self._dir / "none")
            await self.stop()
            return f"the evaluation worker did not start\n{_read_tail(stderr_path)}"
        if self.standby == "always":
            self._begin_standby()  # the next one, ready for whenever this one goes
        return None

    def _begin_standby(self) -> None:
        """Start the next processes now, as standbys (see the module's docstring), up to
        `standby_depth` of them starting or ready."""
        if not self.standby:
            return
        while len(self._standbys) < self.standby_depth:
            self._standbys.append(asyncio.ensure_future(self._prepare_standby(self._problems)))

    async def _prepare_standby(self, problems: tuple[str, ...]
                               ) -> tuple[asyncio.subprocess.Process, tuple[str, ...]] | None:
        proc = await self._spawn(problems, standby=True)
        self._standby_procs.add(proc)
        try:
            line = await asyncio.wait_for(self._readline(proc), START_TIMEOUT_S)
        except (TimeoutError, asyncio.CancelledError):
            line = None
        if line is None or "standby" not in line:
            self._standby_procs.discard(proc)
            kill_tree(proc.pid)
            await proc.wait()
            return None
        return proc, problems

    async def _take_standby(self, problems: tuple[str, ...]) -> asyncio.subprocess.Process | None:
        """The standby, if there is one that started and sees every one of these files; any other
        is dropped."""
        while self._standbys:  # the oldest first: the likeliest to be ready
            ready = await self._standbys.pop(0)
            if ready is None:
                continue
            proc, sees = ready
            self._standby_procs.discard(proc)
            if proc.returncode is None and not _dead(proc.pid) and set(problems) <= set(sees):
                return proc
            await _drop(proc)
        return None

    def _env(self) -> dict[str, str]:
        """The process's own variables: the device's, its memory limit (engine.evaluate.harness.ledger caps
        its cached check sets at a share of it) and the host-wide memory ledger's dir."""
        env = {**memory_env(), **self.extra_env}
        # The server forks a child per job, and a CUDA driver initialized before a fork is not the
        # child's to use: torch.cuda.is_available() there asks NVML, never the driver.
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        if self.sandbox.limits.memory_bytes:
            env.setdefault("KTREE_MEMORY_LIMIT", str(int(self.sandbox.limits.memory_bytes)))
        if self.cache_dir:
            env.setdefault("KTREE_LEDGER_DIR", ledger_dir(self.cache_dir))
        return env

    async def ready(self, problem_path: str = "", *more: str) -> str | None:
        """A process ready for a job of this problem file, started now if there is none (a
        retired one is replaced here). Called before the device's lock is taken, so that a start
        (Python, torch, the CUDA context) is never paid while holding it. None when ready, else
        why it could not start. `more`: other problem files a new process should see too (a
        suite's, started early)."""
        async with self._starting:
            seen = self._problems
            if self.proc is not None and problem_path and problem_path not in self._problems:
                await self.stop("a new problem file")
            if self.proc is not None and (self.proc.returncode is not None or _dead(self.proc.pid)):
                await self.stop("died")
            if self.proc is None:
                wanted = dict.fromkeys((*seen, problem_path, *more) if problem_path else seen)
                why = await self._start(tuple(p for p in wanted if p == problem_path or os.path.exists(p)))
                if why is not None:
                    return why
        # The judge's clean process too, before the device's lock, on a GPU. On the cpu it starts when
        # a first `correct` claim needs it: its start (Python, torch: seconds on two cores) would take
        # the cores of the timing it overlaps, and an evaluator that never sees a correct claim (a
        # `ktree eval` of a broken kernel) never pays it.
        if self.judge is not None and problem_path and self.extra_env.get("CUDA_VISIBLE_DEVICES"):
            await self.judge.ready(problem_path)
        return None

    @property
    def starting(self) -> bool:
        """A process is being started (a job's `ready`, or an early start)."""
        return self._starting.locked()

    def idle_unstarted(self) -> bool:
        """No process yet and none starting: an early start (LocalEvaluator.start_workers) may
        begin one."""
        return self.proc is None and not self._starting.locked()

    async def warm(self, job: EvalJob, timeout_s: float) -> dict[str, Any]:
        """Before the device's lock: the process compiles a Triton solution's kernels without
        running them (engine.evaluate.languages.triton.triton_prewarm), so the evaluation under the lock
        only loads them. Its report ({} when nothing was done); a process that hangs here is
        stopped (the evaluation then starts a new one)."""
        if self.proc is None or self.proc.returncode is not None or self.proc.stdin is None:
            return {}
        work = Path(tempfile.mkdtemp(prefix="warm-", dir=self._dir))
        paths = {"job": work / "job.json", "result": work / "result.json", "log": work / "log.txt"}
        paths["job"].write_text(json.dumps(job.replace(input_seed=None).to_dict()))
        t0, self.warming = time.monotonic(), True
        try:
            self.proc.stdin.write((json.dumps({**{k: str(v) for k, v in paths.items()}, "warm": "1"}) + "\n")
                                  .encode())
            await self.proc.stdin.drain()
            while True:
                left = timeout_s - (time.monotonic() - t0)
                if left <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(self._readline(), left)
                if message is None:
                    await self.stop("died")
                    return {"error": "the worker died in the warm-up"}
                if "done" in message or "exited" in message:
                    break
            if "done" in message:  # its process stays for this candidate's evaluation, and no other's
                self._warmed = job.solution_source
            return json.loads(paths["result"].read_text())
        except (TimeoutError, BrokenPipeError, ConnectionResetError, OSError, ValueError) as exc:
            await self.stop("warm-up")
            return {"error": f"warm-up stopped: {type(exc).__name__}"}
        except asyncio.CancelledError:
            await self.stop("cancelled")
            raise
        finally:
            self.warming = False
            self.busy_s += time.monotonic() - t0
            shutil.rmtree(work, ignore_errors=True)

    async def _readline(self, proc: asyncio.subprocess.Process | None = None) -> dict[str, Any] | None:
        proc = proc or self.proc
        assert proc is not None and proc.stdout is not None
        while True:
            raw = await proc.stdout.readline()
            if not raw:
                return None
            with contextlib.suppress(ValueError):
                message = json.loads(raw)
                if isinstance(message, dict):
                    return message

    async def stop(self, why: str = "") -> None:
        proc, self.proc = self.proc, None
        self._warmed = None
        if proc is None:
            return
        if why:
            self.restarts.append(why)
        kill_tree(proc.pid)
        await proc.wait()

    async def close(self) -> None:
        await self.stop()
        tasks, self._standbys = self._standbys, []
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        procs, self._standby_procs = self._standby_procs, set()
        for proc in procs:
            if proc.returncode is None:
                await _drop(proc)
        if self.judge is not None:
            await self.judge.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def run(
        self, job: EvalJob, limit: EvalLimit, on_phase: PhaseCallback | None = None
    ) -> tuple[str, dict[str, Any] | None, str]:
        """(outcome, result, log) as runner.run_child returns them, within the evaluation's time
        limit (`limit`, engine.evaluate.host.eval_limit: a timed-out log starts with its words). A
        process that dies before it takes the job (killed while idle: not the job's doing) is
        replaced and the job sent again, once."""
        outcome = await self._attempt(job, limit, on_phase)
        if outcome is None:
            outcome = await self._attempt(job, limit, on_phase)
        if outcome is None:
            return "crashed", None, "the evaluation worker died twice before taking the job"
        return outcome

    async def _until_exited(self, timeout_s: float) -> bool:
        """Read until the server says its child exited; a server that does not say so in time, or
        dies, is stopped. True when it did."""
        deadline = time.monotonic() + max(timeout_s, 5.0)
        try:
            while True:
                message = await asyncio.wait_for(self._readline(), max(deadline - time.monotonic(), 0.01))
                if message is None:
                    break
                if "exited" in message:
                    return True
        except TimeoutError:
            pass
        await self.stop("its evaluation did not end")
        return False

    async def _call_child(self, request: dict[str, Any],
                          timeout_s: float) -> tuple[dict[str, Any] | None, float]:
        """One fresh-input call of the judge (engine.evaluate.host.judge) to the candidate's process,
        timed on this clock from the request's write to the answer's read."""
        assert self.proc is not None and self.proc.stdin is not None
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps({"audit": request}) + "\n").encode())
            await self.proc.stdin.drain()
            while True:
                left = timeout_s - (time.perf_counter() - t0)
                message = await asyncio.wait_for(self._readline(), max(left, 0.01))
                if message is None or "exited" in message:
                    return None, time.perf_counter() - t0
                if "audited" in message or "audit_error" in message:
                    return message, time.perf_counter() - t0
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            return None, time.perf_counter() - t0

    async def _attempt(
        self, job: EvalJob, limit: EvalLimit, on_phase: PhaseCallback | None
    ) -> tuple[str, dict[str, Any] | None, str] | None:
        """One try; None when the process died before taking the job."""
        # A process for this problem file (seeing the earlier ones too), alive: killed while idle
        # and not reaped yet, it is not handed the job.
        problem = await self.ready(job.problem_path)
        if problem is not None:
            return "crashed", None, problem
        assert self.proc is not None and self.proc.stdin is not None
        warmed, self._warmed = self._warmed, None
        if warmed is not None and warmed != job.solution_source:  # warmed for another candidate: ended
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.proc.stdin.write(b'{"end": 1}\n')
                await self.proc.stdin.drain()
            if not await self._until_exited(30.0):
                return None
        work = Path(tempfile.mkdtemp(prefix="job-", dir=self._dir))
        paths = {"job": work / "job.json", "result": work / "result.json", "log": work / "log.txt"}
        paths["job"].write_text(json.dumps(job.to_dict()))
        started = time.monotonic()
        taken = False  # the process has read the job (it says so first)
        sealed = False  # the candidate's code may have run: nothing more is taken as clean
        self.judged = {"clean": {}}
        try:
            self.proc.stdin.write((json.dumps({k: str(v) for k, v in paths.items()}) + "\n").encode())
            await self.proc.stdin.drain()
            deadline = started + limit.seconds
            watcher = asyncio.ensure_future(watch(self.proc.pid, self.sandbox.limits))
            try:
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError
                    reader = asyncio.ensure_future(self._readline())
                    done, _ = await asyncio.wait({reader, watcher}, timeout=remaining,
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if watcher in done:  # a memory or process limit broken: killed
                        reader.cancel()
                        await self.stop("limit")
                        return "crashed", None, f"killed: {watcher.result()}\n{_read_tail(paths['log'])}"
                    if reader not in done:
                        reader.cancel()
                        raise TimeoutError
                    message = reader.result()
                    if message is None:
                        code = await self.proc.wait()
                        await self.stop("died")
                        if not taken:
                            return None
                        return ("crashed", None, f"evaluation process died ({self.sandbox.exit_reason(code)})"
                                f" before reporting\n{_read_tail(paths['log'])}")
                    if "exited" in message:  # the server lives on; its child died before its verdict
                        if not taken:
                            return None
                        code = int(message["exited"])  # (os.waitstatus_to_exitcode: -N for signal N)
                        await self.stop("after crashed")  # what it may have left running goes too
                        return ("crashed", None, f"evaluation process died ({self.sandbox.exit_reason(code)})"
                                f" before reporting\n{_read_tail(paths['log'])}")
                    taken = taken or "taken" in message
                    sealed = sealed or "importing" in message
                    if "clean" in message and not sealed and isinstance(message["clean"], dict):
                        self.judged["clean"].update(message["clean"])
                    if "phase" in message and on_phase is not None:
                        await on_phase(str(message["phase"]))
                    if "done" in message:
                        break
                try:
                    result = json.loads(paths["result"].read_text())
                except (OSError, ValueError):
                    result = {"status": "crashed", "log": "the evaluation wrote no verdict"}
                if result.get("status") == "correct" and self.judge is not None:  # (still "timing" to a user)
                    # (its own allowance: an honest kernel that used most of its limit is not cut here)
                    self.judged["audit"] = await self.judge.audit(job, self._call_child, work,
                                                                  max(deadline - time.monotonic(), AUDIT_S),
                                                                  claim_ms=result.get("time_ms"))
                    deadline = max(deadline, time.monotonic() + 10.0)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.proc.stdin.write(b'{"end": 1}\n')
                    await self.proc.stdin.drain()
                await self._until_exited(deadline - time.monotonic())
            finally:
                watcher.cancel()
        except (TimeoutError, asyncio.CancelledError, BrokenPipeError, ConnectionResetError) as exc:
            if isinstance(exc, asyncio.CancelledError):
                await self.stop("cancelled")
                raise
            if isinstance(exc, TimeoutError):
                await self.stop("timeout")
                return "timeout", None, f"{limit.killed()}\n{_read_tail(paths['log'])}"
            await self.stop("died")
            return None  # it never read the job
        finally:
            self.busy_s += time.monotonic() - started
        log = _read_tail(paths["log"])
        shutil.rmtree(work, ignore_errors=True)  # what the candidate wrote there goes with it
        self.jobs_done += 1
        if self.standby and self.jobs_done == self.max_jobs - 1:
            self._begin_standby()  # its start overlaps the last job of this process
        if self.proc is not None and result.get("status") not in KEEP_AFTER:
            # Each candidate has a process of its own already; the server goes too after a verdict
            # that may leave processes running beside it (a double fork's orphan in its group).
            await self.stop(f"after {result.get('status')}")
        elif self.proc is not None and self.jobs_done >= self.max_jobs:
            await self.stop(f"after {self.max_jobs} evaluations")
        return "ok", result, log
