"""The registry of integrity checks (engine.evaluate.harness.integrity_checks, issue 37): every check is a
named unit, docs/verdicts.md lists exactly the registry, the child runs the checks of each phase in
the order registered, and a check registered here (a toy) runs from the registry and its flag
reaches the verdict on the cpu."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.evaluate.harness import integrity_checks
from engine.evaluate.harness.integrity_checks import Finding, IntegrityCheck, Watch

DOC = Path(__file__).resolve().parents[2] / "docs" / "verdicts.md"


def test_every_check_is_a_named_unit() -> None:
    names = [c.name for c in integrity_checks.REGISTRY]
    assert len(names) == len(set(names))
    for c in integrity_checks.REGISTRY:
        assert re.fullmatch(r"[a-z][a-z0-9-]*", c.name), c.name
        assert c.catches and "\n" not in c.catches and c.evidence and callable(c.run)
        assert c.phases and set(c.phases) <= set(integrity_checks.PHASES)
        assert c.capture_at in integrity_checks.PHASES


def test_the_docs_list_the_registry_and_nothing_else() -> None:
    text = DOC.read_text()
    documented = re.findall(r"^\| `([a-z][a-z0-9-]*)` \|", text, flags=re.M)
    registered = [c.name for c in integrity_checks.REGISTRY]
    assert documented == registered, "docs/verdicts.md: run python -m engine.evaluate.harness.integrity_checks"
    assert integrity_checks.markdown_table() in text  # what each catches, when it runs, its evidence


def test_the_order_of_the_evidence_within_each_phase() -> None:
    """The order the flags have always come in (a verdict's flags read in the order they were found)."""
    order = {phase: [c.name for c in integrity_checks.checks_for(phase)] for phase in integrity_checks.PHASES}
    assert order == {
        "import": [], "load": ["harness-call"], "trial": ["host-threads", "inputs-modified"],
        "passed": ["outputs", "torch-ops", "host-threads"],
        "check": ["torch-ops", "input-independent", "refilled-inputs", "precision", "harness", "tamper"],
        "timed": ["escaping-work"], "rechecked": ["inputs-modified", "reference-slowed", "recheck"],
        "after": ["harness", "forward-replaced", "tamper", "reference-cache", "speed-of-light"]}
    assert [c.name for c in integrity_checks.REGISTRY if c.capture and c.capture_at == "import"] == [
        "harness", "tamper"]
    assert integrity_checks.checks_for("timed", "cpu") == []  # escaping work: CUDA streams only


def test_a_name_is_registered_once_in_known_phases() -> None:
    with pytest.raises(ValueError):
        integrity_checks.register(IntegrityCheck("tamper", "twice", ("after",), "x:", lambda w: Finding()))
    with pytest.raises(ValueError):
        integrity_checks.register(IntegrityCheck("toy", "nowhere", ("never",), "x:", lambda w: Finding()))


TOY_FLAG = "toy: ModelNew was called on the check trials"


@pytest.fixture
def toy_check() -> Iterator[list[tuple[str, int]]]:
    """A check registered for the test: it sees every passed trial and flags at the end."""
    seen: list[tuple[str, int]] = []

    def run(w: Watch) -> Finding:
        seen.append((w.phase, w.trial))
        return Finding([TOY_FLAG] if w.phase == "after" else [], ["toy: a note"] if w.phase == "after" else [])

    integrity_checks.register(IntegrityCheck("toy", "nothing: a test's check", ("passed", "after"), "toy:",
                                             run))
    try:
        yield seen
    finally:
        integrity_checks.unregister("toy")
    assert "toy" not in [c.name for c in integrity_checks.REGISTRY]


# Softmax in numpy, written into memory torch allocated: the dispatcher sees none of it, as with a
# compiled kernel, so no other check has anything to say.
NUMPY_SOFTMAX = '''
import numpy as np
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        a = x.numpy()
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        out.numpy()[:] = e / e.sum(axis=-1, keepdims=True)
        return out
'''


def test_a_check_registered_in_a_test_runs_from_the_registry_and_its_flag_reaches_the_verdict(
        tmp_path: Path, toy_check: list[tuple[str, int]]) -> None:
    from engine.evaluate.child.evaluation import run_evaluate
    from engine.evaluate.host.make_job import make_job
    from engine.problems import load_problem
    from tests.conftest import kernel_flags

    problem = load_problem("softmax")
    job = make_job(problem.path, NUMPY_SOFTMAX, problem.sizes_for("cpu"), backend="cpu",
                   cache_dir=str(tmp_path), flops=None, bytes=None, trials=2, time_budget_s=0.05, max_reps=3)
    verdict = run_evaluate(job)  # in this process: the registry as this test left it
    assert toy_check == [("passed", 0), ("passed", 1), ("after", 1)]
    assert verdict.status == "flagged", verdict.log
    assert kernel_flags(verdict.flags) == [TOY_FLAG], verdict.flags
    assert "toy: a note" in verdict.notes and TOY_FLAG in verdict.log


def test_the_timing_checks_on_what_the_timing_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA-only paths, without a GPU: escaping work runs the candidate on the rotation's sets
    (timing.check_escaping_work, stubbed here), then the recheck's evidence in its old order."""
    from types import SimpleNamespace

    from engine.evaluate.harness import timing

    calls: list[tuple[float, object]] = []

    def escaping(fn: object, median: float, feed: object = None) -> list[str]:
        calls.append((median, feed))
        return ["escaping work: stub"]

    monkeypatch.setattr(timing, "check_escaping_work", escaping)
    stats = SimpleNamespace(new=SimpleNamespace(median=0.5))
    rotation = object()
    job = SimpleNamespace(trials=3)
    on_cpu = Watch(job, "cpu", call_new=lambda *a: None, stats=stats, rotation=rotation)
    assert integrity_checks.run("timed", on_cpu).flags == [] and calls == []
    on_gpu = Watch(job, "cuda", call_new=lambda *a: None, stats=stats, rotation=rotation)
    assert integrity_checks.run("timed", on_gpu).flags == ["escaping work: stub"] and calls == [(0.5, rotation)]
    on_gpu.recheck = (False, "timed outputs: rep 3: wrong", ["inputs-modified: in timed rep 2"])
    on_gpu.reference_slowed = "reference-slowed: 2x"
    assert integrity_checks.run("rechecked", on_gpu).flags == [
        "inputs-modified: in timed rep 2", "reference-slowed: 2x", "recheck: timed outputs: rep 3: wrong"]
    assert integrity_checks.run("rechecked", Watch(job, "cpu")).flags == []


def test_a_candidate_that_empties_the_registry_is_still_checked(tmp_path: Path) -> None:
    """The child runs the registry as it stood before the candidate's code was imported."""
    from engine.evaluate.child.evaluation import run_evaluate
    from engine.evaluate.host.make_job import make_job
    from engine.problems import load_problem

    source = NUMPY_SOFTMAX.replace("class ModelNew", "from engine.evaluate.harness import integrity_checks\n"
                                   "integrity_checks.REGISTRY.clear()\n\n\nclass ModelNew").replace(
        "        return out", "        x.mul_(1.0000001)\n        return out")
    problem = load_problem("softmax")
    job = make_job(problem.path, source, problem.sizes_for("cpu"), backend="cpu",
                   cache_dir=str(tmp_path), flops=None, bytes=None, trials=2, time_budget_s=0.05, max_reps=3)
    registry = list(integrity_checks.REGISTRY)
    try:
        verdict = run_evaluate(job)
        assert integrity_checks.REGISTRY == []  # the candidate did empty it
    finally:
        integrity_checks.REGISTRY[:] = registry
    assert verdict.status == "flagged", verdict.log
    assert any(f.startswith("inputs-modified") for f in verdict.flags), verdict.flags


class _Trials:
    """Two check trials' inputs and answers, as harness.expected_cache.ReferenceChecks gives them."""

    def __init__(self) -> None:
        import torch

        self.inputs = [[torch.randn(8, 16)], [torch.randn(8, 16)]]

    def trial_inputs(self, trial: int, device: str) -> list:
        return self.inputs[trial]

    def trial_expected(self, trial: int, device: str) -> list:
        return [self.inputs[trial][0] * 2]


def _compare(out, expected):
    import torch

    ok = torch.allclose(out, expected[0])
    return ok, {}, "" if ok else "max abs error exceeds allclose"


def test_an_answer_kept_by_the_inputs_address_is_flagged_by_refilling_the_same_buffers() -> None:
    """A memo keyed on the input's pointer answers every check trial right (each trial's inputs
    live at their own address) and is caught when trial 1's buffers are refilled with trial 2's
    values; the honest forward and a memo that also keys on the version counter are not flagged."""
    from engine.evaluate.harness import integrity

    seen: dict = {}

    def by_pointer(x):
        return seen.setdefault(x.data_ptr(), x * 2)

    def by_pointer_and_version(x):
        return seen.setdefault((x.data_ptr(), x._version), x * 2)

    flags = integrity.check_refilled_inputs(by_pointer, _Trials(), "cpu", _compare)
    assert len(flags) == 1 and flags[0].startswith("refilled-inputs: the same buffers refilled in place"), flags
    seen.clear()
    # The copy where an earlier trial's inputs were (the allocator reused their block): the memo
    # answers the first call with that trial's outputs.
    trials = _Trials()
    stale = trials.inputs[1][0] * 2  # trial 2's answer, kept for whatever address the copy gets
    seen_any: dict = {}

    def by_any_pointer(x):
        return seen_any.setdefault(x.data_ptr(), stale)

    flags = integrity.check_refilled_inputs(by_any_pointer, trials, "cpu", _compare)
    assert len(flags) == 1 and flags[0].startswith("refilled-inputs: trial 1's values in new buffers"), flags
    assert integrity.check_refilled_inputs(by_pointer_and_version, _Trials(), "cpu", _compare) == []
    assert integrity.check_refilled_inputs(lambda x: x * 2, _Trials(), "cpu", _compare) == []
