"""GPU crash kinds (marker `gpu`; skipped without CUDA): an illegal memory access, a kernel that
never ends, running out of GPU memory. Each gets its status and a log that says what happened,
then an honest variant on the same evaluator (the same GPU worker, where there is one) must be
evaluated to the end; the seconds that takes are the time to recover, printed as
`GPU-RECOVER <kind> <status> <seconds>` (run with -s to see them) for the issue's table.
The kernels are built in the fast ctypes structure (listed by `prebuild_sources()` for
scripts/gpu-prebuild); the KernelBench-format twin of the illegal access is `gpu_slow`."""

from __future__ import annotations

import asyncio
import time

import pytest

from engine.evaluate.host import sandbox
from engine.evaluate.host.evaluator import LocalEvaluator, visible_gpus
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import gpu_arch
from tests.evaluate.helpers import SMALL

SOFTMAX = load_problem("softmax")
SIZES = SMALL["softmax"]  # a crash needs no large inputs
WORK = {"flops": SOFTMAX.cost_at(SIZES).flops, "bytes": SOFTMAX.cost_at(SIZES).bytes}
RUN_TIMEOUT_S = 30.0
RECOVER_LIMIT_S = 90.0  # a fresh worker (CUDA context, torch import) plus one honest evaluation

HONEST = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
"""


def kernel_variant(name: str, body: str, launch: str) -> str:
    """A solution whose forward launches one CUDA kernel (`body`) in the fast structure ktree's
    prompts ask for (CUDA headers only, an `extern "C"` launcher called through ctypes: ~10 s a
    build, against ~40 s for the KernelBench format). `launch` sees the raw pointers `x`, `out`,
    `flag` (one int, zero), the element count `n` and the current `stream`."""
    return f'''
import ctypes
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <cuda_runtime.h>
{body}
extern "C" int launch(const float* x, float* out, int* flag, long long n, cudaStream_t stream) {{
    {launch}
    return (int)cudaGetLastError();
}}
"""
_path = load_inline(name="ktree_gpu_{name}", cpp_sources="", cuda_sources=CUDA, is_python_module=False,
                    no_implicit_headers=True, extra_cuda_cflags=["-O3"]) or next(
    p for p in torch.ops.loaded_libraries if "ktree_gpu_{name}" in p)
_lib = ctypes.CDLL(_path)
_lib.launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong, ctypes.c_void_p]
_lib.launch.restype = ctypes.c_int

class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        err = _lib.launch(x.data_ptr(), out.data_ptr(), flag.data_ptr(), x.numel(),
                          torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"kernel launch failed: CUDA error {{err}}")
        return out
'''


def kernelbench_variant(name: str, body: str, launch: str) -> str:
    """The same in the KernelBench format: torch/extension.h in the CUDA source, bindings by
    load_inline (`launch` sees the tensors `x` and `out`)."""
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


POKE = "__global__ void poke(float* out) { out[(1LL << 40) + threadIdx.x] = 1.0f; }"
ILLEGAL_ADDRESS = kernel_variant(
    "illegal_address",
    # 4 TiB past the output: no allocation is there.
    POKE,
    "poke<<<1, 32, 0, stream>>>(out);",
)
# KernelBench-format twin (slow stage): the same crash through a pybind extension.
ILLEGAL_ADDRESS_KERNELBENCH = kernelbench_variant(
    "illegal_address_kb", POKE, "poke<<<1, 32>>>(out.data_ptr<float>());")
ENDLESS_KERNEL = kernel_variant(
    "endless",
    # Spins on a flag nothing ever sets (an atomic read, so the loop cannot be optimised away).
    "__global__ void spin(int* flag) { while (atomicAdd(flag, 0) == 0) { } }",
    "spin<<<1, 1, 0, stream>>>(flag);",
)
COPY_KERNEL = kernel_variant(
    "copy_softmax_input",
    "__global__ void copy(const float* x, float* out, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; if (i < n) out[i] = x[i]; }",
    "copy<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, out, n);",
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


def evaluate_then_honest(sources: list[str], isolation: str = "auto") -> list[tuple[Verdict, Verdict, float]]:
    """Each source, then the honest variant, one pair after another on one evaluator (one GPU):
    per source (its verdict, the honest one's, the seconds the honest one took)."""
    async def go() -> list[tuple[Verdict, Verdict, float]]:
        first = next(iter(visible_gpus()))  # one GPU: the honest variant runs where the crash was
        ev = LocalEvaluator("cuda", cuda_arch=gpu_arch(), eval_timeout=RUN_TIMEOUT_S, isolation=isolation,
                            gpus=[first])
        sizes, short = SIZES, {"trials": 1, "time_budget_s": 0.5, **WORK}
        out = []
        try:
            for source in sources:
                bad = await ev.evaluate(ev.job(SOFTMAX.path, source, sizes, **short))
                t0 = time.monotonic()
                good = await ev.evaluate(ev.job(SOFTMAX.path, HONEST, sizes, **short))
                out.append((bad, good, time.monotonic() - t0))
            return out
        finally:
            await ev.close()

    return asyncio.run(go())


def prebuild_sources(slow: bool = False) -> list[tuple[str, str]]:
    """(name, source) of every source with a CUDA build that this module's default tests (and,
    with `slow`, its gpu_slow ones) evaluate: what scripts/gpu-prebuild builds ahead."""
    out = [("crash illegal-address", ILLEGAL_ADDRESS), ("crash endless-kernel", ENDLESS_KERNEL),
           ("strict isolation copy", COPY_KERNEL)]
    return out + ([("crash illegal-address (KernelBench format)", ILLEGAL_ADDRESS_KERNELBENCH)] if slow else [])


@pytest.fixture(scope="module")
def crashes() -> dict[str, tuple[Verdict, Verdict, float]]:
    """Every crash kind on one evaluator, each followed by the honest variant (one evaluator start
    for all; a crash that left the GPU or the worker unusable fails the next honest evaluation)."""
    return dict(zip(CRASHES, evaluate_then_honest([source for source, _, _ in CRASHES.values()]), strict=True))


def check_crash(kind: str, bad: Verdict, good: Verdict, recover_s: float) -> None:
    _, statuses, needle = CRASHES[kind]
    print(f"GPU-RECOVER {kind} {bad.status} {recover_s:.1f}")
    assert bad.status in statuses, bad.log[-3000:]
    assert needle in bad.log.lower(), bad.log[-3000:]
    assert good.status == "flagged" and good.time_ms is not None, good.log[-3000:]  # ran to the end
    assert recover_s < RECOVER_LIMIT_S


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(CRASHES))
def test_gpu_crash_kinds_get_their_status_and_the_gpu_recovers(crashes: dict, kind: str):
    check_crash(kind, *crashes[kind])


@pytest.mark.gpu_slow
def test_an_illegal_address_in_a_kernelbench_format_extension_is_a_crash_and_the_gpu_recovers():
    check_crash("illegal-address", *evaluate_then_honest([ILLEGAL_ADDRESS_KERNELBENCH])[0])


@pytest.mark.gpu
@pytest.mark.skipif(sandbox.available()[0] != "strict", reason="bubblewrap cannot run here")
def test_strict_isolation_runs_cuda():
    """Under bubblewrap the GPU nodes and the CUDA toolkit are there: a kernel builds and runs."""
    [(bad, good, _)] = evaluate_then_honest([COPY_KERNEL], isolation="strict")
    assert bad.status == "incorrect", bad.log[-3000:]  # built, ran, and checked (a copy is no softmax)
    assert good.status == "flagged", good.log[-3000:]
