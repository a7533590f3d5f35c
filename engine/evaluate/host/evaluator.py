"""The evaluation pipeline for one backend: a compile pool (many builds at once, GPUs hidden,
each a subprocess) feeding the devices — one per GPU, each evaluating one variant at a time in its
own long-lived worker process (engine.evaluate.child.worker_process, driven by the engine-side handle
engine.evaluate.host.worker.Worker) that sees only that GPU — through one shared queue: a compiled variant
goes to whichever device is free first. Each stage has its own timeout.

Implements the `Evaluator` protocol (engine.evaluate.base); like all of engine.evaluate it imports
nothing from the rest of the engine: the problem's work (flops, bytes) comes with each job() call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from engine import settings
from engine.evaluate.base import Gate, PhaseCallback
from engine.evaluate.gate import Gate as StartGate
from engine.evaluate.harness.noise import timer_cores as timer_cores_now
from engine.evaluate.host import build_memo, clean_reference, static_rules
from engine.evaluate.host.admission import HostAdmission
from engine.evaluate.host.devices import (
    DOWN_REST_S,
    Device,
    bounded_seconds,
    check_gpus,
    cpu_timer_cores,
    default_compile_workers,
    visible_gpus,
)
from engine.evaluate.host.eval_limit import UNKNOWN_S, EvalLimit, eval_limit
from engine.evaluate.host.hostlock import describe_holder, gpu_key
from engine.evaluate.host.judge import judged
from engine.evaluate.host.make_job import make_job
from engine.evaluate.host.pch_ahead import PchAhead
from engine.evaluate.host.reference_history import ReferenceHistory
from engine.evaluate.host.reference_times import ReferenceTimings
from engine.evaluate.host.runner import default_cache_dir, failed_verdict, run_child, run_tool
from engine.evaluate.host.sandbox import WRITABLE_IN_CACHE, Limits, Sandbox
from engine.evaluate.host.worker import GPU_STANDBYS, Worker, ledger_dir, memory_env
from engine.evaluate.jobs import EvalJob
from engine.evaluate.languages import for_job, registry
from engine.evaluate.profile.profiler import DEFAULT_BUDGET_S, Profiler, wants_sanitizer
from engine.evaluate.verdict import Verdict

DEFAULT_TIMEOUTS = {"cuda": 900.0, "cpu": 600.0}  # a build's seconds (an evaluation's: eval_limit)

GATED_ACTIONS = ("probe", "ncu")  # profile actions set up before the device's lock (engine.evaluate.gate)
PROFILE_YIELD_S = 5.0  # a profile lets evaluations waiting for a device go first, this long at most
LOCK_WAIT_S = 600.0  # a gated profile process waits this long for the device's lock, then gives up


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
    """How a LocalEvaluator evaluates (None: the default, or what the problem or host says).

    gpus: the physical GPU indices to evaluate on (cuda; default: every visible GPU); ValueError for
    one that is not visible. devices: on cpu, this many independent devices (for tests of the
    dispatch: they share the cores, so no timing is quiet, and they take no host lock). host_lock:
    hold each device's host-wide lock (engine.evaluate.host.hostlock) while checking and timing on
    it, so that ktree processes on one host queue for a device. profile: auto | ncu | torch | off
    (engine.evaluate.profile.profiler): how correct variants are profiled, within
    `profile_budget_s`; a runtime error from an illegal or misaligned access is re-run once under
    compute-sanitizer (any mode but off). profile_each: profile each correct variant in evaluate(),
    after its verdict, still holding its device (`ktree eval --profile`); False: only those
    profile() is asked for (a search profiles what it reads: the parents and the best). cpu_timer
    (cpu backend, one device; devices.cpu_timer_cores): `pause` holds every compile slot while it
    times, so builds wait; `pin` gives the timer half the cores and the builds the other half, so
    both go on at once. worker: a long-lived worker per device (None: KTREE_WORKER, on by default).
    compile_baseline: time torch.compile's reference (None: KTREE_COMPILE_BASELINE, on by default)."""

    cache_dir: str | Path | None = None
    compile_workers: int | None = None
    compile_timeout_s: float | None = None
    eval_timeout: float | None = None  # --eval-timeout; None: from the problem (eval_limit)
    cuda_arch: str | None = None
    isolation: str = "auto"
    limits: Limits | None = None
    worker: bool | None = None
    worker_max_jobs: int = 32
    gpus: list[int] | None = None
    devices: int = 1
    host_lock: bool = True
    profile: str = "off"
    profile_budget_s: float = DEFAULT_BUDGET_S
    cpu_timer: str | None = None
    profile_each: bool = True
    compile_baseline: bool | None = None
    # A build goes on without a missing precompiled header, made beside it (None: unless the cpu
    # timer pauses builds, where the header comes first).
    pch_ahead: bool | None = None


