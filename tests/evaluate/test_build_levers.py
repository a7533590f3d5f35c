"""The "mini" build lever (engine/evaluate/harness/fastbuild.py): KernelBench-format CUDA sources get
ktree's own header instead of <torch/types.h>; a source that needs more falls through to the
slim header and then to the source as written, and the choice is remembered; the header covers the
host code such sources write (compiled with nvcc where it is installed: no GPU needed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.evaluate.harness import fastbuild

EXAMPLES = Path(__file__).resolve().parents[2] / "engine" / "templates" / "examples"
STOCK_SOFTMAX = (EXAMPLES / "softmax_stock.py").read_text()


def test_mini_call_swaps_the_cuda_headers_and_keeps_the_cpp_side():
    call = {"name": "x", "cpp_sources": "torch::Tensor f(torch::Tensor x);",
            "cuda_sources": "#include <torch/extension.h>\n#include <cuda_runtime.h>\n__global__ void k() {}",
            "extra_include_paths": ["/pch"]}
    mini = fastbuild.mini_call(call)
    assert mini is not None and mini["no_implicit_headers"] is True
    assert mini["cpp_sources"] == ["#include <torch/extension.h>", call["cpp_sources"]]
    assert mini["cuda_sources"][0] == "#include <ktree_torch_min.h>"
    assert "torch/extension.h" not in "".join(mini["cuda_sources"])
    assert "#include <cuda_runtime.h>" in mini["cuda_sources"][1]
    assert mini["extra_include_paths"] == ["/pch", fastbuild.MINI_INCLUDE_DIR]
    assert (Path(fastbuild.MINI_INCLUDE_DIR) / fastbuild.MINI_HEADER).is_file()
    # Not for C++-only builds, nor for a call that chose its own headers.
    assert fastbuild.mini_call({**call, "cuda_sources": None}) is None
    assert fastbuild.mini_call({**call, "no_implicit_headers": True}) is None


def test_a_source_the_mini_header_cannot_build_falls_through_and_the_choice_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The wrapped load_inline tries mini, then slim, then the source as written, each only where
    the lighter header may be the cause; the record beside the build says what was used."""
    import torch.utils.cpp_extension as ce

    tried: list[str] = []

    def fake_load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                         extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                         build_directory=None, verbose=False, with_cuda=None, is_python_module=True,
                         with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
                         no_implicit_headers=False):
        text = "\n".join(cuda_sources if isinstance(cuda_sources, list) else [cuda_sources or ""])
        kind = "mini" if "ktree_torch_min.h" in text else "slim" if "torch/types.h" in text else "full"
        tried.append(kind)
        if kind == "full":
            return "module"
        # torch::nn is in <torch/extension.h> only: the lighter headers fail on it.
        raise _build_error('cuda.cu(12): error: namespace "torch" has no member "nn"')

    monkeypatch.setattr(ce, "load_inline", fake_load_inline)
    monkeypatch.setattr(fastbuild, "extension_identifiers", lambda *a, **k: {"nn", "Tensor"})
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    # as in the compile pool (an earlier in-process evaluation may have left these on)
    monkeypatch.setitem(fastbuild.PREBUILT, "on", False)
    monkeypatch.setitem(fastbuild.PROBE, "on", False)
    fastbuild.install(str(tmp_path), levers=("slim", "mini"))  # wraps the fake (undone after the test)
    source = "#include <torch/extension.h>\ntorch::nn::Module m;\n__global__ void k() {}"
    assert ce.load_inline(name="x", cpp_sources="void f();", cuda_sources=source) == "module"
    assert tried == ["mini", "slim", "full"]
    record = (tmp_path / "ktree-levers-x.json").read_text()
    assert '"mini": false' in record and '"slim": false' in record
    tried.clear()  # the same call again: straight to what built
    assert ce.load_inline(name="x", cpp_sources="void f();", cuda_sources=source) == "module"
    assert tried == ["full"]


