"""A kernel may build anywhere (issue 44 item 2): `load_inline` / `load` called in `__init__`, in a
helper, in `forward`, with or without its own `name` or `build_directory`, builds once, outside
the timed window, under the default (strict) isolation, where every build dir is read-only while a
variant is evaluated: into ktree's build cache by the compile pool's probe
(engine.evaluate.languages.build_probe), or where the probe cannot reach the call, into the
evaluation's own scratch dir (engine.evaluate.harness.fastbuild._placed). A compiler error there is
`compile_error` with the compiler's first error line on top of the log.

The cpu cases share one evaluator and one build per source (the module's `verdicts`), most in the
fast ctypes structure (no torch headers: a build takes seconds); the `gpu` case is the CUDA twin
of the __init__ build."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from engine.evaluate.harness import fastbuild
from engine.evaluate.host import sandbox
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.languages.build_probe import builds_in_functions
from engine.evaluate.verdict import Verdict
from tests.conftest import gpu_arch

# The slow tier: its C++ builds are its own (no quick test shares them).
pytestmark = pytest.mark.slow

STRICT, WHY_NOT = sandbox.available()
WORK = {"flops": None, "bytes": None, "trials": 1, "time_budget_s": 0.1, "max_reps": 5}
RUN = os.urandom(4).hex()  # every source new to the run's build cache

PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0

N = 256

def get_inputs():
    return [torch.randn(N, N)]

def get_init_inputs():
    return []
'''

KERNEL = r'''
extern "C" void axpb(const float* x, float* y, long long n) {
    for (long long i = 0; i < n; ++i) y[i] = x[i] * 2.0f + 1.0f;
}
'''
BROKEN = KERNEL.replace("1.0f;", "1.0f")  # expected ';' before '}'

CTYPES_MODEL = '''
import ctypes
import os
import tempfile
import torch
import torch.nn as nn
import torch.utils.cpp_extension as cpp_ext
from torch.utils.cpp_extension import load_inline

KERNEL = r"""{kernel}// {tag}
"""


def _bind(path):
    lib = ctypes.CDLL(path)
    lib.axpb.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    return lib


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = None
{init}

    def _compile_kernel(self):
        return _bind(cpp_ext.load_inline(name="{name}", cpp_sources=KERNEL, is_python_module=False,
                                         no_implicit_headers=True{extra}))

    def forward(self, x):
{forward}
        x = x.contiguous()
        y = torch.empty_like(x)
        self.lib.axpb(x.data_ptr(), y.data_ptr(), x.numel())
        return y
'''


def ctypes_source(name: str, *, init: str = "", forward: str = "", extra: str = "",
                  kernel: str = KERNEL) -> str:
    indent = "        "
    return CTYPES_MODEL.format(kernel=kernel, tag=RUN, name=f"{name}_{RUN}", extra=extra,
                               init=indent + init if init else indent + "pass",
                               forward=indent + forward if forward else indent + "pass")


# `load` with source files the candidate writes itself, from __init__.
LOAD_FILES = CTYPES_MODEL.replace("{init}", '''        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "axpb.cpp"), "w") as f:
            f.write(KERNEL)
        self.lib = _bind(cpp_ext.load(name="{name}", sources=[os.path.join(folder, "axpb.cpp")],
                                      is_python_module=False))''').format(
    kernel=KERNEL, tag=RUN, name=f"axpb_files_{RUN}", extra="", forward="        pass")

# Only a cpu tensor reaches the build (the probe's meta tensors do not): built in the evaluation.
UNREACHED = 'if x.device.type != "cpu":\n            raise ValueError("cpu tensors only")\n' \
            '        if self.lib is None:\n            self.lib = self._compile_kernel()'

# A failed build the candidate catches (its own fallback to torch): no compile_error, and the
# evaluation does not build it again (the compile pool's failure is kept beside its build dir).
CAUGHT = 'try:\n            self.lib = self._compile_kernel()\n' \
         '        except Exception:\n            self.lib = None'
FALLBACK = 'if self.lib is None:\n            return x * 2.0 + 1.0'

SOURCES = {
    "init_plain": ctypes_source("axpb_init", init="self.lib = self._compile_kernel()"),
    "init_own_dir": ctypes_source("axpb_own_dir", init="self.lib = self._compile_kernel()",
                                  extra=', build_directory="./build"'),
    "load_files": LOAD_FILES,
    "forward_helper": ctypes_source("axpb_fwd", forward="if self.lib is None:\n"
                                    "            self.lib = self._compile_kernel()",
                                    extra=', build_directory="/tmp/ext"'),
    "forward_unreached": ctypes_source("axpb_unreached", forward=UNREACHED),
    "init_compile_error": ctypes_source("axpb_broken", init="self.lib = self._compile_kernel()",
                                        kernel=BROKEN),
    "forward_compile_error": ctypes_source("axpb_broken_fwd", forward=UNREACHED, kernel=BROKEN),
    "init_caught_error": ctypes_source("axpb_caught", init=CAUGHT, forward=FALLBACK, kernel=BROKEN),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Verdict]:
    """Every source above evaluated once, on one cpu evaluator under the default isolation."""
    problem = tmp_path_factory.mktemp("build-anywhere") / "axpb.py"
    problem.write_text(PROBLEM)

    async def go() -> dict[str, Verdict]:
        ev = LocalEvaluator("cpu")
        try:
            jobs = [ev.evaluate(ev.job(str(problem), source, {}, **WORK)) for source in SOURCES.values()]
            return dict(zip(SOURCES, await asyncio.gather(*jobs), strict=True))
        finally:
            await ev.close()

    return asyncio.run(go())


def built_in_cache(name: str) -> list[Path]:
    cache = Path(os.environ["KTREE_CACHE_DIR"])
    return list(cache.glob(f"*/{name}_{RUN}/{name}_{RUN}.so"))


@pytest.mark.skipif(STRICT != "strict", reason=f"strict isolation unavailable: {WHY_NOT}")
def test_the_default_isolation_is_strict_here():
    assert sandbox.resolve("auto") == "strict"


@pytest.mark.parametrize("case", ["init_plain", "init_own_dir", "load_files", "forward_helper"])
def test_a_kernel_built_in_a_method_is_built_by_the_compile_pool_and_correct(
        verdicts: dict[str, Verdict], case: str):
    verdict = verdicts[case]
    assert verdict.status == "correct", verdict.log
    assert "Read-only file system" not in verdict.log
    name = {"init_plain": "axpb_init", "init_own_dir": "axpb_own_dir", "load_files": "axpb_files",
            "forward_helper": "axpb_fwd"}[case]
    assert built_in_cache(name), f"{name} was not built into ktree's build cache"


def test_a_build_the_probe_cannot_reach_is_built_in_the_evaluation_s_scratch(verdicts: dict[str, Verdict]):
    verdict = verdicts["forward_unreached"]
    assert verdict.status == "correct", verdict.log
    assert not built_in_cache("axpb_unreached")  # not in the cache: the evaluation may not write it


@pytest.mark.parametrize("case", ["init_compile_error", "forward_compile_error"])
def test_a_compiler_error_in_a_method_is_a_compile_error_with_the_compiler_s_line_on_top(
        verdicts: dict[str, Verdict], case: str):
    verdict = verdicts[case]
    assert verdict.status == "compile_error", verdict.log
    first = verdict.log.splitlines()[0]
    assert "main.cpp:" in first and "error: expected" in first, verdict.log[:2000]


def test_a_failed_build_the_candidate_catches_is_its_own_business(verdicts: dict[str, Verdict]):
    verdict = verdicts["init_caught_error"]
    assert verdict.status == "flagged", verdict.log  # its fallback: all of the reference's work in torch
    assert "Read-only file system" not in verdict.log


def test_which_sources_are_probed():
    assert builds_in_functions(SOURCES["init_own_dir"]) and builds_in_functions(SOURCES["forward_helper"])
    assert builds_in_functions("from torch.utils.cpp_extension import load\n"
                               "def f():\n    return load('x', ['a.cpp'])\n")
    assert builds_in_functions("import torch.utils.cpp_extension as ce\nf = lambda: ce.load('x', ['a.cpp'])\n")
    assert not builds_in_functions("import json\n"
                                   "def f(p):\n    return json.load(p), torch.load(p), tl.load(p)\n")
    assert not builds_in_functions("from torch.utils.cpp_extension import load_inline\n"
                                   "ext = load_inline(name='x', cpp_sources='')\n")
    assert not builds_in_functions("class ModelNew(:\n")


def test_the_first_error_line_of_a_build_log():
    gcc = "[1/2] c++ -c main.cpp\nFAILED: main.o\n/b/x/main.cpp:3:64: error: expected ';' before '}'\n"
    assert fastbuild.first_error(gcc) == "/b/x/main.cpp:3:64: error: expected ';' before '}'"
    nvcc = "noise\n/b/x/cuda.cu(41): error: identifier \"warp_id\" is undefined\nmore: error: later\n"
    assert fastbuild.first_error(nvcc) == '/b/x/cuda.cu(41): error: identifier "warp_id" is undefined'
    assert fastbuild.first_error("main.o: undefined reference to `f'\n") == "main.o: undefined reference to `f'"
    assert fastbuild.first_error("ninja: build stopped: subcommand failed.") is None


def test_the_probe_keeps_what_a_candidate_puts_on_the_gpu_on_the_meta_device():
    """The compile pool hides the GPUs: the probe's `.cuda()`, `.to("cuda")`, `device="cuda"` stay
    on the meta device, so a build after such a line in __init__ is reached."""
    import torch

    from engine.evaluate.languages.build_probe import _cuda_on_meta

    with torch.device("meta"), _cuda_on_meta():
        made = [torch.randn(3, device="cuda"), torch.ones(2).cuda(), torch.zeros(2).to("cuda:0", torch.float16),
                torch.nn.Linear(4, 4).cuda().to("cuda").weight, torch.zeros(2).to(torch.float64)]
    assert [t.device.type for t in made] == ["meta"] * 5
    assert (made[2].dtype, made[4].dtype) == (torch.float16, torch.float64)


CUDA_INIT = f'''
import ctypes
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <cuda_runtime.h>
__global__ void axpb(const float* x, float* y, long long n) {{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f + 1.0f;
}}
extern "C" int launch(const float* x, float* y, long long n, cudaStream_t stream) {{
    axpb<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
    return (int)cudaGetLastError();
}}
// {RUN}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("one", torch.ones(1).cuda())  # on the GPU before the build (the probe's meta)
        path = load_inline(name="axpb_cuda_init", cpp_sources="", cuda_sources=CUDA, is_python_module=False,
                           no_implicit_headers=True, extra_cuda_cflags=["-O3"], {{build_directory}})
        self.lib = ctypes.CDLL(path)
        self.lib.launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p]
        self.lib.launch.restype = ctypes.c_int

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        err = self.lib.launch(x.data_ptr(), y.data_ptr(), x.numel(), torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"kernel launch failed: CUDA error {{err}}")
        return y
'''


@pytest.mark.gpu
def test_a_cuda_kernel_built_in_init_is_correct_on_the_gpu(tmp_path: Path):
    """The CUDA twin of the __init__ builds, with and without its own build_directory, and its
    compiler error, on the GPU worker (each build ~10 s: CUDA headers only)."""
    problem = tmp_path / "axpb.py"
    problem.write_text(PROBLEM)
    sources = {"plain": CUDA_INIT.replace(", {build_directory}", ""),
               "own_dir": CUDA_INIT.replace("{build_directory}", 'build_directory="./build"'),
               "broken": CUDA_INIT.replace(", {build_directory}", "").replace("1.0f;", "1.0f")}
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", gpu_arch())

    async def go() -> dict[str, Verdict]:
        ev = LocalEvaluator("cuda")
        try:
            jobs = [ev.evaluate(ev.job(str(problem), source, {}, **WORK)) for source in sources.values()]
            return dict(zip(sources, await asyncio.gather(*jobs), strict=True))
        finally:
            await ev.close()

    found = asyncio.run(go())
    assert found["plain"].status == "correct", found["plain"].log
    assert found["own_dir"].status == "correct", found["own_dir"].log
    assert found["broken"].status == "compile_error", found["broken"].log
    first = found["broken"].log.splitlines()[0]
    assert "cuda.cu(" in first and "error:" in first, found["broken"].log[:2000]
