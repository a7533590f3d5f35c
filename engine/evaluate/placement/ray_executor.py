"""Evaluations on a Ray cluster (`ktree run --executor ray`): one actor per GPU of the cluster (on
the cpu backend, one per requested worker), each running the local evaluator on its node, so a
variant is compiled where it runs (the torch ABI must match) and timed on that node's GPU.

The engine stays here, with the LLM keys and the DB. A job carries the problem file's text (the
actor writes it into its own directory on its node) and the problem's work (flops, bytes: the
caller's, as with the local evaluator), never a key. What a node runs reaches it through Ray's
runtime_env (py_modules): `engine` with only `settings` and `evaluate` (self-contained, this
module with it: the actor's class lives here) — see `node_package`. A local cluster
started from here is started with every key variable out of the environment, so no raylet or Ray
worker inherits one.

Dispatch: each job goes to the live actor with the fewest jobs in flight (an actor compiles several
while it times one). Phases come back by polling each busy actor. An actor that dies, or whose node
goes away, loses no job: each of its jobs is sent to another live actor (counted, and said in the
verdict's `placement` and log), and the actor is replaced when the cluster has room for it.

Only this module imports ray, and only when the ray executor is asked for.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import hashlib
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import engine
from engine.evaluate.base import Gate, PhaseCallback
from engine.evaluate.host.make_job import make_job
from engine.evaluate.host.sandbox import is_secret
from engine.evaluate.jobs import EvalJob
from engine.evaluate.placement.backends import PlacementError, pick_backend
from engine.evaluate.verdict import Verdict

RAY_MISSING = "ray is not installed: pip install 'ktree[ray]'"
DEVICE_PHASES = frozenset({"checking", "timing", "evaluating", "profiling"})
PHASE_POLL_S = 0.25
START_TIMEOUT_S = 300.0  # an actor's first answer (a fresh node sets up the runtime env first)
FIRST_WAIT_S = 60.0  # the first job waits this long for every actor, so work spreads from the start
CPU_WORKERS = 2  # actors on the cpu backend unless told
MAX_REQUEUES = 3  # a job that outlives this many actors is given up (as crashed)
# What of `engine` a node gets: the settings and the evaluator, this module with it (the actor's
# class is sent by reference, so the node imports it). engine.evaluate needs nothing else of the engine.
NODE_PARTS = ("settings.py", "evaluate")


class RayExecutorError(PlacementError):
    """The Ray executor cannot be used as asked (no ray, no cluster, no room): one line."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayExecutorError(RAY_MISSING) from None
    return ray


