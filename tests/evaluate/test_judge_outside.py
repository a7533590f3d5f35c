"""Issue 54 on the cpu backend: a judge the candidate cannot reach. Each attack below was written
against ktree's own harness, knowing its code: it rebinds ktree's modules in its process, walks the
frames to the timer's samples, hooks every module of its process, returns lazy outputs on timed calls,
or writes the peaks file the speed of light reads. None ends `correct` with a speedup it did not earn
(each attack's kernel is slowed: it earns none), and an honest kernel judged after one in the same
evaluator gets its verdict alone.

The rules that decide it (engine.evaluate.host.judge.compose) are tested on plain records first; the
end-to-end attacks wrap the scripted softmax's ctypes kernel, as test_timing_hacks does (one build,
shared through the build cache)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.evaluate.host.judge import AUDIT_CALLS, BELIEF, MOST_CALLS, Judge, compose, disbelieved, outside_ms
from engine.evaluate.host.make_job import make_job
from engine.evaluate.host.sandbox import Sandbox, available, make_workdir
from engine.evaluate.verdict import Verdict
from tests.conftest import kernel_flags
from tests.evaluate.hacks import KERNEL, attacks, earned_nothing, evaluate_all

ATTACKS = attacks()


# -- the rules, on plain records ----------------------------------------------------------------------


def _claim(**changes: object) -> Verdict:
    fields = dict(status="correct", backend="cpu", time_ms=1.0, ref_eager_ms=2.0, speedup_eager=2.0, log="ok")
    fields.update(changes)
    return Verdict(**fields)  # type: ignore[arg-type]


def _calls(cand_ms: float, ref_ms: float = 30.0, inner_ms: float = 2.0, ok: bool = True) -> dict:
    wrong = {"errs": {"max_abs_err": 0.5}, "reason": "output 0: wrong"}
    return {"calls": [{"seed": i, "ref_ms": ref_ms + i, "inner_ms": inner_ms, "cand_ms": cand_ms + i, "ok": ok,
                       **({"errs": {}, "reason": ""} if ok else wrong)} for i in range(5)]}


def test_the_outside_figure_is_the_least_round_trip_less_the_least_overhead():
    # the candidate's quickest round trip (100) less the reference's least round trip (30) less its call (2)
    assert outside_ms(_calls(cand_ms=100.0)["calls"]) == pytest.approx(100.0 - 28.0)
    calls = _calls(cand_ms=100.0)["calls"]
    # One reference call slowed by something else (its process's first kernels, the host) beyond the
    # candidate's whole round trip: it once zeroed the figure pair by pair, and a forged 6x claim stood
    # on a GPU. The least overhead of the calls stands.
    calls[0]["ref_ms"] += 500.0
    assert outside_ms(calls) == pytest.approx(100.0 - 29.0)  # (the next least: 31 - 2)
    calls = _calls(cand_ms=100.0)["calls"]
    for c in calls:  # the reference made on the job's first call (said by the clean process) is no overhead
        c["ref_ms"] += 400.0
        c["setup_ms"] = 400.0
    assert outside_ms(calls) == pytest.approx(100.0 - 28.0)
    calls = _calls(cand_ms=100.0)["calls"]
    for c in calls:  # nor is whatever else the clean process did that the candidate's side does not
        # (on a GPU, the removal of its written window once outweighed a 6.7 ms kernel): `extra_ms`,
        # the making of the reference among it
        c["ref_ms"] += 7.0
        c["extra_ms"], c["setup_ms"] = 7.0, 0.5
    assert outside_ms(calls) == pytest.approx(100.0 - 28.0)
    assert outside_ms(_calls(cand_ms=10.0)["calls"]) == 0.0  # never below zero
    assert outside_ms([]) is None


def test_a_claim_the_outside_clock_cannot_allow_is_not_believed_and_the_outside_figure_stands():
    judged = compose(_claim(), _calls(cand_ms=200.0), None, "cpu")
    assert judged.status == "correct" and judged.notes[-1].startswith("outside-clock:")
    assert judged.time_ms == pytest.approx(200.0 - 28.0)
    assert judged.speedup_eager == pytest.approx(2.0 / 172.0)


def test_an_honest_claim_within_the_clocks_room_stands_unchanged():
    # round trips 29 ms over the reference's 28 ms of overhead: 1 ms outside, the claim 1 ms
    honest = compose(_claim(), _calls(cand_ms=29.0), None, "cpu")
    assert (honest.status, honest.time_ms, honest.speedup_eager) == ("correct", 1.0, 2.0)
    # a claim BELIEF times under the outside figure, within the slack, still stands
    edge = compose(_claim(time_ms=1.0), _calls(cand_ms=28.0 + BELIEF * 1.0), None, "cpu")
    assert edge.status == "correct"


def test_outputs_wrong_on_fresh_inputs_are_incorrect_whatever_the_claim():
    judged = compose(_claim(), _calls(cand_ms=29.0, ok=False), None, "cpu")
    assert judged.status == "incorrect" and judged.speedup_eager is None
    assert "on fresh inputs" in judged.log and judged.max_abs_err == 0.5


def test_a_reference_time_above_the_clean_one_is_not_believed():
    judged = compose(_claim(ref_eager_ms=20.0, speedup_eager=20.0), _calls(cand_ms=29.0),
                     {"median": 2.0, "hi": 2.2}, "cpu")
    assert judged.status == "correct" and judged.ref_eager_ms == 2.0 and judged.speedup_eager == 2.0
    assert any(n.startswith("reference:") for n in judged.notes)


def test_a_candidate_process_that_dies_on_a_fresh_input_call_is_not_correct():
    died = compose(_claim(), {"error": "the candidate's process died on a fresh-input call"}, None, "cpu")
    assert died.status == "crashed"
    failed = compose(_claim(), {"error": "on fresh inputs: RuntimeError: boom", "runtime": True}, None, "cpu")
    assert failed.status == "runtime_error"
    # the judge's own failure leaves the claim, marked unchecked
    unchecked = compose(_claim(), {"error": "the judge's process did not start", "judge": True}, None, "cpu")
    assert unchecked.status == "correct" and any(n.startswith("judge:") for n in unchecked.notes)


def test_only_a_correct_claim_is_checked_from_outside():
    wrong = _claim(status="incorrect")
    assert compose(wrong, _calls(cand_ms=500.0), None, "cpu") is wrong


# -- the judge's calls, its clean process real, the candidate's side played here -------------------


def _audit_against(slowed: Callable[[int], float], claim_ms: float) -> dict:
    """Judge.audit on the softmax reference, its clean process real; the candidate's process played
    by this test: the reference's own outputs for each seed, handed over as the candidate's process
    hands them, after `slowed(call number)` seconds (a host's load, or work hidden from a clock)."""
    import torch

    from engine.evaluate.child.load import make_reference
    from engine.evaluate.harness import handover
    from engine.evaluate.languages.common import make_inputs
    from engine.evaluate.loading import load_module_from_path
    from engine.problems import load_problem

    softmax = load_problem("softmax")
    sizes = {"batch_size": 16, "dim": 256}
    job = make_job(softmax.path, "", sizes, backend="cpu", cache_dir="", flops=None, bytes=None)
    problem = load_module_from_path(job.problem_path, job.sizes)
    model, _, cast = make_reference(job, problem, "cpu")
    work = make_workdir("judge-test")
    seen: list[int] = []

    async def candidate(request: dict, timeout_s: float) -> tuple[dict, float]:
        t0 = time.perf_counter()
        time.sleep(slowed(len(seen)))
        seen.append(int(request["seed"]))
        with torch.no_grad():
            torch.manual_seed(int(request["seed"]))
            out = model(*make_inputs(problem, "cpu", cast))
        handover.write([out], request["out"], int(request["max_bytes"]), float(request["window"]))
        return {"audited": request["out"]}, time.perf_counter() - t0

    async def go() -> dict:
        judge = Judge(dict(os.environ), Sandbox(), "", work)
        try:
            return await judge.audit(job, candidate, work, 120.0, claim_ms=claim_ms)
        finally:
            await judge.close()

    return asyncio.run(go())


def test_calls_slowed_by_the_host_are_taken_again_until_a_quiet_one_allows_the_claim():
    # the first four calls slowed 60 ms each (a neighbour's load), then not: more pairs than
    # AUDIT_CALLS, each made only while the calls before it could not allow the claim, every answer right
    claim = 2.0
    audit = _audit_against(lambda i: 0.06 if i < 4 else 0.0, claim_ms=claim)
    calls = audit["calls"]
    assert len(calls) > AUDIT_CALLS and all(c["ok"] for c in calls)
    assert all(disbelieved(claim, outside_ms(calls[:n]), "cpu") for n in range(AUDIT_CALLS, len(calls)))
    if len(calls) < MOST_CALLS:  # a quiet pair came (on a loaded host all fifteen may be slowed)
        assert not disbelieved(claim, outside_ms(calls), "cpu")
        judged = compose(_claim(time_ms=claim, ref_eager_ms=4.0, speedup_eager=2.0), audit, None, "cpu")
        assert judged.time_ms == claim and not any(n.startswith("outside-clock") for n in judged.notes)


def test_on_a_loaded_host_the_figure_stands_and_says_so():
    # The reference's own calls in the judge's process took 10x their clean median: the host was
    # loaded. The figure (190 ms) may be high, yet a claim the clock cannot check is not let through.
    judged = compose(_claim(sol_fraction=0.5), _calls(cand_ms=200.0, inner_ms=20.0),
                     {"median": 2.0, "hi": 2.2}, "cpu")
    assert judged.time_ms == pytest.approx(190.0) and "the host was loaded" in judged.notes[-1]
    assert judged.sol_fraction == pytest.approx(0.5 * 1.0 / 190.0)  # the same floor, the time that stands
    # a quiet host (the reference's calls at their clean time): no such words
    quiet = compose(_claim(), _calls(cand_ms=200.0, inner_ms=2.0), {"median": 2.0, "hi": 2.2}, "cpu")
    assert quiet.time_ms == pytest.approx(172.0) and "loaded" not in quiet.notes[-1]
    # on a GPU a call's host overhead alone can be several times a small kernel's events: not said
    gpu = compose(_claim(backend="cuda"), _calls(cand_ms=200.0, inner_ms=20.0), {"median": 2.0}, "cuda")
    assert gpu.time_ms == pytest.approx(190.0) and "loaded" not in gpu.notes[-1]


def test_work_in_every_call_is_seen_whatever_the_number_of_calls():
    audit = _audit_against(lambda i: 0.03, claim_ms=0.05)  # 30 ms in every call, 0.05 ms claimed
    assert len(audit["calls"]) == MOST_CALLS and audit["calls"][-1]["ok"]
    judged = compose(_claim(time_ms=0.05, ref_eager_ms=0.1, speedup_eager=2.0), audit, None, "cpu")
    overhead = min(c["ref_ms"] - c["inner_ms"] - c["extra_ms"] for c in audit["calls"])
    assert judged.time_ms >= 30.0 - overhead and judged.notes[-1].startswith("outside-clock")
    assert f"{MOST_CALLS} fresh-input calls" in judged.notes[-1]


# -- the attacks, end to end --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["forged verdict", "frame walk", "lazy"])
def test_an_attack_on_the_harness_earns_no_speedup(name: str):
    [verdict] = evaluate_all([ATTACKS[name]])
    assert earned_nothing(verdict), (verdict.status, verdict.speedup_eager, verdict.flags, verdict.log[:500])


@pytest.mark.slow
def test_an_honest_kernel_after_a_hooking_candidate_gets_its_verdict_alone():
    """One evaluator, as one `ktree eval` call or one search: the hook stays in its candidate's
    process (a child forked for it), never in the next one's."""
    hooked, honest = evaluate_all([ATTACKS["hook"], KERNEL])
    assert earned_nothing(hooked), (hooked.status, hooked.flags)
    assert honest.status == "correct", honest.log
    assert kernel_flags(honest.flags) == []


@pytest.mark.slow
@pytest.mark.skipif(available()[0] != "strict", reason="a candidate under basic isolation can write anywhere")
def test_peaks_a_candidate_wrote_mislead_no_later_evaluation(build_cache: Path):
    """The floor of an honest kernel judged after a candidate wrote 100 TB/s where it could is the
    floor it had before (the peaks are kept by the judge, out of the sandbox's writable dirs)."""
    before, poisoner, after = evaluate_all([KERNEL, ATTACKS["peaks"], KERNEL])
    assert poisoner.status in ("flagged", "correct")
    floor_before = before.sol_fraction * before.time_ms
    floor_after = after.sol_fraction * after.time_ms
    assert floor_after == pytest.approx(floor_before, rel=0.5)  # (re-measured peaks may differ a little)
    for path in (build_cache / "judge" / "peaks").glob("*.json"):
        assert json.loads(path.read_text())["bandwidth"] < 1e13, path
    assert os.environ.get("KTREE_CACHE_DIR") == str(build_cache)


def test_on_a_gpu_the_figure_is_believed_to_within_eight_times():
    # Two readings from an H200 (after 15 pairs each): an honest 0.26 ms Triton SiLU read 3.47 ms from
    # outside, a forged 0.18 ms claim on a 6.7 ms kernel 13.1 ms. The first stands, the second does not;
    # the cpu keeps its factor of 2.
    assert not disbelieved(0.2558, 3.473, "cuda")
    assert disbelieved(0.1756, 13.09, "cuda")
    assert disbelieved(0.1756, 6.7, "cuda")  # (had the figure read the kernel's true time)
    assert disbelieved(0.2558, 3.473, "cpu")