def test_a_build_ahead_of_the_precompiled_header_goes_without_it_and_keeps_that_choice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """In the compile pool with PCH_AHEAD on, a build that finds no header for its flags is not held
    while one is made: it builds without it, names its flags for the engine to make it beside the
    builds, and its record keeps it without; a later build of other flags finds the header made."""
    import torch.utils.cpp_extension as ce

    if fastbuild.torch_pch_command([], []) is None:
        pytest.skip("torch has no PCH command line on this platform")
    includes: list[list[str]] = []

    def fake_load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                         extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                         build_directory=None, verbose=False, with_cuda=None, is_python_module=True,
                         with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
                         no_implicit_headers=False):
        includes.append(list(extra_include_paths or []))
        return "module"

    def made(flags: list[str]) -> Path:  # a header as fastbuild.ensure_pch leaves it
        _, root, _ = fastbuild._pch_place(str(tmp_path), flags, [])
        (root / "torch").mkdir(parents=True)
        (root / "torch" / "extension.h.gch").write_bytes(b"gch")
        (root / "torch" / "extension.h").write_text("#pragma once\n")
        return root

    monkeypatch.setattr(ce, "load_inline", fake_load_inline)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setitem(fastbuild.PREBUILT, "on", False)
    monkeypatch.setitem(fastbuild.PROBE, "on", False)
    monkeypatch.setattr(fastbuild, "PCH_AHEAD", {"on": True, "wanted": []})
    fastbuild.install(str(tmp_path), levers=("pch",))
    assert ce.load_inline(name="a", cpp_sources="void f();", extra_cflags=["-O3"]) == "module"
    assert includes == [[]]  # built without a header, not after making one
    assert fastbuild.PCH_AHEAD["wanted"] == [{"extra_cflags": ["-O3"], "extra_include_paths": []}]
    assert '"pch": false' in (tmp_path / "ktree-levers-a.json").read_text()
    root = made(["-O3"])  # the engine made it beside the build (host.pch_ahead)
    assert fastbuild.pch_ready(str(tmp_path), ["-O3"], []) == (str(root), False)
    includes.clear()
    ce.load_inline(name="a", cpp_sources="void f();", extra_cflags=["-O3"])  # its record: still without
    ce.load_inline(name="b", cpp_sources="void g();", extra_cflags=["-O3"])  # a new build: with it
    assert includes == [[], [str(root)]] and len(fastbuild.PCH_AHEAD["wanted"]) == 1


@pytest.mark.slow
def test_the_first_build_on_a_cold_cache_does_not_wait_for_the_precompiled_header(tmp_path: Path):
    """End to end on the cpu (with the header ahead, as on a GPU): the first build goes without the
    header, the engine makes it beside, and the variant built without it is judged from that build."""
    import asyncio

    from engine.evaluate.host.evaluator import LocalEvaluator
    from engine.problems import load_problem

    if fastbuild.torch_pch_command([], []) is None:
        pytest.skip("torch has no PCH command line on this platform")
    softmax = load_problem("softmax")
    source = (Path(__file__).resolve().parents[2] / "engine" / "scripted_library" / "softmax" / "cpu"
              / "online_1.py").read_text()

    async def go() -> tuple[dict, list[Path], object]:
        evaluator = LocalEvaluator("cpu", cache_dir=tmp_path, pch_ahead=True)
        try:
            cost = softmax.cost("cpu")
            job = evaluator.job(softmax.path, source, softmax.sizes_for("cpu"), flops=cost.flops,
                                bytes=cost.bytes)
            outcome, result, log = await evaluator.build(job)
            assert outcome == "ok" and result is not None and result["status"] == "compiled", log
            await evaluator.pch_ahead.wait()
            made = list(tmp_path.glob("pch/*/torch/extension.h.gch"))
            return result, made, await evaluator.evaluate(job)
        finally:
            await evaluator.close()

    result, made, verdict = asyncio.run(go())
    assert result["pch_wanted"] and made  # went without it; made beside it
    assert verdict.status == "correct", verdict.log


def _build_error(output: str) -> RuntimeError:
    """What torch raises when ninja fails: a RuntimeError caused by the compiler's exit."""
    cause = subprocess.CalledProcessError(1, ["ninja"], output=output)
    error = RuntimeError("Error building extension 'x'")
    error.__cause__ = cause
    return error


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_mini_header_builds_the_host_code_kernelbench_sources_write(tmp_path: Path):
    """nvcc compiles (no link, no GPU) a stock KernelBench softmax and the common host idioms
    (factories with options, dispatch macros, dtype names, checks) against the mini header."""
    import torch.utils.cpp_extension as ce

    stock_cuda = re.search(r'cuda_source = r"""(.*?)"""', STOCK_SOFTMAX, re.S).group(1)
    idioms = """
    #include <torch/extension.h>
    template <typename T> __global__ void copy_k(const T* x, T* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }
    torch::Tensor f(torch::Tensor x) {
        TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
        TORCH_CHECK(x.scalar_type() == torch::kFloat32 || x.dtype() == torch::kFloat16, "dtype");
        auto y = torch::empty_like(x);
        auto z = torch::zeros({x.size(0), 4}, x.options());
        auto o = torch::empty({x.numel()}, torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
        auto c = x.contiguous().view({-1});
        int n = c.numel();
        AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "f", [&] {
            copy_k<scalar_t><<<(n + 255) / 256, 256>>>(c.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
        });
        return y;
    }
    """
    call = {"name": "x", "cpp_sources": "", "cuda_sources": [stock_cuda, idioms]}
    mini = fastbuild.mini_call(call)
    assert mini is not None
    import torch

    includes = [f"-I{p}" for p in [*ce.include_paths(), *mini["extra_include_paths"]]]
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    for i, text in enumerate(mini["cuda_sources"][1:]):
        cu = tmp_path / f"s{i}.cu"
        cu.write_text(mini["cuda_sources"][0] + "\n" + text)
        proc = subprocess.run(["nvcc", "-std=c++17", "--expt-relaxed-constexpr", abi,
                               "-gencode=arch=compute_90,code=sm_90", *includes, "-c", str(cu),
                               "-o", str(tmp_path / f"s{i}.o")], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
