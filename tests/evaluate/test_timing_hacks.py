"""Issue 34 on the cpu backend: timing a candidate cannot game. Every class of hack that beat the
timing ends not `correct` (or, for a memo that can no longer hit, timed at its own kernel's
speed), and an honest kernel stays `correct` with its times unchanged within noise.

The compiled kernel is the scripted softmax library's ctypes one (rowblock_3: a build of seconds,
shared through the build cache); each hack is a Python wrapper appended to it, the way
test_verdict_rules builds its candidates. The rules themselves (rotation, tamper, escaping work,
speed of light, the clean reference) are tested on plain numbers and tensors first."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from engine.evaluate.child.load import build_key
from engine.evaluate.child.measure import judge_reference
from engine.evaluate.harness import noise, tamper, timing
from engine.evaluate.harness.rotation import Rotation, plan
from engine.evaluate.host.make_job import make_job
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import kernel_flags
from tests.evaluate.hacks import KERNEL, evaluate_all, hacks

SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"


HACKS = hacks()


@pytest.fixture(scope="module")
def verdicts() -> dict[str, Verdict]:
    names = ["honest", *HACKS]
    return dict(zip(names, evaluate_all([KERNEL, *HACKS.values()]), strict=True))


# -- the rules on plain numbers and tensors -------------------------------------------------------


def test_the_rotation_gives_consecutive_calls_other_contents_and_other_buffers():
    sets = [[torch.full((4, 8), float(k)), 3] for k in range(3)]
    rotation = Rotation(sets, samples_per_pass=4)
    rotation.start(20)
    seen = []
    for rep in range(20):
        for name in ("ref", "new"):
            args = rotation.args(name, rep)
            assert args[1] == 3  # a non-tensor argument passes as it is
            if name == "new":
                seen.append((args[0].data_ptr(), args[0]._version, float(args[0][0, 0])))
            rotation.done(name, rep, args[0] * 2)
    for (_, _, set_a), (_, _, set_b) in zip(seen, seen[1:], strict=False):
        assert set_a != set_b
    last: dict[int, float] = {}
    for ptr, _, content in seen:  # a buffer never holds the same set twice running
        assert last.get(ptr) != content
        last[ptr] = content
    assert len({ptr for ptr, _, _ in seen}) == 2
    versions: dict[int, int] = {}
    for ptr, version, _ in seen:  # every call finds a new version counter on its buffer
        assert version > versions.get(ptr, -1)
        versions[ptr] = version
    assert len(rotation.samples) == 4
    for sample in rotation.samples:  # cloned before the output was poisoned, on its own set
        assert sample.inputs_unchanged
        assert torch.equal(sample.outputs[0], torch.full((4, 8), 2.0 * sample.set_index))


def test_with_two_sets_a_memo_keyed_on_the_pointer_alone_is_always_stale():
    """Two sets and two alternating buffers in lockstep would give each buffer one set forever: a
    pointer-keyed memo would then always be right. A buffer never gets the set it held last."""
    sets = [[torch.full((2, 2), float(k))] for k in range(2)]
    rotation = Rotation(sets, samples_per_pass=0)
    rotation.start(40)
    memo: dict[int, float] = {}
    stale = 0
    for rep in range(40):
        x = rotation.args("new", rep)[0]
        if x.data_ptr() in memo:
            stale += memo[x.data_ptr()] != float(x[0, 0])
        memo[x.data_ptr()] = float(x[0, 0])
        rotation.done("new", rep, x * 1)
    assert stale == 40 - 2  # every call after the first two finds the other set in its buffer


def test_inputs_too_large_for_the_budget_rotate_in_place_and_a_write_into_them_is_seen(monkeypatch):
    """Two sets and two buffers over the byte budget (a loss on two 4 GiB inputs on a GPU): the
    rotation is lean (the sets in place, half the memory), still alternates sets, and still tells
    a call that wrote into its inputs."""
    from engine.evaluate.harness import rotation as rotation_module

    first = [torch.randn(64, 64)]  # 16 KiB a set; a budget of 40 KiB holds 2 sets, not 2 more buffers
    monkeypatch.setenv("KTREE_TIMING_ROTATION_MB", str(40 / 1024))
    assert rotation_module.lean(rotation_module.tensor_bytes(first), rotation_module.budget_bytes("cpu"))
    rotation = Rotation.draw(first, lambda: [torch.randn(64, 64)], "cpu", out_bytes=4, time_budget_s=1.0,
                             samples=6)
    assert rotation.lean and len(rotation.sets) == 2
    assert first == []  # the set handed over is let go: never beside the lean sets drawn for timing
    assert rotation.cost()["bytes"] == 2 * 64 * 64 * 4 + 0  # no buffers (no samples taken yet)
    drawn = [s[0].clone() for s in rotation.sets]
    rotation.park()  # let go while the check trials run; drawn again, the same, from their seeds
    assert rotation.sets == []
    rotation.ensure()
    assert all(torch.equal(a, s[0]) for a, s in zip(drawn, rotation.sets, strict=True))
    assert not torch.equal(drawn[0], drawn[1])
    rotation.start(6)
    indexes = []
    for rep in range(6):
        args = rotation.args("new", rep)
        indexes.append(next(i for i, s in enumerate(rotation.sets) if s[0] is args[0]))
        if rep == 3:
            args[0].add_(1.0)  # a candidate writing into its input
        rotation.done("new", rep, args[0].sum(dim=0))
    assert all(a != b for a, b in zip(indexes, indexes[1:], strict=False))  # never the same set twice running
    changed = [s for s in rotation.samples if not s.inputs_unchanged]
    assert [s.rep for s in changed] == [3] or all(s.rep >= 3 for s in changed), rotation.samples
    assert any(not s.inputs_unchanged for s in rotation.samples if s.rep == 3)


def test_outputs_are_poisoned_after_each_call_but_never_the_reference_weights():
    model = torch.nn.Linear(4, 4)
    rotation = Rotation([[torch.ones(2, 4)], [torch.zeros(2, 4)]], samples_per_pass=0)
    rotation.protect(model)
    rotation.start(2)
    out = torch.ones(3)
    rotation.done("new", 0, out)
    assert torch.isnan(out).all()
    rotation.done("ref", 0, model.weight)
    assert torch.isfinite(model.weight).all()
    index = torch.arange(3)
    rotation.done("new", 1, index)
    assert (index == -1).all()


def test_the_rotation_fits_its_byte_budget():
    mib = 2**20
    assert plan(2 * mib, 2 * mib, 256 * mib) == (4, 4)
    sets, samples = plan(1024 * mib, 1024 * mib, 10 * 1024 * mib)  # GPU softmax: 1 GiB in, 1 GiB out
    assert sets == 4 and samples == 1
    assert plan(1024 * mib, 1024 * mib, 1024 * mib) == (2, 1)  # at least two sets and one sample


def test_tamper_names_rebound_functions_and_changed_settings_and_puts_them_back():
    snap = tamper.capture()
    assert tamper.check(snap) == []
    softmax, threads = torch.softmax, torch.get_num_threads()
    try:
        torch.softmax = lambda *a, **k: softmax(*a, **k)
        torch.Tensor.softmax = lambda self, dim: softmax(self, dim)
        torch.set_num_threads(threads + 1)
        flags = tamper.check(snap)
        assert "tamper: the candidate rebinds torch.softmax" in flags
        assert "tamper: the candidate overrides torch.Tensor.softmax" in flags
        assert f"tamper: the candidate changed torch.get_num_threads() {threads} -> {threads + 1}" in flags
        tamper.restore(snap)
        assert torch.softmax is softmax and torch.get_num_threads() == threads
        assert "softmax" not in vars(torch.Tensor)
        assert tamper.check(snap) == []
    finally:
        torch.softmax = softmax
        vars(torch.Tensor).get("softmax") and delattr(torch.Tensor, "softmax")
        torch.set_num_threads(threads)


def test_escaping_work_is_the_wait_after_the_return_beyond_the_events():
    # A 0.083 ms Triton kernel behind 0.22 ms of Python launch work: the host time is not held
    # against it (the old rule compared the synchronized wall time to the events: flagged).
    assert timing.judge_escape([0.22] * 5, [0.03, 0.02, 0.04, 0.03, 0.02], [0.30, 0.29, 0.31, 0.30, 0.30]) == []
    assert timing.judge_escape([0.22] * 5, [0.01] * 5, [0.083] * 5) == []
    # A kernel on a side stream not joined into the current stream: the events see nothing of it.
    flags = timing.judge_escape([0.02] * 5, [0.9, 1.0, 1.1, 0.95, 1.0], [0.004] * 5, timed_ms=0.004)
    assert flags and flags[0].startswith("escaping work")
    # Host load delays the return, never the wait: still not flagged.
    assert timing.judge_escape([5.0, 9.0, 0.3, 12.0, 0.3], [0.05] * 5, [0.08] * 5) == []


def test_speed_of_light_flags_below_the_byte_floor_and_notes_fewer_flops():
    # diag(A) @ B done as row scaling: far under the GEMM's FLOP time, well over the byte floor.
    sol = timing.SpeedOfLight(floor_ms=0.02, flops_ms=9.2, nbytes=8e6, bandwidth=4e11, rate=2.6e13)
    flags, notes, fraction = timing.judge_speed_of_light(sol, 0.35, 1.25)
    assert flags == [] and notes and notes[0].startswith("algorithmic: fewer operations than the reference")
    assert fraction == pytest.approx(0.02 / 0.35)
    flags, notes, _ = timing.judge_speed_of_light(sol, 0.01, 1.25)
    assert flags and flags[0].startswith("speed of light") and "8 MB" in flags[0]
    assert timing.judge_speed_of_light(timing.NO_SPEED_OF_LIGHT, 1.0, 1.25) == ([], [], None)


def test_a_reference_slower_in_process_than_clean_beyond_noise_is_named():
    clean = {"median": 1.0, "lo": 0.95, "hi": 1.05}
    assert judge_reference(timing.Stats(2.0, 1.9, 2.2, 1.9, 2.1), clean).startswith("reference-slowed")
    assert judge_reference(timing.Stats(1.4, 1.3, 1.5, 1.35, 1.45), clean) is None  # under 1.5x
    assert judge_reference(timing.Stats(1.6, 0.9, 2.5, 1.0, 2.4), clean) is None  # intervals overlap
    assert judge_reference(timing.Stats(2.0, 1.9, 2.2, 1.9, 2.1), None) is None


def test_rotating_inputs_leave_the_time_of_a_call_unchanged_within_noise():
    """The same softmax on one fixed input (as timed before) and on the rotation's sets, timed
    interleaved in one loop (so host load falls on both alike)."""
    timing.fix_threads()
    x = [torch.randn(128, 4096) for _ in range(3)]
    fixed, rotated = lambda *_: torch.softmax(x[0], dim=1), lambda *a: torch.softmax(a[0], dim=1)
    feed = Rotation([[t] for t in x], samples_per_pass=2)
    settled = noise.settle(lambda: timing.time_pass(fixed, rotated, "cpu", budget_s=1.0, max_reps=100,
                                                    feed=feed))
    stats = settled.kept.stats
    # The fast end of each (p10): what a busy shared host leaves least disturbed.
    ratio = stats.new.p10 / stats.ref.p10
    assert 2 / 3 < ratio < 1.5, (stats, settled.log)


# -- the hacks, evaluated ---------------------------------------------------------------------------


@pytest.mark.slow  # builds of its own (the hacks)
def test_an_honest_kernel_stays_correct_with_its_timed_outputs_checked(verdicts: dict[str, Verdict]):
    v = verdicts["honest"]
    assert v.status == "correct", f"{v.flags}\n{v.log}"
    assert kernel_flags(v.flags) == []
    rotation = v.timing["rotation"]
    assert rotation["sets"] >= 2 and rotation["checked"] >= 1 and rotation["bytes"] > 0
    assert v.timing["speed_of_light"]["floor_ms"] > 0
    assert v.sol_fraction is not None and v.sol_fraction > 0
    if v.timing["speed_of_light"].get("reliable", True):  # (peaks measured while other work held the
        assert v.sol_fraction < 1.25  # cores are too low and said so: then the fraction is not judged)
    clean = v.timing["reference_clean"]
    # The reference in the candidate's process, timed with the rotation, against its time before
    # any candidate ran: unchanged within noise (a factor of 2), where both were timed on a quiet host.
    if clean["measured"] and (v.timing.get("cpu_wait") or 0) <= noise.CPU_WAIT_MAX:
        assert 0.5 < v.ref_eager_ms / clean["median"] < 2.0, (v.ref_eager_ms, clean)


@pytest.mark.parametrize("name", ["stack", "count", "between", "repeated"])
@pytest.mark.slow  # builds of its own (the hacks)
def test_a_candidate_that_tells_timing_from_checking_is_caught_by_its_timed_outputs(
        verdicts: dict[str, Verdict], name: str):
    v = verdicts[name]
    assert v.status != "correct", f"{name}: {v.flags}\n{v.log}"
    if v.status == "flagged":
        assert any(f.startswith(("recheck: timed outputs", "refilled-inputs:")) for f in v.flags), v.flags
    if name == "repeated":  # caught by the check trials every time, not only when a sampled timed rep is
        # one the memo got wrong (on an H100 the samples alone missed it now and then)
        assert v.status == "incorrect" or any(f.startswith("refilled-inputs:") for f in v.flags), (
            v.status, v.flags, v.log)


@pytest.mark.slow  # builds of its own (the hacks)
def test_a_memo_keyed_on_pointer_and_version_never_hits(verdicts: dict[str, Verdict]):
    """Every call's input is copied in fresh (a new version counter, another buffer than the last
    call's): the memo never serves an answer, so it is timed at its own (eight-fold) kernel. A hit
    would be one clone, far below the honest kernel's time; its eight kernels are never below it,
    whatever load the host puts on the two evaluations (they run side by side)."""
    v, honest = verdicts["memo"], verdicts["honest"]
    assert v.status != "correct" or (v.time_p10_ms or 0) > (honest.time_p10_ms or 0), (
        v.status, v.time_p10_ms, honest.time_p10_ms)


@pytest.mark.parametrize(("name", "flag"), [
    ("wraps softmax", "tamper: the candidate rebinds torch.softmax"),
    ("one thread", "tamper: the candidate changed torch.get_num_threads()"),
])
@pytest.mark.slow  # builds of its own (the hacks)
def test_a_candidate_that_slows_the_reference_is_flagged(verdicts: dict[str, Verdict], name: str, flag: str):
    v = verdicts[name]
    assert v.status == "flagged", f"{v.flags}\n{v.log}"
    assert any(f.startswith(flag) for f in v.flags), v.flags


@pytest.mark.slow  # the honest kernel's build, shared with the slow tests above
def test_a_reference_slower_than_its_clean_time_is_not_believed():
    """The clean time (here one far below the real one, as a reference slowed by means the tamper
    check cannot see would show): the speedup is taken against the clean time, so slowing the
    reference gains nothing; on the cpu the slowed time is recorded, not flagged (host load slows
    it too: honest kernels were flagged so on a 2-core host while builds ran)."""
    clean = {"median": 1e-3, "p10": 1e-3, "p90": 1e-3, "lo": 1e-3, "hi": 1e-3}
    [v] = evaluate_all([KERNEL], ref_eager_clean=clean)
    assert v.ref_eager_ms == pytest.approx(1e-3)  # the speedup against the clean time
    assert v.timing["reference_clean"]["not_judged"].startswith("reference-slowed"), v.timing
    assert not any(f.startswith("reference-slowed") for f in v.flags), v.flags
    assert v.speedup_eager < 0.1, v.speedup_eager


@pytest.mark.slow  # the honest kernel's build, shared with the slow tests above
def test_a_time_below_the_cpu_byte_floor_is_flagged_and_fewer_flops_a_note(tmp_path: Path, build_cache: Path):
    """This host's peaks made tiny (a bandwidth of 1 MB/s: a floor of seconds), in a cache of its
    own that shares the session's builds: the honest kernel is below the floor."""
    cache = tmp_path / "cache"
    cache.mkdir()
    problem = load_problem("softmax")
    job = make_job(problem.path, KERNEL, problem.sizes_for("cpu"), backend="cpu", cache_dir=str(cache),
                   flops=None, bytes=None)
    key = build_key(job, {"TORCH_CUDA_ARCH_LIST": ""})  # (the compile pool's environment on the cpu)
    if (build_cache / key).is_dir():  # the session's build of the kernel, not built again
        shutil.copytree(build_cache / key, cache / key, symlinks=True)
    cores = noise.timer_cores()
    peaks = timing.cpu_peaks_file(str(cache), len(cores), ",".join(map(str, cores)))
    os.makedirs(os.path.dirname(peaks), exist_ok=True)
    Path(peaks).write_text(json.dumps({"bandwidth": 1e6, "fp32": 1e6, "by_size": {}}))
    [v] = evaluate_all([KERNEL], cache_dir=str(cache))
    assert v.status == "flagged", f"{v.flags}\n{v.log}"
    assert any(f.startswith("speed of light") and "must move" in f for f in v.flags), v.flags
    assert any(n.startswith("algorithmic: fewer operations") for n in v.notes), v.notes
    assert v.sol_fraction > 1.25
