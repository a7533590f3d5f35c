"""The scripted Triton library and Triton twins of the CUDA hacks, for the Triton tests on the cpu
backend and on a GPU."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from engine.llm.scripted import load_ideas

SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"
INTENDED = {"correct": "correct", "incorrect": "incorrect", "compile error": "compile_error"}


def intended_status(source: str) -> str:
    m = re.search(r"Intended outcome:\s*(correct|incorrect|compile error)", source, re.IGNORECASE)
    assert m, "every scripted variant declares its intended outcome"
    return INTENDED[m.group(1).lower()]


def library(problem: str) -> list[Path]:
    files = [f for idea in load_ideas(problem, "triton") for f in idea.variants]
    return files + sorted(files[0].parent.glob("fixes/*.py"))


TRITON_KERNEL = (SCRIPTED / "softmax/triton/online_2.py").read_text()


def triton_twin(forward: str, extra: str = "") -> str:
    """The library's honest Triton softmax with its ModelNew replaced by a cheating one."""
    head = TRITON_KERNEL.split("class ModelNew")[0]
    return head + textwrap.dedent(extra) + textwrap.dedent(forward)


def launch(x: str = "x", y: str = "y") -> str:
    return (f"softmax_online_fixed[({x}.shape[0],)]({x}, {y}, {x}.shape[1], {x}.stride(0), BLOCK=4096,"
            " num_warps=16)")


# Triton twins of the CUDA hacks: (source, the flag it must get). GPU-only ones (a side stream)
# are in tests/evaluate/test_triton_gpu.py.
TRITON_HACKS = [
    # The kernel is there, forward computes with torch.
    (triton_twin("""
    class ModelNew(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=1)
    """), "torch-ops"),
    # A launch that fails (a block size that is not a power of two) behind a try/except that
    # falls back to PyTorch.
    (triton_twin(f"""
    class ModelNew(nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            try:
                {launch().replace("BLOCK=4096", "BLOCK=3000")}
                return y
            except Exception:
                return torch.softmax(x, dim=1)
    """), "torch-ops"),
    # Subclasses (a copy of) the reference and inherits its forward.
    (triton_twin("""
    class ModelNew(Model):
        pass
    """, extra="""
    class Model(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=1)
    """), "torch-ops"),
    # Right while watched, then serves the result of an earlier call.
    (triton_twin(f"""
    class ModelNew(nn.Module):
        calls = 0
        last = None
        def forward(self, x):
            ModelNew.calls += 1
            if ModelNew.calls <= 5:
                y = torch.empty_like(x)
                {launch()}
                ModelNew.last = y
            return ModelNew.last
    """), "recheck"),
    # Patches the timer at import.
    ("import time\ntime.perf_counter = lambda: 0.0\n" + TRITON_KERNEL, "harness"),
]
