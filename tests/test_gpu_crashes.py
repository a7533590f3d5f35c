"""GPU crash kinds (marker `gpu`; skipped without CUDA): an illegal memory access, a kernel that
never ends, running out of GPU memory. Each gets its status and a log that says what happened,
then an honest variant on the same evaluator (the same GPU worker, where there is one) must be
evaluated to the end; the seconds that takes are the time to recover, printed as
`GPU-RECOVER <kind> <status> <seconds>` (run with -s to see them) for the issue's table."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from engine.evaluate import sandbox
from engine.evaluate.evaluator import LocalEvaluator, visible_gpus
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem

pytestmark = pytest.mark.gpu

SOFTMAX = load_problem("softmax")
WORK = {"flops": SOFTMAX.cost("cuda").flops, "bytes": SOFTMAX.cost("cuda").bytes}
RUN_TIMEOUT_S = 30.0
RECOVER_LIMIT_S = 90.0  # a fresh worker (CUDA context, torch import) plus one honest evaluation

HONEST = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
"""


def kernel_variant(name: str, body: str, launch: str) -> str:
    """A solution whose forward launches one CUDA kernel (`body`) through load_inline."""
    return f'''
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
{body}
torch::Tensor run(torch::Tensor x) {{
    auto out = torch::empty_like(x);
    {launch}
    return out;
}}
"""
ext = load_inline("ktree_gpu_{name}", cpp_sources="torch::Tensor run(torch::Tensor x);",
                  cuda_sources=CUDA, functions=["run"])

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.run(x)
'''


ILLEGAL_ADDRESS = kernel_variant(
    "illegal_address",
    # 4 TiB past the output: no allocation is there.
    "__global__ void poke(float* out) { out[(1LL << 40) + threadIdx.x] = 1.0f; }",
    "poke<<<1, 32>>>(out.data_ptr<float>());",
)
ENDLESS_KERNEL = kernel_variant(
    "endless",
    # Spins on a flag nothing ever sets (an atomic read, so the loop cannot be optimised away).
    "__global__ void spin(int* flag) { while (atomicAdd(flag, 0) == 0) { } }",
    "auto flag = torch::zeros({1}, x.options().dtype(torch::kInt32));\n"
    "    spin<<<1, 1>>>(flag.data_ptr<int>());",
)
GPU_OOM = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        hog = []
        while True:  # 1 GiB at a time until the GPU says no
            hog.append(torch.empty(1 << 30, dtype=torch.uint8, device=x.device))
"""

# kind: (source, statuses accepted, needle in the log (lower case))
HOST_SEGFAULT = """
import ctypes, torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ctypes.string_at(0)
"""
EXIT_AT_IMPORT = "import os\nos._exit(3)\n"

CRASHES = {
    "illegal-address": (ILLEGAL_ADDRESS, {"crashed", "runtime_error"}, "illegal memory access"),
    "host-segfault": (HOST_SEGFAULT, {"crashed"}, "sigsegv"),
    "exit-at-import": (EXIT_AT_IMPORT, {"crashed"}, "exit code 3"),
    "endless-kernel": (ENDLESS_KERNEL, {"timeout"}, f"killed after {RUN_TIMEOUT_S:g} s"),
    "gpu-oom": (GPU_OOM, {"runtime_error", "crashed"}, "out of memory"),
}


def evaluate_then_honest(source: str, isolation: str = "auto") -> tuple[Verdict, Verdict, float]:
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if not arch:
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        arch = f"{major}.{minor}"

    async def go() -> tuple[Verdict, Verdict, float]:
        first = next(iter(visible_gpus()))  # one GPU: the honest variant runs where the crash was
        ev = LocalEvaluator("cuda", cuda_arch=arch, run_timeout_s=RUN_TIMEOUT_S, isolation=isolation,
                       gpus=[first])
        sizes = SOFTMAX.sizes_for("cuda")
        try:
            bad = await ev.evaluate(ev.job(SOFTMAX.path, source, sizes, trials=1, time_budget_s=0.5, **WORK))
            t0 = time.monotonic()
            good = await ev.evaluate(ev.job(SOFTMAX.path, HONEST, sizes, trials=1, time_budget_s=0.5, **WORK))
            return bad, good, time.monotonic() - t0
        finally:
            await ev.close()

    return asyncio.run(go())


@pytest.mark.parametrize("kind", list(CRASHES))
def test_gpu_crash_kinds_get_their_status_and_the_gpu_recovers(kind: str):
    source, statuses, needle = CRASHES[kind]
    bad, good, recover_s = evaluate_then_honest(source)
    print(f"GPU-RECOVER {kind} {bad.status} {recover_s:.1f}")
    assert bad.status in statuses, bad.log[-3000:]
    assert needle in bad.log.lower(), bad.log[-3000:]
    assert good.status == "flagged" and good.time_ms is not None, good.log[-3000:]  # ran to the end
    assert recover_s < RECOVER_LIMIT_S


@pytest.mark.skipif(sandbox.available()[0] != "strict", reason="bubblewrap cannot run here")
def test_strict_isolation_runs_cuda():
    """Under bubblewrap the GPU nodes and the CUDA toolkit are there: a kernel builds and runs."""
    correct = kernel_variant(
        "copy_softmax_input",
        "__global__ void copy(const float* x, float* out, long n) {\n"
        "    long i = blockIdx.x * (long)blockDim.x + threadIdx.x; if (i < n) out[i] = x[i]; }",
        "copy<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());",
    )
    bad, good, _ = evaluate_then_honest(correct, isolation="strict")
    assert bad.status == "incorrect", bad.log[-3000:]  # built, ran, and checked (a copy is no softmax)
    assert good.status == "flagged", good.log[-3000:]
