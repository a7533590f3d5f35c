"""Run a CUDA source's kernels on the CPU, for tests on a machine without a GPU: the few CUDA
features the scripted library's kernels use are emulated in emu.h (one std::thread per CUDA
thread, blocks one after another, __syncthreads as a std::barrier, shared memory as statics,
warp shuffles through per-warp slots and barriers), `kernel<<<grid, block, smem, stream>>>(args)`
becomes a call of emu_launch, and the result is built with g++ -std=c++20 into a shared library to
call through ctypes. Slow, and only for small shapes; it checks a kernel's indexing and arithmetic,
not its speed or memory model."""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

HEADER = Path(__file__).with_name("emu.h")


def available() -> bool:
    return shutil.which("g++") is not None


def cuda_source_of(py_file: Path) -> str:
    text = py_file.read_text()
    return text.split('cuda_source = r"""', 1)[1].split('"""', 1)[0]


def _split_top(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [o.strip() for o in [*out, cur]]


def to_cpp(cuda: str) -> str:
    src = cuda.replace("#include <cuda_runtime.h>", f'#include "{HEADER}"')
    src = src.replace("extern __shared__ float ws[];", "float* ws = emu_dyn_smem;")
    src = src.replace("__shared__", "static").replace("INFINITY", "HUGE_VALF")

    def launch(m: re.Match[str]) -> str:
        grid, block, smem, _ = _split_top(m.group(2))
        return f"emu_launch(dim3({grid}), dim3({block}), {smem}, [&]() {{ {m.group(1)}({m.group(3)}); }});"

    # the kernel may be a template instance: name<args><<<...>>>(...)
    return re.sub(r"(\w+(?:<[^<>()]*>)?)<<<(.*?)>>>\((.*?)\);", launch, src, flags=re.S)


def build(cuda: str, out_dir: Path) -> ctypes.CDLL:
    cpp = to_cpp(cuda)
    key = hashlib.sha256((cpp + HEADER.read_text()).encode()).hexdigest()[:16]
    lib = out_dir / f"emu_{key}.so"
    if not lib.exists():
        src = out_dir / f"emu_{key}.cpp"
        src.write_text(cpp)
        cmd = ["g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-w", "-o", str(lib), str(src)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))
