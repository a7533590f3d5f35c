"""What several evaluation tests share: the scripted library's intended verdicts and its default
subset, the small sizes, one evaluator for a batch of sources, and the cheating solutions per
integrity check."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path
from typing import Any

from engine import settings
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.verdict import Verdict
from engine.llm.scripted import load_ideas
from engine.problems import load_problem
from tests.conftest import gpu_arch

INTENDED = {"correct": "correct", "incorrect": "incorrect", "compile error": "compile_error",
            "runtime error": "runtime_error"}


# The scripted library is checked for its verdicts, not for its speed: a short timing per variant
# (the slow kernels of the library take ~100 ms a call at full size; MIN_REPS still applies).
LIBRARY_TIMING = {"time_budget_s": 0.5}


def intended_status(source: str) -> str:
    m = re.search(r"Intended outcome:\s*(correct|incorrect|compile error|runtime error)", source, re.IGNORECASE)
    assert m, "every scripted variant declares its intended outcome"
    return INTENDED[m.group(1).lower()]


# Sizes for the checks that need no large ones (integrity, crashes, contention, builds): softmax at
# its CPU preset, 128 x 4096 (2 MiB) instead of 4096 x 65536 (1 GiB): every fresh GPU worker
# makes its inputs and fp64 expected outputs again, seconds at full size.
SMALL = {"softmax": load_problem("softmax").sizes_for("cpu")}


Sizes = dict[str, int]


COMPILE_BASELINE = settings.get("KTREE_COMPILE_BASELINE", "1") != "0"  # as the evaluator reads it


def evaluate_all(problem_name: str, sources: list[str], sizes: Sizes | list[Sizes] | None = None,
                 **options: Any) -> list[Verdict]:
    """Every source on one evaluator (one compile pool, one worker per GPU), at `sizes` (one for
    all or one per source; default: the problem's cuda sizes); `options`: EvalJob fields for every
    job (trials, time_budget_s, ...)."""
    problem = load_problem(problem_name)
    per_source = sizes if isinstance(sizes, list) else [sizes or problem.sizes_for("cuda")] * len(sources)

    async def go() -> list[Verdict]:
        # The torch.compile baseline only where a test reads it (the honest softmax and layernorm
        # kernels), and never under KTREE_COMPILE_BASELINE=0 (those tests skip): it costs minutes
        # cold on some problems (conv2d: 213 s on a fresh H100 box).
        baseline = COMPILE_BASELINE and problem_name in ("softmax", "layernorm")
        evaluator = LocalEvaluator("cuda", cuda_arch=gpu_arch(), compile_baseline=baseline)
        jobs = []
        for s, at in zip(sources, per_source, strict=True):
            cost = problem.cost_at(at)  # as the search passes it: the speed-of-light floor
            jobs.append(evaluator.job(problem.path, s, at, flops=cost.flops, bytes=cost.bytes, **options))
        try:
            return list(await asyncio.gather(*(evaluator.evaluate(j) for j in jobs)))
        finally:
            await evaluator.close()

    return asyncio.run(go())


def library_subset(problem: str, language: str = "cuda", status_of: Any = None) -> list[Path]:
    """The default set's share of a scripted library: the last idea's variant set (the fast
    kernels), then the first file (fixes last) of each intended outcome not in it yet. The whole
    library is the slow stage's (and its CUDA kernels' arithmetic is checked without a GPU by
    tests/evaluate/test_scripted_cuda_emulated.py)."""
    status_of = status_of or intended_status
    ideas = load_ideas(problem, language)
    every = [f for idea in ideas for f in idea.variants]
    every += sorted(every[0].parent.glob("fixes/*.py"))
    chosen = list(ideas[-1].variants)
    seen = {status_of(f.read_text()) for f in chosen}
    for f in every:
        status = status_of(f.read_text())
        if status not in seen:
            chosen.append(f)
            seen.add(status)
    return chosen


HEADER = "import os, sys, time\nimport torch\nimport torch.nn as nn\n"


def model(forward: str, init: str = "") -> str:
    return textwrap.dedent(f"""
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            {init or 'pass'}
        def forward(self, x):
            {forward}
    """)


# A cheating solution per integrity check, and the flag it must get
# (tests/evaluate/test_evaluate_gpu.py runs them on CUDA too).
CHEATS = [
        # A fallback to PyTorch behind a try/except around a kernel that never builds.
        (textwrap.dedent("""
        try:
            import ktree_no_such_extension as ext
        except ImportError:
            ext = None
        """) + model("return ext.softmax(x) if ext else torch.softmax(x, dim=1)"), "torch-ops"),
        # Computes in place into its input and returns it.
        (model("return x.copy_(torch.softmax(x, dim=1))"), "aliasing"),
        (model("return x.copy_(torch.softmax(x, dim=1))"), "inputs-modified"),
        # A tensor subclass could lie about its values to the checker.
        (textwrap.dedent("""
        class Sneaky(torch.Tensor):
            pass
        """) + model("return torch.softmax(x, dim=1).as_subclass(Sneaky)"), "output-type"),
        # Replaces the harness's allclose at import.
        ("torch.allclose = lambda *a, **k: True\n" + model("return torch.softmax(x, dim=1)"),
         "harness"),
        # Right while watched, then serves a cached answer: caught on the fresh timed inputs.
        ("""
        class ModelNew(nn.Module):
            calls = 0
            last = None
            def forward(self, x):
                ModelNew.calls += 1
                if ModelNew.calls <= 4:
                    ModelNew.last = torch.softmax(x, dim=1)
                return ModelNew.last
        """, "recheck"),
        # torch ops in a helper thread, out of the (thread-local) op recorder's sight.
        ("import threading\n" + model(
            "out = torch.empty_like(x); t = threading.Thread(target=lambda: out.copy_(torch.softmax(x, 1)));"
            " t.start(); t.join(); return out"), "host threads"),
]


# Each candidate's constructor says it has started, then waits (up to four minutes) until the other
# has started too: both can only finish if two devices evaluate them at the same time.
RENDEZVOUS = textwrap.dedent("""
    import os, time
    import torch
    import torch.nn as nn

    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            open({mine!r}, "w").close()
            deadline = time.monotonic() + 240
            while not os.path.exists({other!r}):
                if time.monotonic() > deadline:
                    raise RuntimeError("the other candidate never started: not evaluated at the same time")
                time.sleep(0.01)

        def forward(self, x):
            return x  # wrong on purpose: incorrect, quickly, and the worker is kept
""")
