"""GPU MODE's static hack rules (kernelguard) as the evaluator's second opinion
(engine.evaluate.host.static_rules): honest kernels get no flag, written hacks do, a missing package or
a failing rule is a note, and the flag reaches the verdict evaluate() returns. Sources only: no build."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

from engine.evaluate.host import evaluator as evaluator_module
from engine.evaluate.host import static_rules
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.host.static_rules import ABSENT_NOTE, PREFIX, StaticOpinion, check, merge
from engine.evaluate.verdict import Verdict

REPO = Path(__file__).resolve().parents[2]
REALWORLD = REPO / "tests" / "realworld"

needs_kernelguard = pytest.mark.skipif(importlib.util.find_spec("kernelguard") is None,
                                       reason="kernelguard is not installed")


def _flagged(paths: list[Path]) -> list[str]:
    """The files the rules flag, each with its flag."""
    out = []
    for path in paths:
        opinion = check(path.read_text())
        assert opinion.record["classification"] is not None, (path, opinion.notes)
        out += [f"{path.relative_to(REPO)}: {flag}" for flag in opinion.flags]
    return out


@needs_kernelguard
def test_no_kernel_of_the_scripted_library_or_the_examples_is_flagged() -> None:
    paths = sorted((REPO / "engine" / "scripted_library").rglob("*.py"))
    paths += sorted((REPO / "engine" / "templates" / "examples").glob("*.py"))
    assert len(paths) > 50
    assert _flagged(paths) == []


@needs_kernelguard
def test_no_honest_case_of_the_realworld_corpus_is_flagged() -> None:
    cases = tomllib.loads((REALWORLD / "cases.toml").read_text())["case"]
    honest = [c for c in cases if c["kind"] == "honest"]
    assert len(honest) >= 10
    assert _flagged([REALWORLD / c[side] for c in honest for side in ("cpu", "gpu")]) == []


TIMER_HACK = '''
import torch
import torch.nn as nn

_true_elapsed = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _true_elapsed(self, end) * 0.1


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
'''

POINTER_CACHE_HACK = '''
import torch
import torch.nn as nn

_out_cache = {}


class ModelNew(nn.Module):
    def forward(self, a, b):
        key = a.data_ptr()
        if key in _out_cache:
            return _out_cache[key]
        out = torch.matmul(a, b)
        _out_cache[key] = out
        return out
'''

HOST_CLOCK_HACK = '''
import time
import torch.nn as nn

_start = time.perf_counter()
time.perf_counter = lambda: _start


class ModelNew(nn.Module):
    def forward(self, x):
        return x.relu()
'''


@needs_kernelguard
@pytest.mark.parametrize(("source", "pattern"), [
    (TIMER_HACK, "TIMER_MONKEYPATCH"),
    (POINTER_CACHE_HACK, "OUTPUT_REPLAY_CACHE"),
    (HOST_CLOCK_HACK, "TIMER_MONKEYPATCH"),
], ids=["cuda-event-timer", "data-ptr-cache", "perf-counter"])
def test_a_written_hack_gets_a_kernelguard_flag(source: str, pattern: str) -> None:
    opinion = check(source)
    assert len(opinion.flags) == 1 and opinion.flags[0].startswith(PREFIX + pattern)
    assert opinion.notes == ()
    record = opinion.record
    assert record["classification"] == "hacked" and pattern in [p["pattern"] for p in record["patterns"]]
    assert 0 <= record["s"] < 5


def test_without_the_package_nothing_is_flagged_and_a_note_says_so(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "kernelguard", None)  # `import kernelguard` raises ImportError
    opinion = check(TIMER_HACK)
    assert opinion.flags == () and opinion.notes == (ABSENT_NOTE,)
    assert opinion.record["classification"] is None


@needs_kernelguard
def test_an_error_inside_the_rules_is_a_note(monkeypatch) -> None:
    import kernelguard

    def broken(code, **kwargs):
        raise RecursionError("too deep")

    monkeypatch.setattr(kernelguard, "analyze_code", broken)
    opinion = check(TIMER_HACK)
    assert opinion.flags == () and len(opinion.notes) == 1
    assert opinion.notes[0].startswith(PREFIX) and "RecursionError: too deep" in opinion.notes[0]


@needs_kernelguard
def test_suspicious_and_low_confidence_are_notes(monkeypatch) -> None:
    import kernelguard

    said = {"classification": "suspicious", "matched_patterns": [
        {"pattern": "TRUSTED_MODULE_IMPORT", "severity": "medium", "evidence": "import __main__"}]}
    monkeypatch.setattr(kernelguard, "analyze_code", lambda code, **kw: said)
    opinion = check("x = 1")
    assert opinion.flags == () and len(opinion.notes) == 1
    assert opinion.notes[0].startswith(PREFIX + "suspicious (TRUSTED_MODULE_IMPORT)")
    said["classification"] = "low_confidence"
    low = check("x = 1")
    assert low.flags == ()
    assert low.notes == (PREFIX + "low confidence (TRUSTED_MODULE_IMPORT): import __main__",)
    said["classification"] = "valid"
    assert check("x = 1").flags == () and check("x = 1").notes == ()


FLAG = PREFIX + "TIMER_MONKEYPATCH: torch.cuda.Event.elapsed_time method patched"
RECORD = {"classification": "hacked", "patterns": [], "s": 0.02}


def test_a_flag_makes_a_correct_verdict_flagged_and_leaves_failures_alone() -> None:
    opinion = StaticOpinion(flags=(FLAG,), record=RECORD)
    correct = Verdict(status="correct", flags=("noisy",), notes=("torch-ops: x",), log="3 trials passed",
                      timing={"reps": 10})
    merged = merge(correct, opinion)
    assert merged.status == "flagged" and merged.flags == ("noisy", FLAG)
    assert merged.notes == ("torch-ops: x",) and merged.log.startswith("integrity check failed: " + FLAG)
    assert merged.timing == {"reps": 10, "static_rules": RECORD}
    for status in ("incorrect", "compile_error", "runtime_error", "timeout", "crashed"):
        failed = merge(Verdict(status=status, log="why"), opinion)
        assert (failed.status, failed.flags, failed.notes, failed.log) == (status, (), (), "why")
        assert failed.timing["static_rules"] == RECORD
    note = StaticOpinion(notes=(PREFIX + "suspicious (X): y",), record=RECORD)
    assert merge(Verdict(status="correct"), note).status == "correct"


@needs_kernelguard
def test_the_flag_reaches_the_verdict_evaluate_returns(tmp_path, monkeypatch) -> None:
    """Through LocalEvaluator.evaluate, with the build and the device's part stubbed: the rules run
    on the job's source beside the build and their flag turns the device's `correct` into `flagged`."""

    async def built(job, timeout, env, sandbox):
        return "ok", {"status": "compiled", "compile_s": 0.1, "log": ""}, ""

    async def judged_on_device(self, job, *args):
        return Verdict(status="correct", backend="cpu", log="3 trials passed", timing={"reps": 5})

    monkeypatch.setattr(evaluator_module.build_memo, "compile_job", built)  # the build, remembered or not
    monkeypatch.setattr(LocalEvaluator, "_judge", judged_on_device)

    async def go(source: str) -> Verdict:
        ev = LocalEvaluator("cpu", cache_dir=tmp_path, worker=False, host_lock=False, compile_baseline=False)
        return await ev.evaluate(ev.job(tmp_path / "p.py", source, {}, flops=None, bytes=None))

    hacked = asyncio.run(go(TIMER_HACK))
    assert hacked.status == "flagged" and hacked.flags[0].startswith(PREFIX + "TIMER_MONKEYPATCH")
    assert hacked.timing["static_rules"]["classification"] == "hacked" and hacked.timing["reps"] == 5
    honest = asyncio.run(go((REPO / "engine" / "templates" / "examples" / "softmax_fast.py").read_text()))
    assert honest.status == "correct" and honest.flags == ()
    assert honest.timing["static_rules"]["classification"] == "valid"


def test_a_job_that_judges_no_variant_runs_no_rules() -> None:
    assert static_rules.start("x = 1", "agreement") is None
