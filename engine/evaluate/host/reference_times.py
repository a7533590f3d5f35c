"""The reference's own times, kept per problem and GPU model for every process on the host: the
part of LocalEvaluator (engine.evaluate.host.evaluator) that starts a reference timing process before
the device's lock (behind a gate, engine.evaluate.gate), lets it time while the device is held,
and keeps the result on disk; the cpu reference's clean time (engine.evaluate.host.clean_reference);
torch.compile's caches warmed in the compile pool.

Standard library at import; torch for the key's version only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
from pathlib import Path
from typing import Any

from engine.evaluate.gate import Gate as StartGate
from engine.evaluate.host import clean_reference, reference_history
from engine.evaluate.host.hostlock import DeviceLock, gpu_name
from engine.evaluate.host.runner import run_child
from engine.evaluate.host.sandbox import WRITABLE_IN_CACHE, Sandbox
from engine.evaluate.jobs import EvalJob


class ReferenceTimings:
    """Mixed into LocalEvaluator, whose fields and helpers these methods use."""

    backend: str
    cache_dir: str
    session: Any
    sandbox: Sandbox | None
    compile_timeout_s: float
    devices: list[Any]
    _reference_failed: dict[Path, dict]
    _warm_locks: dict[str, asyncio.Lock]
    _warmed: set[str]

    def job(self, problem_path: str | os.PathLike[str], source: str, sizes: dict[str, int], *,
            flops: float | None, bytes: float | None, **options: Any) -> EvalJob:
        raise NotImplementedError

    def _note(self, text: str) -> None:
        raise NotImplementedError

    def _slot(self, stage: str) -> contextlib.AbstractAsyncContextManager[None]:
        raise NotImplementedError

    def _device(self, gate: Any = None, prepare: Any = None) -> contextlib.AbstractAsyncContextManager[Any]:
        raise NotImplementedError

    async def time_reference(self, problem_path: str, sizes: dict[str, int]) -> dict:
        """Eager and torch.compile times of a problem's reference (on whichever device is free,
        no candidate), measured now (the cache is refreshed). Returns the child's result, or
        {"error": ...} when it died or timed out."""
        job = self._reference_job(problem_path, sizes, "reference")
        if self.backend == "cuda":  # compile in the pool (several at once), time alone
            async with self._slot("compile"):
                await run_child(job.replace(mode="warm"), self.compile_timeout_s, self.devices[0].env,
                                self.sandbox)
        pending: dict[str, dict] = {}

        async def prepare(device: Any) -> None:
            pending["p"] = await self.reference_start(problem_path, sizes, device, force=True)

        async with self._device(prepare=prepare):
            return await self.reference_finish(pending["p"])

    def _reference_job(self, problem_path: str, sizes: dict[str, int], mode: str,
                       precision: str | None = None) -> EvalJob:
        """A timing of the problem's reference alone (no candidate: no speed-of-light floor)."""
        return self.job(problem_path, "", sizes, flops=None, bytes=None, mode=mode, precision=precision)

    def device_model(self, device: Any) -> str:
        """What a reference timing's cache is keyed by besides the problem: the GPU's model (its
        name through NVML, never the CUDA_VISIBLE_DEVICES index), or on the cpu backend this
        host's cores."""
        if self.backend == "cuda":
            name = gpu_name(device.index, device.env.get("CUDA_VISIBLE_DEVICES", ""))
            where = device.env.get("CUDA_VISIBLE_DEVICES", "")
            return f"cuda:{name}" if name else f"cuda:{platform.node()}:{where}"
        return f"cpu:{platform.node()}:{platform.processor()}:{os.cpu_count()}"

    def _reference_file(self, problem_path: str, sizes: dict[str, int], device: Any,
                        precision: str | None = None) -> Path:
        """The reference timing's file: shared by every process and session on the host (and any
        host sharing the cache dir with the same GPU model), keyed by the problem's source, sizes,
        precision, GPU model and torch version (reference_key)."""
        key = self.reference_key(problem_path, sizes, device, precision)
        return Path(self.cache_dir) / "reference" / f"{key}.json"

    def reference_key(self, problem_path: str, sizes: dict[str, int], device: Any,
                      precision: str | None = None) -> str:
        import hashlib
        import json

        import torch

        source = hashlib.sha256(Path(problem_path).read_bytes()).hexdigest()
        return hashlib.sha256(json.dumps([
            "reference-v2", source, sorted(sizes.items()), self.backend, precision or "",
            self.device_model(device), torch.__version__,
        ]).encode()).hexdigest()[:24]

    async def reference(self, problem_path: str, sizes: dict[str, int], device: Any,
                        precision: str | None = None) -> dict:
        """The problem's eager and torch.compile times on `device`'s GPU model (the device held by
        the caller), measured once per problem source + sizes + precision + GPU model + torch
        version and kept on disk for every process ({"error": ...} when it could not be timed).
        Not yet measured: timed now, holding the device (see reference_start for the way that
        sets up before the lock)."""
        pending = await self.reference_start(problem_path, sizes, device, precision)
        return await self.reference_finish(pending)

    async def reference_start(self, problem_path: str, sizes: dict[str, int], device: Any,
                              precision: str | None = None, force: bool = False) -> dict:
        """Before the device's host lock: the cached timing (`{"result": ...}`), or a reference
        timing process started and set up (torch, the CUDA context, the model, torch.compile's
        compile and autotuning), waiting at its gate for reference_finish to let it time. Another
        process timing the same key first is waited for (a lock file per key), then read."""
        import json

        path = str(Path(problem_path).resolve())
        file = self._reference_file(path, sizes, device, precision)
        if not force:
            if file.exists():
                with contextlib.suppress(OSError, ValueError):
                    return {"result": json.loads(file.read_text())}
            if file in self._reference_failed:  # tried once in this run: not again on every variant
                return {"result": self._reference_failed[file]}
        file.parent.mkdir(parents=True, exist_ok=True)
        with device.staged("reference"):  # (the device's idle time goes to it: engine.bench.idle)
            return await self._reference_set_up(path, sizes, device, precision, file, force)

    async def _reference_set_up(self, path: str, sizes: dict[str, int], device: Any, precision: str | None,
                                file: Path, force: bool) -> dict:
        """reference_start's process, started and set up, once this process owns the key."""
        import json

        owner = DeviceLock(f"reference-{file.stem}", file.parent)
        await owner.acquire(self.session)  # one process times a key; the others read its file
        if not force and file.exists():
            owner.release()
            with contextlib.suppress(OSError, ValueError):
                return {"result": json.loads(file.read_text())}
        self._note(f"timing the reference on {device.name}, eager and under torch.compile"
                   " (once per problem and GPU model)")
        gate = StartGate(Path(self.cache_dir) / WRITABLE_IN_CACHE / "gates")
        job = self._reference_job(path, sizes, "reference", precision)
        task = asyncio.ensure_future(run_child(job, self.compile_timeout_s, {**device.env, **gate.env},
                                               self.sandbox))
        try:
            await gate.ready(task)
        except BaseException:
            task.cancel()
            gate.close()
            owner.release()
            raise
        return {"task": task, "gate": gate, "owner": owner, "file": file}

    def reference_cancel(self, pending: dict) -> None:
        """A started reference timing not needed after all: stopped, its key let go."""
        if "result" in pending:
            return
        pending["task"].cancel()
        pending["gate"].close()
        pending["owner"].release()

    async def reference_finish(self, pending: dict) -> dict:
        """Holding the device: let the reference timing process time, wait for it, keep its result
        on disk for every process."""
        import json

        if "result" in pending:
            return pending["result"]
        task, gate, owner, file = pending["task"], pending["gate"], pending["owner"], pending["file"]
        try:
            gate.open()
            outcome, result, log = await task
        finally:
            gate.close()
        try:
            if outcome != "ok" or result is None:
                failed = {"error": f"{outcome}: {log[-500:]}"}
                self._reference_failed[file] = failed
                return failed
            if "error" in result:
                self._reference_failed[file] = result
                return result
            tmp = file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(result))
            os.replace(tmp, file)
            return result
        finally:
            owner.release()

    def _clean_file(self, job: EvalJob, device: Any) -> Path:
        """Where the cpu reference's clean eager time is kept (engine.evaluate.host.clean_reference)."""
        kept = self._reference_file(job.problem_path, job.sizes, device, job.precision)
        return clean_reference.path_for(kept, device.env.get("KTREE_CPU_CORES", ""))

    def _history(self, job: EvalJob, device: Any) -> tuple[str, Path]:
        """The reference's measured times' key and file (engine.evaluate.host.reference_history)."""
        kept = self._reference_file(job.problem_path, job.sizes, device, job.precision)
        path = reference_history.path_for(kept, device.env.get("KTREE_CPU_CORES", ""))
        return str(path), path

    async def _warm(self, problem_path: str, sizes: dict[str, int], precision: str | None = None) -> None:
        """Fill torch.compile's on-disk caches for the problem once (in the compile pool, on the
        first chosen GPU), unless every device has its reference times already."""
        path = str(Path(problem_path).resolve())
        if all(self._reference_file(path, sizes, d, precision).exists() for d in self.devices):
            return
        key = repr((path, sorted(sizes.items()), precision))
        async with self._warm_locks.setdefault(key, asyncio.Lock()):
            if key in self._warmed:
                return
            self._note("compiling the reference under torch.compile (once per problem)")
            async with self._slot("compile"):
                await run_child(self._reference_job(path, sizes, "warm", precision), self.compile_timeout_s,
                                self.devices[0].env, self.sandbox)
            self._warmed.add(key)
