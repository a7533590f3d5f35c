"""Timings on a busy GPU and old solutions (marker `gpu`; skipped without CUDA): a foreign
process running kernels while a variant is timed is seen by the driver (NVML) and the verdict is
re-timed or marked `contended`; a solution hard-coding an arch the toolchain cannot build
(-arch=sm_70 with nvcc 13) is retargeted to the device's arch, builds and gets a verdict.
Prints `GPU-TIMING ...` lines (run with -s) for the issue's notes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from engine.evaluate.host.evaluator import LocalEvaluator, visible_gpus
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import gpu_arch
from tests.evaluate.helpers import SMALL

pytestmark = pytest.mark.gpu

SOFTMAX = load_problem("softmax")
SIZES = SMALL["softmax"]  # the retargeting needs no large inputs
WORK = {"flops": SOFTMAX.cost_at(SIZES).flops, "bytes": SOFTMAX.cost_at(SIZES).bytes}
# The contention check wants timings long enough for NVML to see the foreign process's kernels.
FULL = SOFTMAX.sizes_for("cuda")
FULL_WORK = {"flops": SOFTMAX.cost("cuda").flops, "bytes": SOFTMAX.cost("cuda").bytes}

HONEST = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
"""

# A correct (one block per row) softmax kernel whose build flags hard-code sm_70.
SM70 = r'''
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
__global__ void row_softmax(const float* x, float* y, int cols) {
    const float* in = x + (long)blockIdx.x * cols;
    float* out = y + (long)blockIdx.x * cols;
    __shared__ float red[256];
    float m = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, in[j]);
    red[threadIdx.x] = m; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0]; __syncthreads();
    float sum = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += __expf(in[j] - m);
    red[threadIdx.x] = sum; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    sum = red[0];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) out[j] = __expf(in[j] - m) / sum;
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    row_softmax<<<x.size(0), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    return y;
}
"""
ext = load_inline("ktree_sm70_softmax", cpp_sources="torch::Tensor run(torch::Tensor x);",
                  cuda_sources=CUDA, functions=["run"], extra_cuda_cflags=["-O3", "-arch=sm_70"])

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.run(x)
'''

# Runs matmuls on the GPU without end until killed; says "go" once kernels are running.
FOREIGN = """
import sys, torch
a = torch.randn(8192, 8192, device="cuda")
b = a @ a
torch.cuda.synchronize()
print("go", flush=True)
while True:
    b = a @ a
    torch.cuda.synchronize()
"""


def prebuild_sources(slow: bool = False) -> list[tuple[str, str]]:
    """(name, source) of every source with a CUDA build that this module's tests evaluate: what
    scripts/gpu-prebuild builds ahead (the sm_70 one through the same retargeting)."""
    return [("sm70 softmax", SM70)]


def evaluator() -> LocalEvaluator:
    return LocalEvaluator("cuda", cuda_arch=gpu_arch(), gpus=[next(iter(visible_gpus()))])


def evaluate(source: str, **options: object) -> Verdict:
    async def go() -> Verdict:
        ev = evaluator()
        try:
            return await ev.evaluate(ev.job(SOFTMAX.path, source, SIZES,
                                            **{**WORK, **options}))
        finally:
            await ev.close()

    return asyncio.run(go())


def start_foreign() -> subprocess.Popen[str]:
    """The foreign loop, started and running kernels (it said "go" a second ago)."""
    proc = subprocess.Popen([sys.executable, "-c", FOREIGN], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "go"
    time.sleep(1.0)
    return proc


def test_a_foreign_process_running_kernels_while_timed_is_retimed_or_contended():
    """Quiet, then with the foreign loop running, on one evaluator (the same GPU worker)."""
    async def go() -> tuple[Verdict, Verdict, int]:
        ev = evaluator()
        proc = None
        try:
            job = ev.job(SOFTMAX.path, HONEST, FULL, trials=1, time_budget_s=1.0, **FULL_WORK)
            quiet = await ev.evaluate(job)
            proc = await asyncio.to_thread(start_foreign)
            busy = await ev.evaluate(job.replace(seed=1))
            return quiet, busy, proc.pid
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()
            await ev.close()

    quiet, busy, pid = asyncio.run(go())
    print(f"GPU-TIMING quiet flags={[f for f in quiet.flags if ':' not in f]} timing={quiet.timing}")
    assert "contended" not in quiet.flags, quiet.timing
    print(f"GPU-TIMING foreign pid={pid} flags={[f for f in busy.flags if ':' not in f]}"
          f" ms={busy.time_ms:.4g} (quiet {quiet.time_ms:.4g}) timing={busy.timing}")
    print("GPU-TIMING foreign log:", busy.log[-1500:])
    assert busy.timing["passes"] > 1, busy.timing  # re-timed
    assert "ran kernels on this GPU" in busy.log
    assert "contended" in busy.flags  # the foreign loop ran through every pass


def test_a_solution_hard_coding_sm70_is_retargeted_and_gets_a_verdict():
    v = evaluate(SM70, trials=2)
    print(f"GPU-TIMING sm70 status={v.status} ms={v.time_ms} speedup={v.speedup_eager}"
          f" retarget={v.timing.get('arch_retarget')}")
    assert v.status == "correct", v.log[-3000:]
    record = v.timing["arch_retarget"]
    assert "-arch=sm_70" in record["original"] and "-arch=sm_70" not in record["flags"]
    assert "arch retargeted" in v.log
