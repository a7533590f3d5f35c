"""Nothing a candidate can tamper with: under strict isolation a variant writes its own build dir
only (at build time) and none at all while it is evaluated, so it cannot replace another variant's
compiled module before that one is judged. Basic isolation enforces nothing: shown for contrast.
No test here compiles (pure-Python variants get their build dirs all the same)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from engine.evaluate.host import sandbox
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.problems import load_problem

SOFTMAX = load_problem("softmax")
WORK = {"flops": None, "bytes": None, "trials": 1, "time_budget_s": 0.1, "max_reps": 5}
STRICT, WHY_NOT = sandbox.available()

HONEST = textwrap.dedent("""
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
""")

# At import (in the compile pool, and again in the worker) and in forward (while evaluated):
# write a file into every build dir but its own.
TAMPER = textwrap.dedent("""
import os
import torch
import torch.nn as nn

def tamper(when):
    own = os.environ["TORCH_EXTENSIONS_DIR"]
    root = os.path.dirname(own)
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        if os.path.isdir(path) and path != own and len(entry) == 24:
            try:
                with open(os.path.join(path, "tampered-" + when), "w") as f:
                    f.write("replaced")
            except OSError:
                pass

tamper("at-import")

class ModelNew(nn.Module):
    def forward(self, x):
        tamper("in-forward")
        return torch.softmax(x, dim=1)
""")


def _evaluate_both(cache: Path, isolation: str) -> list[str]:
    """Evaluate the honest variant, then the tampering one; the files found in the honest
    variant's build dir afterwards that it did not put there."""
    async def go() -> None:
        ev = LocalEvaluator("cpu", cache_dir=cache, isolation=isolation)
        try:
            honest = await ev.evaluate(ev.job(SOFTMAX.path, HONEST, SOFTMAX.sizes_for("cpu"), **WORK))
            assert honest.status == "flagged", honest.log  # torch ops: evaluated to the end
            bad = await ev.evaluate(ev.job(SOFTMAX.path, TAMPER, SOFTMAX.sizes_for("cpu"), **WORK))
            assert bad.status == "flagged", bad.log
        finally:
            await ev.close()

    asyncio.run(go())
    dirs = [d for d in cache.iterdir() if d.is_dir() and len(d.name) == 24]
    assert len(dirs) == 2
    return sorted(f.name for d in dirs for f in d.glob("tampered-*"))


@pytest.mark.slow
def test_basic_isolation_lets_a_candidate_write_other_build_dirs(tmp_path: Path):
    # What strict prevents (basic enforces nothing): the tampering variant reaches the other dir.
    assert _evaluate_both(tmp_path / "cache", "basic") == ["tampered-at-import", "tampered-in-forward"]


@pytest.mark.slow
@pytest.mark.skipif(STRICT != "strict", reason=f"strict isolation unavailable: {WHY_NOT}")
def test_strict_isolation_keeps_a_candidate_out_of_other_build_dirs(tmp_path: Path):
    assert _evaluate_both(tmp_path / "cache", "strict") == []


def test_an_evaluation_sees_every_build_dir_read_only(tmp_path: Path):
    ro, rw = sandbox.evaluation_binds(str(tmp_path))
    assert ro == [str(tmp_path)]
    assert rw == [str(tmp_path / sandbox.WRITABLE_IN_CACHE), str(tmp_path / sandbox.TRITON_CACHE)]
    assert sandbox.evaluation_binds("") == ([], [])
