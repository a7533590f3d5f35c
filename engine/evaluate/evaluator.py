"""The evaluation pipeline for one backend: a compile pool (many builds at once, GPUs hidden,
each a subprocess) feeding a device slot (one evaluation at a time) served by a long-lived worker
process (engine.evaluate.workers), each stage with its own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from engine.evaluate.jobs import EvalJob
from engine.evaluate.runner import default_cache_dir, failed_verdict, run_child
from engine.evaluate.sandbox import Limits, Sandbox
from engine.evaluate.verdict import Verdict
from engine.evaluate.workers import Worker

PhaseCallback = Callable[[str], Awaitable[None]]

DEFAULT_TIMEOUTS = {  # (compile, run) seconds
    "cuda": (900.0, 300.0),
    "cpu": (600.0, 300.0),
}


def default_compile_workers() -> int:
    """Cores minus two (for the engine and the timer), or every core on a small machine."""
    cores = os.cpu_count() or 1
    return cores - 2 if cores > 4 else cores


class Evaluator:
    def __init__(
        self,
        backend: str,
        cache_dir: str | Path | None = None,
        compile_workers: int | None = None,
        compile_timeout_s: float | None = None,
        run_timeout_s: float | None = None,
        cuda_arch: str | None = None,
        isolation: str = "auto",
        limits: Limits | None = None,
        worker: bool | None = None,
        worker_max_jobs: int = 32,
    ):
        self.backend = backend
        self.cache_dir = str(cache_dir or default_cache_dir())
        Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
        self.compile_workers = compile_workers or default_compile_workers()
        default_compile, default_run = DEFAULT_TIMEOUTS[backend]
        self.compile_timeout_s = compile_timeout_s or default_compile
        self.run_timeout_s = run_timeout_s or default_run
        self._compile_slots = asyncio.Semaphore(self.compile_workers)
        self._device_slot = asyncio.Semaphore(1)
        self.sandbox = Sandbox(isolation, backend, limits or Limits())  # for every child below
        env = {"MAX_JOBS": "2"}
        if backend == "cuda":
            env["TORCH_CUDA_ARCH_LIST"] = cuda_arch or os.environ.get("TORCH_CUDA_ARCH_LIST", "")
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["TORCH_CUDA_ARCH_LIST"] = ""
        self._run_env = env
        self._compile_env = {**env, "CUDA_VISIBLE_DEVICES": ""}
        self.waiting = {"compile": 0, "device": 0}  # jobs queued for each stage
        self._reference_locks: dict[str, asyncio.Lock] = {}
        self._builds_allowed = asyncio.Event()  # cleared while a CPU timing waits for the cores
        self._builds_allowed.set()
        if worker is None:  # KTREE_WORKER=0: a fresh process per evaluation, as before the worker
            worker = os.environ.get("KTREE_WORKER", "1") != "0"
        self.worker = Worker(env, self.sandbox, self.cache_dir, max_jobs=worker_max_jobs) if worker else None

    async def close(self) -> None:
        """Stop the worker process (it also ends by itself when the engine dies)."""
        if self.worker is not None:
            await self.worker.close()

    def job(self, problem_path: str, source: str, sizes: dict[str, int], **kw: object) -> EvalJob:
        path = str(Path(problem_path).resolve())
        if "flops" not in kw and "bytes" not in kw:
            kw["flops"], kw["bytes"] = _problem_cost(path, tuple(sorted(sizes.items())))
        return EvalJob(
            problem_path=path, solution_source=source, backend=self.backend,
            cache_dir=self.cache_dir, sizes=dict(sizes), **kw,  # type: ignore[arg-type]
        )

    async def reference(self, problem_path: str, sizes: dict[str, int]) -> dict:
        """The problem's eager and torch.compile times on this device, measured once per problem
        file + sizes + torch version + host and kept in the build cache (torch.compile takes
        tens of seconds to warm). {"error": ...} when the reference could not be timed."""
        import hashlib
        import json
        import platform

        import torch

        path = Path(problem_path).resolve()
        key = hashlib.sha256(json.dumps([
            path.read_text(), sorted(sizes.items()), self.backend, torch.__version__,
            platform.node(), os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        ]).encode()).hexdigest()[:24]
        file = Path(self.cache_dir) / "reference" / f"{key}.json"
        async with self._reference_locks.setdefault(key, asyncio.Lock()):
            if file.exists():
                return json.loads(file.read_text())
            result = await self.time_reference(str(path), sizes)
            if "error" not in result:
                file.parent.mkdir(parents=True, exist_ok=True)
                tmp = file.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(result))
                os.replace(tmp, file)
            return result

    async def evaluate(self, job: EvalJob, on_phase: PhaseCallback | None = None) -> Verdict:
        async def phase(name: str) -> None:
            if on_phase is not None:
                await on_phase(name)

        if self.backend == "cuda" and job.ref_compile_ms is None and job.mode == "evaluate":
            ref = await self.reference(job.problem_path, job.sizes)  # once per problem, cached
            if ref.get("compile_ms"):
                job = job.replace(ref_compile_ms=ref["compile_ms"])
        async with self._slot("compile"):
            await phase("compiling")
            outcome, result, log = await run_child(
                job.replace(mode="compile"), self.compile_timeout_s, self._compile_env,
                self.sandbox)
        if outcome != "ok" or result is None:
            return failed_verdict(outcome, f"while compiling: {log}", job)
        if result["status"] != "compiled":
            return Verdict(
                status=result["status"], backend=job.backend, sizes=dict(job.sizes),
                compile_s=result.get("compile_s"), log=result["log"],
            )
        build_s = result.get("compile_s")

        await phase("waiting")
        async with self._slot("device"), self._quiet_cpu():
            if self.worker is not None:
                outcome, result, log = await self.worker.run(job, self.run_timeout_s, on_phase)
            else:
                await phase("evaluating")
                outcome, result, log = await run_child(job, self.run_timeout_s, self._run_env,
                                                       self.sandbox)
        if outcome != "ok" or result is None:
            return failed_verdict(outcome, log, job)
        return dataclasses.replace(Verdict.from_dict(result), compile_s=build_s)

    async def time_reference(self, problem_path: str, sizes: dict[str, int]) -> dict:
        """Eager and torch.compile times of a problem's reference (one device slot, no candidate).
        Returns the child's result, or {"error": ...} when it died or timed out."""
        job = self.job(problem_path, "", sizes, mode="reference")
        if self.backend == "cuda":  # compile in the pool (several at once), time alone
            async with self._slot("compile"):
                await run_child(job.replace(mode="warm"), self.compile_timeout_s, self._run_env,
                                self.sandbox)
        async with self._slot("device"), self._quiet_cpu():
            outcome, result, log = await run_child(job, self.compile_timeout_s, self._run_env,
                                                   self.sandbox)
        if outcome != "ok" or result is None:
            return {"error": f"{outcome}: {log[-500:]}"}
        return result

    @contextlib.asynccontextmanager
    async def _slot(self, stage: str) -> AsyncIterator[None]:
        """Hold a compile slot or the device; count waiters for the progress display."""
        sem = self._compile_slots if stage == "compile" else self._device_slot
        self.waiting[stage] += 1
        try:
            while True:
                if stage == "compile":  # a CPU timing waiting for the cores goes first
                    await self._builds_allowed.wait()
                await sem.acquire()
                if stage != "compile" or self._builds_allowed.is_set():
                    break
                sem.release()
        finally:
            self.waiting[stage] -= 1
        try:
            yield
        finally:
            sem.release()

    @contextlib.asynccontextmanager
    async def _quiet_cpu(self) -> AsyncIterator[None]:
        """On the cpu backend, timing shares the cores with the compilers: hold every compile
        slot while timing, so no build skews the numbers, and let no new build start while the
        timing waits for the running ones to end. (The device slot is held already, so only one
        task ever takes several slots: no deadlock.)"""
        if self.backend != "cpu":
            yield
            return
        taken = 0
        self._builds_allowed.clear()  # no new build starts while this timing waits and runs
        try:
            for _ in range(self.compile_workers):
                await self._compile_slots.acquire()
                taken += 1
            yield
        finally:
            for _ in range(taken):
                self._compile_slots.release()
            self._builds_allowed.set()


@functools.lru_cache(maxsize=64)
def _problem_cost(path: str, sizes: tuple[tuple[str, int], ...]) -> tuple[float | None, float | None]:
    """FLOPs and bytes of the problem at these sizes, for the speed-of-light floor; (None, None)
    where there is no cost to be had."""
    from engine.problems import load_problem

    try:
        cost = load_problem(path).cost_at(dict(sizes))
    except Exception:  # a problem that cannot be costed only loses its speed-of-light floor
        return None, None
    return cost.flops or None, cost.bytes or None