class LocalEvaluator(ReferenceTimings):
    """The `Evaluator` on this host: a compile pool and one device per chosen GPU (or cpu slot)."""

    def __init__(self, backend: str, config: EvaluatorConfig | None = None, **fields: Any):
        """`config`: how it evaluates; `fields`: some of its fields by name, over `config`
        (`LocalEvaluator("cpu", devices=2)`; a name EvaluatorConfig lacks is a TypeError)."""
        c = self.config = dataclasses.replace(config or EvaluatorConfig(), **fields)
        self.backend = backend
        self.session: Any = None  # who evaluates (the search's session id): recorded in the lock
        # Hears, in the job's own task, what a job waits on that its phases do not say: another
        # process holding the device's host lock (once per holder), the reference warmed or timed.
        self.on_note: Callable[[str], None] | None = None
        self.cache_dir = str(c.cache_dir or default_cache_dir())
        Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
        self.compile_workers = c.compile_workers or default_compile_workers()
        default_compile = DEFAULT_TIMEOUTS[backend]
        self.compile_timeout_s = c.compile_timeout_s or default_compile
        self.eval_timeout = c.eval_timeout  # for a job that carries none (EvalJob.eval_timeout)
        self.history = ReferenceHistory()  # the reference's measured times (reference_history)
        self._compile_slots = asyncio.Semaphore(self.compile_workers)
        self.sandbox = Sandbox(c.isolation, backend, c.limits or Limits())  # for every child below
        env = {"MAX_JOBS": "2", "KTREE_LEDGER_DIR": ledger_dir(self.cache_dir), **memory_env()}
        if settings.get("KTREE_LANGUAGES"):  # more kernel languages: the children load them too
            env["KTREE_LANGUAGES"] = settings.get("KTREE_LANGUAGES") or ""
        if backend == "cuda":
            env["TORCH_CUDA_ARCH_LIST"] = c.cuda_arch or os.environ.get("TORCH_CUDA_ARCH_LIST", "")
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["TORCH_CUDA_ARCH_LIST"] = ""
        for language in registry().values():  # e.g. Triton's interpreter on the cpu
            env.update(language.process_env(backend))
        self.cpu_timer, timer_cores, build_cores = cpu_timer_cores(c.cpu_timer, backend, c.devices,
                                                                   timer_cores_now())
        if timer_cores is not None:
            env["KTREE_CPU_CORES"] = ",".join(map(str, timer_cores))
        self.timer_cores, self.build_cores = timer_cores, build_cores
        self._run_env = env
        self._compile_env = {**env, "CUDA_VISIBLE_DEVICES": ""}
        if build_cores is not None:
            self._compile_env["KTREE_CPU_CORES"] = ",".join(map(str, build_cores))
        # The precompiled header made beside the first builds, not before them, where builds need
        # not wait for a timer (host.pch_ahead); with the cpu timer pausing builds, it comes first.
        pch_ahead = c.pch_ahead if c.pch_ahead is not None else (backend == "cuda"
                                                                 or self.cpu_timer == "pin")
        if pch_ahead:
            self._compile_env["KTREE_PCH_AHEAD"] = "1"
        self.pch_ahead = PchAhead(self.cache_dir, self.sandbox, self._compile_env,
                                  lambda: self._slot("compile"))
        self.profiler = Profiler(c.profile, self.cache_dir, c.profile_budget_s)
        self.profile_each = c.profile_each
        self.waiting = {"compile": 0, "device": 0}  # jobs queued for each stage
        # The check trials' input seed: secret to this evaluator (one session, one `ktree eval`
        # run), sent with each job, never written down (engine.evaluate.harness.expected_cache).
        self._input_seed = secrets.randbits(62)
        self._warm_locks: dict[str, asyncio.Lock] = {}
        self._warmed: set[str] = set()
        self._reference_failed: dict[Path, dict] = {}
        self._builds_allowed = asyncio.Event()  # cleared while a CPU timing waits for the cores
        self._builds_allowed.set()
        # Host-wide, every ktree process together: the host's build slots, and on the cpu backend
        # the timer's cores against other processes' builds and worker starts (host.admission).
        self._admission = HostAdmission(cpu=backend == "cpu" and c.host_lock)
        worker = c.worker
        if worker is None:  # KTREE_WORKER=0: a fresh process per evaluation, as before the worker
            worker = settings.get("KTREE_WORKER", "1") != "0"
        # The torch.compile baseline (cuda): compiled and timed once per problem and GPU, tens of
        # seconds to minutes cold (conv2d: 213 s on a fresh H100 box). KTREE_COMPILE_BASELINE=0
        # skips it (speedup vs torch.compile then unknown), for checks that do not read it.
        compile_baseline = c.compile_baseline
        if compile_baseline is None:
            compile_baseline = settings.get("KTREE_COMPILE_BASELINE", "1") != "0"
        self.compile_baseline = compile_baseline
        self.gpus: list[int] | None = None
        if backend == "cuda":
            visible = visible_gpus()
            self.gpus = list(visible) if c.gpus is None else list(c.gpus)
            check_gpus(self.gpus, visible)
            slots = [(f"gpu{g}", g, {"CUDA_VISIBLE_DEVICES": visible[g]}) for g in self.gpus]
            keys = [gpu_key(g, visible[g]) if c.host_lock else None for g in self.gpus]
        else:
            if c.gpus:
                raise ValueError("GPUs are chosen on the cuda backend only")
            slots = [(f"cpu{i}", i, {}) for i in range(max(1, c.devices))]
            # One cpu device: the whole host's cores ("cpu"). Several (tests of the dispatch, which
            # share the cores on purpose): no host lock.
            keys = ["cpu" if c.host_lock and c.devices <= 1 else None] * len(slots)
        self.devices: list[Device] = []
        self._starting: dict[int, asyncio.Task[Any]] = {}  # early worker starts (start_workers), by device
        self._free: asyncio.Queue[Device] = asyncio.Queue()  # one queue: first free device first
        for (name, index, own), key in zip(slots, keys, strict=True):
            device_env = {**env, **own, "KTREE_DEVICE_INDEX": str(index)}
            # A GPU's next worker is kept started ahead (worker.Worker: a replacement waits only
            # for its CUDA context). Not on the cpu: its start would take cores from the timing
            # of the job it overlaps.
            runner = (Worker(device_env, self.sandbox, self.cache_dir, max_jobs=c.worker_max_jobs,
                             standby="always" if backend == "cuda" else False,
                             standby_depth=GPU_STANDBYS) if worker else None)
            device = Device(name, index, device_env, runner, lock_key=key, builds_allowed=self._builds_allowed)
            self.devices.append(device)
            self._free.put_nowait(device)

    @property
    def worker(self) -> Worker | None:
        """The first device's worker (the only one with a single device)."""
        return self.devices[0].worker

    def start_workers(self, *problem_paths: str) -> None:
        """Start the worker of every device that has none yet, in the background, so that the
        first variants (still building) find them ready: a start (Python, torch, the CUDA context:
        seconds) is then not a device's idle time while compiled variants wait; started for every
        problem file given (a suite's: then no problem's first job restarts it). Never restarts
        a worker (a job's own `ready` does that, before the device's lock). On cuda only: on the
        cpu backend a start would take cores from the builds it overlaps."""
        if self.backend != "cuda" or not problem_paths:
            return
        for device in self.devices:
            worker = device.worker
            key = id(device)
            if worker is not None and worker.idle_unstarted() and key not in self._starting:
                task = asyncio.get_running_loop().create_task(worker.ready(*problem_paths))
                self._starting[key] = task
                task.add_done_callback(lambda t, key=key: self._starting.pop(key, None))

    def device_states(self) -> list[dict[str, Any]]:
        """Per device: name, busy, jobs (evaluations finished), busy_s, queue (jobs waiting for
        that device alone: 0 here, one queue serves all), alive, waiting_for (while another
        process on the host holds the device's lock: "gpu0 (held by pid N, session M)", else None)."""
        return [d.state() for d in self.devices]

    async def close(self) -> None:
        """Stop the worker processes (they also end by themselves when the engine dies), once the
        precompiled headers being made are (host.pch_ahead)."""
        await self.pch_ahead.close()
        for task in list(self._starting.values()):
            task.cancel()
        for device in self.devices:
            if device.worker is not None:
                await device.worker.close()

    def job(self, problem_path: str | os.PathLike[str], source: str, sizes: dict[str, int], *,
            flops: float | None, bytes: float | None, **options: Any) -> EvalJob:
        """The job for one variant, built in this evaluator's build cache (see Evaluator.job)."""
        return make_job(problem_path, source, sizes, backend=self.backend, cache_dir=self.cache_dir,
                        flops=flops, bytes=bytes, **options)

    async def build(self, job: EvalJob) -> tuple[str, dict[str, Any] | None, str]:
        """The job's build in the compile pool, a slot held (a build made before: remembered):
        the compile process's (outcome, result, log)."""
        async with self._slot("compile"):
            return await self._compile(job)

    async def _compile(self, job: EvalJob) -> tuple[str, dict[str, Any] | None, str]:
        """The job's build (remembered where made before), its slot held by the caller; the
        precompiled headers it went without started beside it (host.pch_ahead)."""
        built = await build_memo.compile_job(
            job.replace(mode="compile"), self.compile_timeout_s, self._compile_env, self.sandbox)
        self.pch_ahead.after_build(built[1])
        return built

    async def run_alone(self, job: EvalJob) -> tuple[str, dict[str, Any] | None, str]:
        """The job in a fresh process of its own (no worker, no device held): (outcome, result, log)."""
        return await run_child(job, job.eval_timeout or self.eval_timeout or UNKNOWN_S, self._run_env)

    async def evaluate(self, job: EvalJob, on_phase: PhaseCallback | None = None,
                       gate: Gate | None = None) -> Verdict:
        async def phase(name: str) -> None:
            if on_phase is not None:
                await on_phase(name)

        static = static_rules.start(job.solution_source, job.mode)  # GPU MODE's rules, in a thread
        if job.mode == "evaluate":
            self.start_workers(job.problem_path)  # while this variant builds (cuda)
        async with self._slot("compile"):
            await phase("compiling")
            t_build = time.monotonic()
            outcome, result, log = await self._compile(job)
            build_wall = time.monotonic() - t_build
        if outcome != "ok" or result is None:
            return failed_verdict(outcome, f"while compiling: {log}", job)
        build_s = bounded_seconds(result.get("compile_s"), build_wall)
        if result["status"] != "compiled":
            return Verdict(
                status=result["status"], backend=job.backend, sizes=dict(job.sizes),
                compile_s=build_s, log=result["log"],
            )
        # The torch.compile baseline comes from the GPU that times the variant: warm its caches
        # now, then time it on the device this variant gets, while holding it (once per GPU).
        baseline = (self.compile_baseline and self.backend == "cuda" and job.ref_compile_ms is None
                    and job.mode == "evaluate")
        if baseline:
            await self._warm(job.problem_path, job.sizes, job.precision)

        if job.input_seed is None and job.mode == "evaluate":
            # the session's secret (engine.evaluate.harness.expected_cache)
            job = job.replace(input_seed=self._input_seed)

        pending: dict[str, dict] = {}
        prelock: dict[str, Any] = {}  # what was done before the device's lock (Triton's JIT)
        language = for_job(job)
        prewarm = job.mode == "evaluate" and language.prewarms(self.backend)

        async def prepare(device: Device) -> None:
            # A worker process is started (Python, torch, its CUDA context) before the device's
            # host lock is taken, not while holding it; so is a reference timing not on disk yet
            # (set up and compiled, waiting at its gate to time).
            if device.worker is not None:
                with device.staged("start"):  # (on the cpu, its wait for another process's timing too)
                    async with self._admission.busy("a worker's start", self._note):
                        await device.worker.ready(job.problem_path)
                if prewarm and "jit" not in prelock:  # e.g. Triton's JIT, compiling only
                    t_jit = time.monotonic()
                    report = await device.worker.warm(job, language.first_call_limit_s)
                    prelock["jit"] = {**report, "wall_s": round(time.monotonic() - t_jit, 4)}
            if baseline:
                if "reference" in pending:  # started for a device that could not be used after all
                    self.reference_cancel(pending.pop("reference"))
                pending["reference"] = await self.reference_start(job.problem_path, job.sizes, device,
                                                                  job.precision)

        await phase("waiting")
        try:
            verdict = await self._judge(job, gate, prepare, pending, baseline, build_s, on_phase)
        finally:
            if "reference" in pending:  # never reached the device (cancelled, failed)
                self.reference_cancel(pending.pop("reference"))
        if prelock and verdict.timing is not None:
            verdict = dataclasses.replace(verdict, timing={**verdict.timing, "prelock": prelock})
        return await static_rules.judged(verdict, static)

    async def _judge(self, job: EvalJob, gate: Gate | None,
                     prepare: Callable[[Device], Awaitable[None]], pending: dict[str, dict], baseline: bool,
                     build_s: float | None, on_phase: PhaseCallback | None) -> Verdict:
        """evaluate()'s part on a device: held (its host lock), the reference timed where it is
        not on disk yet, the worker's run, what comes after (a profile, the sanitizer). A verdict of
        ktree's own out-of-memory (engine.evaluate.harness.expected_cache.label_oom: never the candidate's) is
        judged once more, on a fresh worker."""
        retried = False
        while True:
            async with self._device(gate, prepare) as device:
                if (device.worker is not None and not device.worker.started_ok
                        and any(d.alive for d in self.devices if d is not device)):
                    device.resting = True  # its worker could not start (in prepare): not the
                    continue  # variant's fault, which goes to another device; this one rests
                held_from = time.monotonic()
                held: dict[str, float] = {}
                run = job
                if baseline:
                    ref = await self.reference_finish(pending.pop("reference"))
                    if ref.get("compile_ms"):
                        run = job.replace(ref_compile_ms=ref["compile_ms"])
                    if ref.get("eager_stats") and run.ref_eager_clean is None:  # timed where no candidate ran
                        run = run.replace(ref_eager_clean=ref["eager_stats"])
                    held["reference"] = time.monotonic() - held_from
                if run.mode == "evaluate" and run.ref_eager_clean is None:  # (clean_reference: kept, told)
                    run = run.replace(ref_eager_clean=clean_reference.read(self._clean_file(run, device)))
                limit = self._limit(run, device)
                if " GB" in limit.why and limit.source != "flag":  # a large problem: its time said, not silent
                    self._note(f"evaluating within {limit.seconds:g} s ({limit.why})")
                if device.worker is not None:
                    starts = device.worker.starts
                    t_run = time.monotonic()
                    outcome, result, log = await device.worker.run(run, limit, on_phase)
                    if device.worker.starts != starts:  # started while holding the lock
                        held["start"] = device.worker.last_start_s
                    held["worker"] = time.monotonic() - t_run
                    if not device.worker.started_ok and any(d.alive for d in self.devices if d is not device):
                        device.resting = True  # its worker cannot start: not the variant's fault,
                        continue  # which goes to another device; this one is tried again later
                else:
                    if on_phase is not None:
                        await on_phase("evaluating")
                    t_run = time.monotonic()
                    outcome, result, log = await run_child(run, limit, device.env, self.sandbox)
                run_wall = time.monotonic() - t_run
                device.jobs += 1
                if outcome != "ok" or result is None:  # killed at its own limit: the device is let go now
                    return dataclasses.replace(failed_verdict(outcome, log, run), gpu=device.describe(),
                                               timing={"eval_limit": limit.to_dict()})
                verdict = Verdict.from_dict(result)
                if (verdict.status == "crashed" and (verdict.log or "").startswith("ktree out of memory")
                        and not retried):
                    retried = True  # its worker restarts (after crashed): its memory comes back
                    self._note(f"{verdict.log.splitlines()[0]}; judging it again")
                    continue
                verdict = judged(verdict, run, device.worker.judged if device.worker is not None else None,
                                 self._clean_file(run, device), self.cache_dir, self.backend)
                # The child's own clocks, bounded by the engine's (the candidate ran in that process).
                verdict = dataclasses.replace(verdict, eval_s=bounded_seconds(verdict.eval_s, run_wall))
                jit_s = verdict.jit.get("jit_s") if verdict.jit else None  # Triton: its JIT, in the worker
                verdict = dataclasses.replace(verdict, compile_s=(build_s or 0.0) + jit_s
                                              if jit_s is not None else build_s)
                device.info = verdict.gpu or device.info
                verdict = self.history.judge(dataclasses.replace(verdict, timing={
                    **(verdict.timing or {}), "eval_limit": limit.to_dict()}), *self._history(run, device),
                    clean=run.ref_eager_clean)
                t_after = time.monotonic()
                verdict = await self._after(verdict, run, device, on_phase)
                held["after"] = time.monotonic() - t_after  # a sanitizer run, if any
                held["total"] = time.monotonic() - held_from
                verdict = dataclasses.replace(verdict, timing={
                    **(verdict.timing or {}), "held_s": {k: round(v, 4) for k, v in held.items()}})
                break
        return await self._profile_after(verdict, run, on_phase)

    def _limit(self, job: EvalJob, device: Device) -> EvalLimit:
        """How long this evaluation may hold the device (engine.evaluate.host.eval_limit): the job's
        --eval-timeout, else from the reference's clean time or its history's median."""
        ref_ms = (job.ref_eager_clean or {}).get("median") or self.history.median(*self._history(job, device))
        return eval_limit(self.backend, ref_ms, time_budget_s=job.time_budget_s, trials=job.trials,
                          floor_s=for_job(job).eval_floor_s, eval_timeout=job.eval_timeout or self.eval_timeout,
                          nbytes=job.bytes)

    async def _after(self, verdict: Verdict, job: EvalJob, device: Device,
                     on_phase: PhaseCallback | None) -> Verdict:
        """Still holding the device, outside the timed window: re-run a variant that hit an illegal
        or misaligned access under compute-sanitizer. (A profile is taken after the device is let
        go: _profile_after.)"""
        if self.profiler.mode == "off" or job.mode != "evaluate":
            return verdict
        if verdict.status == "runtime_error" and self.backend == "cuda" and wants_sanitizer(verdict.log):
            if on_phase is not None:
                await on_phase("evaluating")  # under compute-sanitizer
            report = await self.profiler.sanitize(self._tool_runner(device), job, {})
            if report:
                return dataclasses.replace(
                    verdict, sanitizer=report,
                    log=f"{verdict.log}\n\ncompute-sanitizer (memcheck) on a re-run:\n{report}")
        return verdict

    async def _profile_after(self, verdict: Verdict, job: EvalJob,
                             on_phase: PhaseCallback | None) -> Verdict:
        """With profile_each: a correct variant's profile, taken once its device was let go (it
        queues behind the checks waiting for a device, and holds one only for the profiled launch:
        _tool_queued)."""
        if (self.profiler.mode == "off" or job.mode != "evaluate" or not verdict.ok
                or not self.profile_each):
            return verdict
        if on_phase is not None:
            await on_phase("profiling")
        t0 = time.monotonic()
        verdict = await self._profile_on(None, job, verdict)
        return dataclasses.replace(verdict, timing={**(verdict.timing or {}),
                                                    "profile_s": round(time.monotonic() - t0, 4)})

    async def profile(self, job: EvalJob, verdict: Verdict,
                      on_phase: PhaseCallback | None = None) -> Verdict:
        """The judged variant's verdict with its profile, taken now as evaluate() would take it
        (on a device held with its host lock, nothing else running there); the verdict unchanged
        when profiling is off or it is not ok. On cuda the build is made sure of first (a cache
        hit, unless the cache was cleared since)."""
        if self.profiler.mode == "off" or not verdict.ok or job.mode != "evaluate":
            return verdict
        if self.backend == "cuda":  # (the cpu profile runs no candidate code: rates against peaks)
            outcome, result, log = await self.build(job)
            if outcome != "ok" or result is None or result.get("status") != "compiled":
                lines = [ln for ln in ((result or {}).get("log") or log).splitlines() if ln.strip()]
                return dataclasses.replace(verdict, profile={
                    "tool": self.profiler.mode,
                    "error": f"could not build it again: {lines[-1][:300] if lines else outcome}"})
        if on_phase is not None:
            await on_phase("profiling")
        return await self._profile_on(None, job, verdict)

    async def _profile_on(self, device: Device | None, job: EvalJob, verdict: Verdict) -> Verdict:
        """Profile a correct variant: on `device` (held by the caller), or None: each tool run
        queued for a device itself (_tool_queued)."""
        where = device or self.devices[0]
        profile = await self.profiler.profile(self._tool_runner(device), job, verdict.time_ms, {},
                                              where.lock_key or where.name, ref_ms=verdict.ref_eager_ms)
        return dataclasses.replace(verdict, profile=profile)

    def _tool_runner(self, device: Device | None) -> Any:
        """How the profiler starts its tools: in the sandbox, on `device` (held by the caller), or
        with None, queued for whichever device comes free (_tool_queued)."""

        async def runner(prefix: list[str], j: EvalJob, action: str, env: dict[str, str],
                         timeout_s: float) -> tuple[dict | None, str, str]:
            if device is None:
                return await self._tool_queued(prefix, j, action, env, timeout_s)
            return await run_tool(prefix, j, action, {**device.env, **env}, timeout_s, self.sandbox)

        return runner

    async def _tool_queued(self, prefix: list[str], j: EvalJob, action: str, env: dict[str, str],
                           timeout_s: float) -> tuple[dict | None, str, str]:
        """A profile tool's run behind the checks: it lets evaluations waiting for a device go
        first (for up to PROFILE_YIELD_S), then takes one. An ncu run (GATED_ACTIONS) is started
        before the device's host lock — ncu, Python, torch, the CUDA context, the candidate's
        import, its model and inputs — and waits at its gate (engine.evaluate.gate); the device is
        held from the gate's opening to the tool's end: the warm-up and the profiled launch."""
        t0 = time.monotonic()
        while self.waiting["device"] > 0 and time.monotonic() - t0 < PROFILE_YIELD_S:
            await asyncio.sleep(0.05)
        box: dict[str, Any] = {}

        def stop() -> None:
            if "task" in box and not box["task"].done():
                box["task"].cancel()
            if "gate" in box:
                box.pop("gate").close()
            box.pop("task", None)

        async def prepare(device: Device) -> None:
            if action not in GATED_ACTIONS:
                return
            stop()  # started for a device that was not used after all
            gate = box["gate"] = StartGate(Path(self.cache_dir) / WRITABLE_IN_CACHE / "gates")
            box["task"] = asyncio.ensure_future(run_tool(
                prefix, j, action, {**device.env, **env, **gate.env, "KTREE_GATE_WAIT_S": str(LOCK_WAIT_S)},
                timeout_s + LOCK_WAIT_S, self.sandbox))
            await gate.ready(box["task"])

        try:
            async with self._device(prepare=prepare) as device:
                if "task" in box:
                    box["gate"].open()
                    return await box["task"]
                return await run_tool(prefix, j, action, {**device.env, **env}, timeout_s, self.sandbox)
        finally:
            stop()

    @contextlib.asynccontextmanager
    async def _device(self, gate: Gate | None = None,
                      prepare: Callable[[Device], Awaitable[None]] | None = None) -> AsyncIterator[Device]:
        """Whichever device is free first (one queue for all), held for one evaluation; the
        waiters are counted for the progress display. With a gate: only while it is open (a
        device that comes free while it is closed goes back to the queue). The device's host
        lock is held for the whole use: another ktree process on the host holding it makes this
        wait (shown in the device's state), without blocking the event loop."""
        while True:
            if gate is not None:
                await gate.wait()
            self.waiting["device"] += 1
            try:
                device = await self._free.get()
            finally:
                self.waiting["device"] -= 1
            if gate is None or gate.is_open():
                if prepare is not None:
                    try:
                        await prepare(device)
                    except BaseException:
                        self._free.put_nowait(device)
                        raise
                lock = device.host_lock()
                if lock is None:
                    break
                try:
                    await lock.acquire(self.session, lambda h, d=device: self._lock_wait(d, h))
                except BaseException:
                    self._free.put_nowait(device)
                    raise
                finally:
                    device.waiting_for = None
                if gate is None or gate.is_open():
                    break
                lock.release()  # paused while it waited for the host: not now
            self._free.put_nowait(device)  # paused while it waited: not now
        try:
            async with self._quiet_cpu():
                device.busy, started = True, time.monotonic()
                try:
                    yield device
                finally:
                    device.busy = False
                    device.busy_s += time.monotonic() - started
        finally:
            if device.lock is not None:
                device.lock.release()
            if device.resting:  # back in the queue after a rest
                device.resting = False
                asyncio.get_running_loop().call_later(DOWN_REST_S, self._free.put_nowait, device)
            else:
                self._free.put_nowait(device)

    def _lock_wait(self, device: Device, holder: dict[str, Any] | None) -> None:
        """The device's host lock is taken by another process (holder: who, as it recorded itself)."""
        waiting_for = f"{device.name} ({describe_holder(holder)})"
        if waiting_for != device.waiting_for:
            self._note(f"waiting for {waiting_for}")
        device.waiting_for = waiting_for

    def _note(self, text: str) -> None:
        if self.on_note is not None:
            self.on_note(text)

    @contextlib.asynccontextmanager
    async def _slot(self, stage: str) -> AsyncIterator[None]:
        """Hold a compile slot; count waiters for the progress display."""
        assert stage == "compile"
        sem = self._compile_slots
        self.waiting[stage] += 1
        try:
            while True:
                await self._builds_allowed.wait()  # a CPU timing waiting for the cores goes first
                await sem.acquire()
                if self._builds_allowed.is_set():
                    break
                sem.release()
        finally:
            self.waiting[stage] -= 1
        try:
            async with self._admission.build(self._note):
                yield
        finally:
            sem.release()

    @contextlib.asynccontextmanager
    async def _quiet_cpu(self) -> AsyncIterator[None]:
        """On the cpu backend, timing shares the cores with the compilers: hold every compile
        slot while timing, so no build skews the numbers, and let no new build start while the
        timing waits for the running ones to end. (The device is held already, so only one task
        ever takes several slots: no deadlock.) Not with several cpu devices (tests of the
        dispatch), whose timings share the cores by design."""
        if self.backend != "cpu" or len(self.devices) > 1 or self.cpu_timer == "pin":
            yield  # (pinned: the builds run on other cores than the timer's)
            return
        taken = 0
        self._builds_allowed.clear()  # no new build starts while this timing waits and runs
        try:
            for _ in range(self.compile_workers):
                await self._compile_slots.acquire()
                taken += 1
            async with self._admission.quiet(self._note):  # ... nor any other ktree process's
                yield
        finally:
            for _ in range(taken):
                self._compile_slots.release()
            self._builds_allowed.set()

