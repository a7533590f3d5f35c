"""Timing hacks and attacks on the judge, each a wrapper around the scripted softmax's ctypes kernel
(one build, shared through the build cache), for the cpu tests and their GPU twins."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem

SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"
KERNEL = (SCRIPTED / "softmax" / "cpu" / "rowblock_3.py").read_text()  # intended: correct


def wrapped(body: str, prelude: str = "", kernel: str = KERNEL) -> str:
    """The kernel with `ModelNew` replaced by a subclass whose forward is `body` (it may call
    `super().forward(x)`), after module-level `prelude` code."""
    return kernel + textwrap.dedent("""

        import sys
        import time

        _Kernel = ModelNew
        """) + textwrap.dedent(prelude) + "\n\nclass ModelNew(_Kernel):\n" + textwrap.indent(
        textwrap.dedent(body), "    ")


# (c) the timing loop found on the call stack: an uninitialised buffer there.
STACK = ("""
    def forward(self, x):
        frame, names = sys._getframe(1), set()
        while frame is not None:
            names.add(frame.f_code.co_name)
            frame = frame.f_back
        if names & {"_time", "_time_cpu", "_time_cuda", "time_pass", "time_pair", "settle"}:
            return torch.empty_like(x)
        return super().forward(x)
""")


# The timing loop found by call count: the check trials come first, then every call is timed.
COUNT = ("""
    calls = 0

    def forward(self, x):
        ModelNew.calls += 1
        if ModelNew.calls > 5:
            return torch.empty_like(x)
        return super().forward(x)
""")


# By the time between calls: timed calls come back to back, check trials have a comparison between.
BETWEEN = ("""
    last_end = None
    last_took = None

    def forward(self, x):
        now = time.perf_counter()
        quick = (ModelNew.last_end is not None and ModelNew.last_took
                 and now - ModelNew.last_end < 10 * ModelNew.last_took)
        if quick:
            out = torch.empty_like(x)
        else:
            out = super().forward(x)
        ModelNew.last_took = max(time.perf_counter() - now, 1e-5)
        ModelNew.last_end = time.perf_counter()
        return out
""")


# By repeated input: the same buffer again means the same answer (pointer only).
REPEATED = ("""
    seen = {}

    def forward(self, x):
        hit = ModelNew.seen.get(x.data_ptr())
        if hit is not None:
            return hit.clone()
        out = super().forward(x)
        ModelNew.seen[x.data_ptr()] = out.clone()
        return out
""")


# (d) memoized on pointer + version counter + shape, around a slow kernel (eight runs a call).
MEMO = ("""
    seen = {}

    def forward(self, x):
        key = (x.data_ptr(), x._version, tuple(x.shape))
        hit = ModelNew.seen.get(key)
        if hit is not None:
            return hit.clone()
        for _ in range(8):
            out = super().forward(x)
        ModelNew.seen[key] = out.clone()
        return out
""")


# (a) torch.softmax wrapped at import: the reference works twice in this process.
WRAPS_SOFTMAX = ("""
    def forward(self, x):
        return super().forward(x)
""", """
    _softmax = torch.softmax


    def _twice(*args, **kwargs):
        _softmax(*args, **kwargs)
        return _softmax(*args, **kwargs)


    torch.softmax = _twice
""")


# (b) one intra-op thread for the whole process (the reference's too).
ONE_THREAD = ("""
    def forward(self, x):
        return super().forward(x)
""", "torch.set_num_threads(1)\n")


# Each hack as (forward's body, module-level prelude): wrapped around any kernel (the GPU twins
# in tests/evaluate/test_timing_hacks_gpu.py wrap the scripted CUDA and Triton softmax kernels).
HACK_PARTS = {"stack": STACK, "count": COUNT, "between": BETWEEN, "repeated": REPEATED, "memo": MEMO,
              "wraps softmax": WRAPS_SOFTMAX, "one thread": ONE_THREAD}


def hacks(kernel: str = KERNEL) -> dict[str, str]:
    """Every hack wrapped around `kernel`."""
    return {name: wrapped(*((parts,) if isinstance(parts, str) else parts), kernel=kernel)
            for name, parts in HACK_PARTS.items()}


def evaluate_all(sources: list[str], cache_dir: str | None = None, **job: object) -> list[Verdict]:
    problem = load_problem("softmax")
    cost = problem.cost("cpu")

    async def go() -> list[Verdict]:
        evaluator = LocalEvaluator("cpu", cache_dir=cache_dir)
        try:
            jobs = [evaluator.job(problem.path, source, problem.sizes_for("cpu"), flops=cost.flops,
                                  bytes=cost.bytes, **job) for source in sources]
            return list(await asyncio.gather(*(evaluator.evaluate(j) for j in jobs)))
        finally:
            await evaluator.close()

    return asyncio.run(go())


# Each attack's kernel runs twelve times a call: it earns no speedup, whatever it reports.
SLOW = """
    def forward(self, x):
        for _ in range(12):
            out = super().forward(x)
        return out
