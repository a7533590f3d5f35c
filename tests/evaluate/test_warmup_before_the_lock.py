"""Before the GPU's lock: Triton's JIT (engine.evaluate.languages.triton.triton_prewarm, the
worker's warm request) and a worker's start for the problem files it will see. The worker answers
a warm request and stays for the evaluation; the compile-only patches turn every @triton.jit
launch into Triton's own warm-up and make an autotuner compile each of its configs instead of
timing them, and are undone after."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.evaluate.host.sandbox import Sandbox
from engine.evaluate.host.worker import Worker
from engine.evaluate.languages.triton import _compile_only, triton_prewarm

REPO = Path(__file__).resolve().parents[2]
SOFTMAX = REPO / "problems/level1/softmax.py"


def test_a_warm_request_is_answered_and_the_worker_stays(tmp_path):
    from engine.evaluate.host.make_job import make_job

    source = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
    job = make_job(SOFTMAX, source, {"batch_size": 8, "dim": 16}, backend="cpu",
                   cache_dir=str(tmp_path), flops=None, bytes=None, input_seed=5)

    async def go() -> tuple[dict, bool, int]:
        worker = Worker({"CUDA_VISIBLE_DEVICES": ""}, Sandbox("basic", "cpu"), str(tmp_path))
        try:
            assert await worker.ready(job.problem_path) is None
            pid = worker.proc.pid
            report = await worker.warm(job, 60)
            return report, worker.proc is not None and worker.proc.pid == pid, worker.starts
        finally:
            await worker.close()

    report, same, starts = asyncio.run(go())
    assert report == {} and same and starts == 1  # nothing to compile on cpu; the same process


def test_prewarm_is_for_triton_on_cuda_only(tmp_path):
    from engine.evaluate.host.make_job import make_job

    cuda_source = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
    for backend, source in (("cuda", cuda_source), ("cpu", "import triton\n" + cuda_source)):
        job = make_job(SOFTMAX, source, {}, backend=backend, cache_dir=str(tmp_path), flops=None, bytes=None)
        assert triton_prewarm(job) == {}


def test_the_compile_only_patches_compile_every_config_and_are_undone(monkeypatch):
    pytest.importorskip("triton")
    from triton.runtime import autotuner, jit

    calls: list[dict] = []

    def recorded_run(self, *args, **kwargs):
        calls.append(kwargs)
        return "kernel"

    monkeypatch.setattr(jit.JITFunction, "run", recorded_run)
    before_tune = autotuner.Autotuner.run

    class Config:
        def __init__(self, block):
            self.block = block

        def all_kwargs(self):
            return {"BLOCK": self.block, "num_warps": 4}

    fn = jit.JITFunction.__new__(jit.JITFunction)
    tuner = autotuner.Autotuner.__new__(autotuner.Autotuner)
    tuner.fn, tuner.arg_names, tuner.configs = fn, ["x"], [Config(64), Config(128)]
    tuner.prune_configs = lambda kwargs: tuner.configs
    with _compile_only():
        assert jit.JITFunction.run(fn, 1, grid=(1,), warmup=False) == "kernel"
        autotuner.Autotuner.run(tuner, 1, grid=(1,), warmup=False)
    assert [c["warmup"] for c in calls] == [True, True, True]  # compiled, never launched
    assert [c.get("BLOCK") for c in calls[1:]] == [64, 128]  # each config
    assert jit.JITFunction.run is recorded_run and autotuner.Autotuner.run is before_tune


def test_a_worker_for_a_new_problem_file_keeps_seeing_the_earlier_ones(tmp_path):
    """A suite's problems alternate on a device (issue 38): the process started for a second problem
    file also sees the first, so going back to the first restarts nothing; concurrent calls (an
    early start and a job's) start one process."""
    softmax, layernorm = str(SOFTMAX), str(REPO / "problems/level1/layernorm.py")

    async def go() -> tuple[tuple[str, ...], int, list[str]]:
        worker = Worker({"CUDA_VISIBLE_DEVICES": ""}, Sandbox("basic", "cpu"), str(tmp_path))
        try:
            assert await asyncio.gather(worker.ready(softmax), worker.ready(softmax)) == [None, None]
            assert worker.starts == 1
            assert await worker.ready(layernorm) is None  # a new file: one restart, seeing both
            assert await worker.ready(softmax) is None  # back to the first: no restart
            return worker._problems, worker.starts, worker.restarts
        finally:
            await worker.close()

    problems, starts, restarts = asyncio.run(go())
    assert problems == (softmax, layernorm) and starts == 2 and restarts == ["a new problem file"]