def key_names(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """Variables that may hold an LLM key or another secret (Ray's own settings excepted)."""
    return sorted(k for k in env if is_secret(k) and not k.startswith("RAY_"))


def connect(address: str | None = None, **local: Any) -> bool:
    """Join the cluster at `address` ("auto": the one running on this machine), or start a local
    one (None; `local` goes to ray.init, e.g. num_cpus). True when this call connected (the
    caller shuts Ray down when done), False when this process was connected already. The key
    variables are out of the environment while ray.init runs: a local cluster's raylet and
    workers are started from it."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    hidden = {k: os.environ.pop(k) for k in key_names(os.environ)}
    kw = {"address": address} if address else {"include_dashboard": False, **local}
    # The node's code goes with the job (Ray allows a local directory only at this level).
    runtime_env = {"py_modules": [str(node_package())], "excludes": ["__pycache__", "*.pyc"]}
    try:
        ray.init(log_to_driver=False, logging_level="WARNING", runtime_env=runtime_env, **kw)
    except Exception as exc:  # ConnectionError, ValueError, RuntimeError...: said in one line
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise RayExecutorError(f"cannot start or reach {where}: {_first_line(exc)}") from None
    finally:
        os.environ.update(hidden)
    return True


@functools.cache
def node_package() -> Path:
    """`engine` as a cluster node gets it: its (import-free) __init__ and NODE_PARTS, copied
    to a temp dir kept until this process exits (Ray uploads it at ray.init). Shipping no more
    than that keeps a node free of the search, the LLM clients and the store, and proves on every
    Ray run that the evaluator needs none of them."""
    source = Path(engine.__file__).parent
    package = Path(tempfile.mkdtemp(prefix="ktree-ray-node-")) / "engine"
    atexit.register(shutil.rmtree, package.parent, True)
    package.mkdir()
    shutil.copy2(source / "__init__.py", package / "__init__.py")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in NODE_PARTS:
        if (source / name).is_dir():
            shutil.copytree(source / name, package / name, ignore=skip)
        else:
            shutil.copy2(source / name, package / name)
    return package


def cluster_backend(requested: str) -> str:
    """The backend by the one rule (backends.pick_backend) on the cluster's GPUs, whatever this
    machine has."""
    gpus = import_ray().cluster_resources().get("GPU", 0)
    return pick_backend(requested, bool(gpus), "the Ray cluster has no GPU")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _lost_errors() -> tuple[type[BaseException], ...]:
    """What a call raises when its actor, worker or node is gone: not the job's fault."""
    ex = import_ray().exceptions
    return (ex.RayActorError, ex.WorkerCrashedError, ex.NodeDiedError, ex.ObjectLostError,
            ex.LocalRayletDiedError, ex.ActorUnschedulableError)


# -- the actor (on a cluster node) ----------------------------------------------------------------


class EvalActor:
    """One device of the cluster: the local evaluator on this node, the problem files written from
    the jobs' text, and the phases of the jobs in flight (polled by the engine)."""

    def __init__(self, backend: str, compile_workers: int | None, isolation: str,
                 compile_timeout_s: float | None = None, profile: str = "off", profile_each: bool = True):
        self.backend = backend
        self.compile_workers = compile_workers
        self.isolation = isolation
        self.compile_timeout_s = compile_timeout_s
        self.profile = profile  # the node's profiler (ncu where it reads counters there)
        self.profile_each = profile_each  # False: only the variants profile() is asked for
        self.evaluator: Any = None
        self.info: dict[str, Any] = {}
        self.phases: dict[str, str] = {}
        self.dir = Path(tempfile.mkdtemp(prefix="ktree-ray-"))

    async def start(self) -> dict[str, Any]:
        """Make the evaluator; say where this actor runs (and which key variables it can see:
        none, when the cluster was started as it should be)."""
        import ray

        if self.evaluator is not None:
            return self.info

        from engine.evaluate.host.evaluator import EvaluatorConfig, LocalEvaluator, default_compile_workers

        ctx = ray.get_runtime_context()
        node_id = ctx.get_node_id()
        gpus = [str(g) for g in ray.get_gpu_ids()]
        workers, arch = self.compile_workers, None
        if self.backend == "cuda":
            import torch

            on_node = next((n["Resources"].get("GPU", 1) for n in ray.nodes() if n["NodeID"] == node_id), 1)
            workers = workers or max(1, default_compile_workers() // max(1, int(on_node)))
            major, minor = torch.cuda.get_device_capability(0)
            arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or f"{major}.{minor}"
        self.evaluator = LocalEvaluator(self.backend, EvaluatorConfig(
            compile_workers=workers or 1, cuda_arch=arch, isolation=self.isolation,
            compile_timeout_s=self.compile_timeout_s, profile=self.profile,
            profile_each=self.profile_each))
        self.info = {"node_id": node_id, "host": socket.gethostname(), "pid": os.getpid(), "gpus": gpus,
                     "compile_workers": self.evaluator.compile_workers, "keys": key_names(os.environ),
                     "engine_dir": str(Path(engine.__file__).parent)}  # the package shipped here
        return self.info

    async def evaluate(self, key: str, job: dict[str, Any], problem_text: str) -> dict[str, Any]:
        return await self._run(key, job, problem_text, lambda local, on_phase: self.evaluator.evaluate(
            local, on_phase))

    async def profile(self, key: str, job: dict[str, Any], verdict: dict[str, Any],
                      problem_text: str) -> dict[str, Any]:
        """The verdict with the variant's profile, taken on this node (see Evaluator.profile)."""
        return await self._run(key, job, problem_text, lambda local, on_phase: self.evaluator.profile(
            local, Verdict.from_dict(verdict), on_phase))

    async def _run(self, key: str, job: dict[str, Any], problem_text: str,
                   call: Callable[[EvalJob, PhaseCallback], Awaitable[Verdict]]) -> dict[str, Any]:
        """`call` on the job made local to this node (its problem file here, this node's build
        cache), its phases kept under `key` while it runs."""
        path = self._problem_file(job["problem_path"], problem_text)
        local = EvalJob.from_dict(job).replace(problem_path=str(path), cache_dir=self.evaluator.cache_dir)

        async def on_phase(name: str) -> None:
            self.phases[key] = name

        try:
            return (await call(local, on_phase)).to_dict()
        finally:
            self.phases.pop(key, None)

    async def current_phases(self) -> dict[str, str]:
        return dict(self.phases)

    async def close(self) -> None:
        if self.evaluator is not None:
            await self.evaluator.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _problem_file(self, original: str, text: str) -> Path:
        """The problem as a file on this node, under its own name, one per distinct text."""
        path = self.dir / hashlib.sha256(text.encode()).hexdigest()[:16] / Path(original).name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        return path


# -- the engine side -----------------------------------------------------------------------------


@dataclass
class _Slot:
    """One actor as the engine sees it; a replacement takes over the slot of the actor it replaces."""

    index: int
    handle: Any = None
    state: str = "starting"  # starting | alive | dead
    name: str = ""
    node_id: str = ""
    host: str = ""
    pid: int | None = None
    error: str = ""
    info: dict[str, Any] = field(default_factory=dict)  # what the actor said when it started
    jobs: dict[str, str] = field(default_factory=dict)  # key -> phase ("" until one is reported)
    changed: dict[str, asyncio.Event] = field(default_factory=dict)
    done: int = 0
    busy_s: float = 0.0
    device_since: dict[str, float] = field(default_factory=dict)
    compile_workers: int = 0
    lost: int = 0  # actors lost in this slot
    poller: asyncio.Task[None] | None = None
    starter: asyncio.Task[None] | None = None


class RayEvaluator:
    """The search's evaluator, on a Ray cluster (see the module docstring). Ray must be connected
    (by connect(), which ships a node's code) before one is made; `shutdown`: close()
    disconnects."""

    executor = "ray"
    gpus: list[int] | None = None  # the cluster's GPUs are Ray's to place, not chosen by index

    def __init__(self, backend: str, workers: int | None = None, compile_workers: int | None = None,
                 isolation: str = "auto", compile_timeout_s: float | None = None,
                 shutdown: bool = False, profile: str = "off",
                 profile_each: bool = True):
        ray = import_ray()
        if not ray.is_initialized():
            raise RayExecutorError("not connected to a Ray cluster")
        self.backend = backend
        kind = "GPU" if backend == "cuda" else "CPU"
        have = int(ray.cluster_resources().get(kind, 0))
        count = workers or (have if backend == "cuda" else min(CPU_WORKERS, have))
        if count < 1 or count > have:
            raise RayExecutorError(f"{count} Ray evaluation workers asked for, the cluster has {have} {kind}s")
        resources = {"num_gpus": 1} if backend == "cuda" else {"num_cpus": 1}
        self._actor = ray.remote(EvalActor).options(max_restarts=0, max_concurrency=1000, **resources)
        self._args = (backend, compile_workers, isolation, compile_timeout_s, profile,
                      profile_each)  # EvalActor's
        self._shutdown = shutdown
        self._problems: dict[str, str] = {}
        self._labels: dict[str, str] = {}  # node id -> label in device names
        self._changed = asyncio.Event()  # a slot became alive or dead
        self.requeues = 0  # jobs sent again after losing their actor
        self._first: asyncio.Task[None] | None = None
        self._compile_workers = compile_workers or 1
        self.slots = [_Slot(i) for i in range(count)]
        for slot in self.slots:
            self._launch(slot)

    # -- what the search uses --------------------------------------------------------------------

    @property
    def compile_workers(self) -> int:
        """Build slots across the cluster (each actor's own pool), as started."""
        return sum(s.compile_workers or self._compile_workers for s in self.slots)

    @property
    def waiting(self) -> dict[str, int]:
        """Jobs sent but not yet compiling (waiting for a build slot), and built ones waiting for
        their device."""
        phases = [p for s in self.slots for p in s.jobs.values()]
        return {"compile": phases.count(""), "device": phases.count("waiting")}

    def device_states(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [{
            "name": s.name or f"ray/{'gpu' if self.backend == 'cuda' else 'cpu'}{s.index}",
            "busy": bool(s.device_since),
            "jobs": s.done,
            "busy_s": round(s.busy_s + sum(now - t for t in s.device_since.values()), 3),
            "queue": sum(1 for k in s.jobs if k not in s.device_since),
            "alive": s.state == "alive" or (s.state == "starting" and not s.lost),  # (a replacement
            # counts once it answers)
        } for s in self.slots]

    def job(self, problem_path: str | os.PathLike[str], source: str, sizes: dict[str, int], *,
            flops: float | None, bytes: float | None, **options: Any) -> EvalJob:
        """The job for one variant (see Evaluator.job); its build cache is the actor's, set there."""
        return make_job(problem_path, source, sizes, backend=self.backend, cache_dir="",
                        flops=flops, bytes=bytes, **options)

    async def evaluate(self, job: EvalJob, on_phase: PhaseCallback | None = None,
                       gate: Gate | None = None) -> Verdict:
        """The verdict of one job, from whichever actor lives long enough to give it. With a
        gate, the job is sent only while it is open (a paused search sends nothing new)."""
        if gate is not None:
            await gate.wait()
        text = self._problem_text(job.problem_path)
        await self._first_start()
        lost: list[str] = []
        while True:
            slot = await self._pick() if len(lost) <= MAX_REQUEUES else None
            if slot is None:
                reasons = "; ".join(dict.fromkeys(s.error for s in self.slots if s.error))
                return Verdict(status="crashed", backend=self.backend, sizes=dict(job.sizes),
                               log=(f"lost {len(lost)} Ray evaluation workers while evaluating this"
                                    if lost else "no Ray evaluation worker is alive")
                               + f" ({reasons or 'none started'})",
                               placement={"executor": "ray", "lost": lost})
            key, handle = uuid.uuid4().hex, slot.handle
            slot.jobs[key], slot.changed[key] = "", asyncio.Event()
            ref = handle.evaluate.remote(key, job.to_dict(), text)
            self._follow(slot)
            try:
                result = await self._await_with_phases(slot, key, ref, on_phase)
            except _lost_errors() as exc:
                lost.append(slot.name)
                self.requeues += len(lost) <= MAX_REQUEUES
                self._lose(slot, handle, exc)
                continue
            finally:
                self._leave(slot, key)
            slot.done += 1
            return self._placed(Verdict.from_dict(result), slot, lost)

    async def profile(self, job: EvalJob, verdict: Verdict,
                      on_phase: PhaseCallback | None = None) -> Verdict:
        """The verdict with the variant's profile (see Evaluator.profile), taken by the actor that
        measured it while it lives (its build is there, and its GPU is the one timed), else by
        the least busy one; a lost actor leaves the profile with an error, the verdict as it was."""
        if not verdict.ok or self._args[5] == "off":  # (profiling off: no round trip)
            return verdict
        text = self._problem_text(job.problem_path)
        await self._first_start()
        measured = (verdict.placement or {}).get("device")
        slot = next((s for s in self.slots if s.state == "alive" and s.name == measured), None)
        slot = slot or await self._pick()
        if slot is None:
            return _replace(verdict, profile={"error": "no Ray evaluation worker is alive to profile it"})
        key, handle = uuid.uuid4().hex, slot.handle
        slot.jobs[key], slot.changed[key] = "", asyncio.Event()
        ref = handle.profile.remote(key, job.to_dict(), verdict.to_dict(), text)
        self._follow(slot)
        try:
            result = await self._await_with_phases(slot, key, ref, on_phase)
        except _lost_errors() as exc:
            self._lose(slot, handle, exc)
            why = f"lost {slot.name} while profiling ({type(exc).__name__})"
            return _replace(verdict, profile={"error": why})
        finally:
            self._leave(slot, key)
        profiled = Verdict.from_dict(result)
        return _replace(verdict, profile=profiled.profile)

    async def ready(self) -> None:
        """Return once the first actors have started (or failed to): device_states() names them."""
        await self._first_start()

    async def close(self) -> None:
        ray = import_ray()
        if self._first is not None:
            self._first.cancel()
        for slot in self.slots:
            for task in (slot.starter, slot.poller):
                if task is not None:
                    task.cancel()
        handles = [s.handle for s in self.slots if s.handle is not None and s.state == "alive"]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*(h.close.remote() for h in handles),
                                                  return_exceptions=True), 30)
        for slot in self.slots:
            if slot.handle is not None:
                with contextlib.suppress(Exception):
                    ray.kill(slot.handle)
            slot.state = "dead"
        if self._shutdown:
            ray.shutdown()

    # -- actors ------------------------------------------------------------------------------------

    def _launch(self, slot: _Slot) -> None:
        """Ask Ray for the slot's actor (placed and started in the background)."""
        slot.handle = self._actor.remote(*self._args)
        slot.state, slot.starter = "starting", None

    def _watch_starts(self) -> None:
        """A task per starting actor, awaiting its first answer (made here: the constructor may
        run before the event loop does)."""
        for slot in self.slots:
            if slot.state == "starting" and slot.starter is None:
                slot.starter = asyncio.get_running_loop().create_task(self._start(slot))

    async def _start(self, slot: _Slot) -> None:
        """Wait for the actor's first answer: then it is alive and named after where it runs."""
        try:
            info = await asyncio.wait_for(slot.handle.start.remote(), START_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # could not be placed, or its evaluator could not start there
            slot.state, slot.error = "dead", f"{slot.name or 'an actor'}: {_first_line(exc)}"
            with contextlib.suppress(Exception):
                import_ray().kill(slot.handle)
        else:
            slot.info = info
            slot.node_id, slot.host, slot.pid = info["node_id"], info["host"], info["pid"]
            slot.name = self._name(slot, info)
            slot.compile_workers = info["compile_workers"]
            slot.state, slot.error = "alive", ""
        self._changed.set()

    def _name(self, slot: _Slot, info: dict[str, Any]) -> str:
        """'<host>/gpu<k>' (k: the GPU's index on its node) or '<host>/cpu<k>' (the k-th worker
        there); a host name two nodes share gives way to the node id's start."""
        label = self._labels.get(info["node_id"])
        if label is None:
            label = info["host"] if info["host"] not in self._labels.values() else info["node_id"][:8]
            self._labels[info["node_id"]] = label
        if info["gpus"]:
            return f"{label}/gpu{info['gpus'][0]}"
        taken = {s.name for s in self.slots if s is not slot and s.state != "dead"}
        return next(f"{label}/cpu{k}" for k in range(len(self.slots) + 1) if f"{label}/cpu{k}" not in taken)

    def _lose(self, slot: _Slot, handle: Any, exc: BaseException) -> None:
        """The slot's actor is gone (the first of its jobs to say so acts): replace it; its other
        jobs see the loss themselves and are sent elsewhere."""
        if slot.handle is not handle or slot.state == "dead":
            return
        slot.state, slot.error = "dead", f"{slot.name}: lost ({type(exc).__name__})"
        slot.lost += 1
        with contextlib.suppress(Exception):
            import_ray().kill(slot.handle)
        self._changed.set()
        try:
            self._launch(slot)  # placed wherever the cluster has room: maybe nowhere (dead again)
        except Exception as exc2:  # Ray itself is gone
            slot.state, slot.error = "dead", f"{slot.name}: not replaced ({_first_line(exc2)})"

    async def _first_start(self) -> None:
        """Wait (once, shared by every job) for the first actors to start, so the first jobs are
        spread over all of them rather than sent to whichever answered first."""
        if self._first is None:
            self._watch_starts()
            starters = [s.starter for s in self.slots if s.starter is not None]
            self._first = asyncio.get_running_loop().create_task(
                asyncio.wait(starters, timeout=FIRST_WAIT_S))  # type: ignore[arg-type]
        await asyncio.shield(self._first)

    async def _pick(self) -> _Slot | None:
        """The live actor with the fewest jobs in flight; waits while actors are still starting.
        None when none is alive or starting."""
        while True:
            self._watch_starts()
            alive = [s for s in self.slots if s.state == "alive"]
            if alive:
                return min(alive, key=lambda s: (len(s.jobs), s.index))
            if not any(s.state == "starting" for s in self.slots):
                return None
            self._changed.clear()
            await self._changed.wait()

    # -- phases ------------------------------------------------------------------------------------

    def _follow(self, slot: _Slot) -> None:
        if slot.poller is None or slot.poller.done():
            slot.poller = asyncio.get_running_loop().create_task(self._poll(slot, slot.handle))

    async def _poll(self, slot: _Slot, handle: Any) -> None:
        """While the actor has jobs: their phases, every PHASE_POLL_S (a phase shorter than
        that may go unseen: the verdict is what counts)."""
        while slot.jobs and slot.handle is handle:
            try:
                phases = await handle.current_phases.remote()
            except Exception:  # the actor is gone: its jobs' own calls say so
                return
            now = time.monotonic()
            for key, phase in phases.items():
                if key in slot.jobs and slot.jobs[key] != phase:
                    slot.jobs[key] = phase
                    self._device_time(slot, key, phase in DEVICE_PHASES, now)
                    slot.changed[key].set()
            await asyncio.sleep(PHASE_POLL_S)

    async def _await_with_phases(self, slot: _Slot, key: str, ref: Any,
                                 on_phase: PhaseCallback | None) -> dict[str, Any]:
        """The actor's answer; meanwhile each phase it reports goes to on_phase (in this task, so
        an error there is this evaluation's error, as with the local evaluator)."""
        result = asyncio.ensure_future(ref)
        changed = slot.changed[key]
        seen = ""
        try:
            while True:
                waiter = asyncio.ensure_future(changed.wait())
                done, _ = await asyncio.wait({result, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if result in done:
                    return result.result()
                changed.clear()
                phase = slot.jobs.get(key, "")
                if phase and phase != seen and on_phase is not None:
                    seen = phase
                    await on_phase(phase)
        except BaseException:  # cancelled, or on_phase failed: the actor need not go on
            if not result.done():
                result.cancel()
                with contextlib.suppress(Exception):
                    import_ray().cancel(ref)
            raise

    def _device_time(self, slot: _Slot, key: str, on_device: bool, now: float) -> None:
        started = slot.device_since.pop(key, None)
        if started is not None:
            slot.busy_s += now - started
        if on_device:
            slot.device_since[key] = now

    def _leave(self, slot: _Slot, key: str) -> None:
        self._device_time(slot, key, False, time.monotonic())
        slot.jobs.pop(key, None)
        slot.changed.pop(key, None)

    # -- helpers -------------------------------------------------------------------------------

    def _placed(self, verdict: Verdict, slot: _Slot, lost: list[str]) -> Verdict:
        """The verdict with where it was measured, and the actors lost before it was."""
        placement = {"executor": "ray", "device": slot.name, "node_id": slot.node_id,
                     "host": slot.host, "pid": slot.pid, "requeued": len(lost), "lost": lost}
        log = verdict.log
        if lost:
            log = f"re-run on {slot.name} after losing {', '.join(lost)} mid-evaluation\n{log}"
        return _replace(verdict, placement=placement, log=log)

    def _problem_text(self, path: str) -> str:
        if path not in self._problems:
            self._problems[path] = Path(path).read_text()
        return self._problems[path]


def _replace(verdict: Verdict, **changes: Any) -> Verdict:
    import dataclasses

    return dataclasses.replace(verdict, **changes)