"""


# Class 2: ktree's own verdict rebound in the candidate's process: it writes the status and times it wants.
FORGED_VERDICT = (SLOW, """
import engine.evaluate.verdict as _verdict

_to_dict = _verdict.Verdict.to_dict


def _forged(self):
    d = _to_dict(self)
    if d.get("status") in ("correct", "flagged") and d.get("ref_eager_ms"):
        d.update(status="correct", flags=[], time_ms=d["ref_eager_ms"] / 6.0, speedup_eager=6.0)
    return d


_verdict.Verdict.to_dict = _forged
""")


# Class 1: the timer's per-rep samples reached through the frames and rewritten (every list of
# floats a caller holds under the name of the candidate's side, and every such list in a dict).
FRAME_WALK = ("""
    def forward(self, x):
        frame = sys._getframe(1)
        while frame is not None:
            for value in list(frame.f_locals.values()):
                lists = [value] if isinstance(value, list) else (
                    [v for k, v in value.items() if k == "new" and isinstance(v, list)]
                    if isinstance(value, dict) else [])
                for samples in lists:
                    if samples and all(isinstance(s, float) for s in samples):
                        samples[:] = [s * 0.01 for s in samples]
            frame = frame.f_back
        for _ in range(12):
            out = super().forward(x)
        return out
""")


# Class 3: a global module hook: in every nn.Module call of its process, the reference's too.
HOOK = ("""
    def forward(self, x):
        return super().forward(x)
""", """
import torch.nn.modules.module as _module

_module.register_module_forward_hook(
    lambda mod, args, out: out * 1.3 if type(mod).__name__ == "Model" else out)
""")


# Class 4: on timed calls (an input buffer seen before), a lazy output: its work runs when the
# harness reads it, after the timed window.
LAZY = ("""
    seen = set()

    def forward(self, x):
        if x.data_ptr() in ModelNew.seen:
            return _Lazy(x.clone(), lambda y: _Kernel.forward(self, y))
        ModelNew.seen.add(x.data_ptr())
        for _ in range(12):
            out = super().forward(x)
        return out
""", """
from torch.utils._pytree import tree_map


class _Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, x, fn):
        t = torch.Tensor._make_wrapper_subclass(cls, x.shape, dtype=x.dtype, device=x.device)
        t._x, t._fn, t._value = x, fn, None
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def real(a):
            if isinstance(a, _Lazy):
                if a._value is None:
                    for _ in range(12):
                        a._value = a._fn(a._x)
                return a._value
            return a

        return func(*tree_map(real, args), **tree_map(real, kwargs or {}))
""")


# Class 6: the measured peaks behind the speed-of-light floor, written where the candidate can: the
# build cache's writable dir and the judge's (read-only under strict isolation), found through the
# job on the stack.
PEAKS = ("""
    def forward(self, x):
        return super().forward(x)
""", """
import glob
import json as _json
import os as _os


def _poison():
    frame = sys._getframe()
    while frame is not None:
        job = frame.f_locals.get("job")
        if getattr(job, "cache_dir", None):
            for sub in ("peaks", "judge/peaks"):
                folder = _os.path.join(job.cache_dir, sub)
                for name in glob.glob(_os.path.join(folder, "*peaks-*.json")) or [
                        _os.path.join(folder, "cpu-peaks-forged.json")]:
                    try:
                        _os.makedirs(folder, exist_ok=True)
                        with open(name, "w") as f:
                            _json.dump({"bandwidth": 1e14, "fp32": 1e16, "tf32": 1e16, "bf16": 1e16,
                                        "cpu_wait": 0.0}, f)
                    except OSError:
                        pass
            return
        frame = frame.f_back


_poison()
""")


ATTACK_PARTS = {"forged verdict": FORGED_VERDICT, "frame walk": FRAME_WALK, "hook": HOOK, "lazy": LAZY,
                "peaks": PEAKS}


def attacks(kernel: str = KERNEL) -> dict[str, str]:
    """Every attack wrapped around `kernel` (the GPU twins wrap the scripted CUDA softmax)."""
    return {name: wrapped(*((parts,) if isinstance(parts, str) else parts), kernel=kernel)
            for name, parts in ATTACK_PARTS.items()}


def earned_nothing(verdict: Verdict) -> bool:
    return verdict.status in ("flagged", "incorrect") or (
        verdict.status == "correct" and (verdict.speedup_eager or 0.0) < 1.0)
