"""The evaluation child's timing: the candidate against its reference, interleaved, settled
against noise (engine.evaluate.harness: timing, noise), and rechecked on the timed inputs;
the reference alone (eager and torch.compile) and the timer's agreement with itself; the
evaluation's phases and the least device time a verdict needs.

Runs untrusted code in the child's process (engine.evaluate.child.evaluation); torch and the standard
library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.evaluate.child.check import caller, compare, noise_outputs
from engine.evaluate.child.load import format_exc, make_inputs, reference_on_inputs, to_device
from engine.evaluate.harness import clocks, integrity_checks
from engine.evaluate.jobs import EvalJob


class Phases:
    """Seconds spent per phase of one evaluation (load, reference, jit, check, time, other),
    from laps: each lap's time goes to the phase it names."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = clocks.perf_counter()

    def lap(self, name: str) -> None:
        now = clocks.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._last
        self._last = now

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.seconds.items()}


def timing_floor_s(stats: Any, trials: int) -> float:
    """The least device time a verdict needs: every warm-up and timed rep of the pair (reference
    and candidate, interleaved) plus one candidate call per check trial."""
    from engine.evaluate.harness import timing

    return ((timing.WARMUP + stats.reps) * (stats.ref.median + stats.new.median)
            + trials * stats.new.median) / 1e3


def run_warm(job: EvalJob) -> dict[str, Any]:
    """Mode "warm": compile the reference under torch.compile and stop. Many warm-ups run at once
    in the compile pool; each timing (engine.evaluate.child.reference) then finds torch.compile's
    caches (FX graph, Triton) filled."""
    import torch

    from engine.evaluate.harness import timing

    _, model, inputs = reference_on_inputs(job)
    result: dict[str, Any] = {"device": timing.device_name(job.backend), "gpu": timing.device_info(job.backend),
                              "sizes": dict(job.sizes), "torch_version": torch.__version__, "log": ""}
    with torch.no_grad():
        t0 = clocks.perf_counter()
        try:
            torch.compile(model)(*inputs)
            result["compile_s"] = clocks.perf_counter() - t0
        except Exception as exc:
            result["log"] = f"torch.compile failed: {format_exc(exc)}"
    return result


def reference_rotation(job: EvalJob, device: str, inputs: Any) -> Any:
    """The reference's timed input sets, rotated as an evaluation rotates a candidate's
    (engine.evaluate.harness.rotation): the reference alone is timed on the same kind of feed."""
    from engine.evaluate.child.load import precision_dtype
    from engine.evaluate.harness import rotation as rotation_module
    from engine.evaluate.loading import load_module_from_path

    problem = load_module_from_path(job.problem_path, job.sizes)
    cast = precision_dtype(job)
    return rotation_module.Rotation.draw(list(inputs), lambda: make_inputs(problem, device, cast), device, 0,
                                         job.time_budget_s, samples=0)


def run_agreement(job: EvalJob) -> dict[str, Any]:
    """The timer checked against itself and against triton's do_bench on the reference: our
    median twice (run to run), do_bench's median (both flush the L2 before every call)."""
    import torch

    from engine.evaluate.harness import timing

    device, model, inputs = reference_on_inputs(job)
    result: dict[str, Any] = {"device": timing.device_name(job.backend), "sizes": dict(job.sizes)}
    with torch.no_grad():
        def call() -> Any:
            return model(*inputs)

        runs = [timing.time_pair(call, call, device, budget_s=job.time_budget_s, max_reps=job.max_reps)
                for _ in range(2)]
        result["ours_ms"] = [r.new.median for r in runs]
        result["ours_ref_ms"] = [r.ref.median for r in runs]
        try:
            from triton.testing import do_bench
        except ImportError:
            result["do_bench_ms"] = None
        else:
            result["do_bench_ms"] = float(do_bench(call, warmup=25, rep=int(job.time_budget_s * 1000),
                                                   return_mode="median"))
    return result


REF_SLOWED = 1.5  # the in-process reference this many times slower than the clean one: flagged
CLEAN_BUDGET_S = 1.0  # at most this long timing the reference alone, before the candidate is imported

_candidate_imported = False  # whether a candidate's code was imported in this process (worker)


@dataclass
class BeforeCandidate:
    """What the evaluation prepares for timing before the candidate is imported: the rotation of
    input sets (engine.evaluate.harness.rotation), the reference's clean time (None: unknown; with
    `measured`: measured here), the speed of light (engine.evaluate.harness.timing.SpeedOfLight)."""

    rotation: Any
    clean: dict[str, Any] | None
    sol: Any


def before_candidate(job: EvalJob, problem: Any, ref: Any, checks: Any, device: str,
                     cast: Any) -> BeforeCandidate:
    """Draw the timed input sets (each from its own secret seed), time the reference alone when
    the job brings no clean time and no candidate has been imported in this process yet, and
    measure the speed of light: all before the candidate's code runs. Marks the process as one
    where a candidate is about to run."""
    import secrets

    import torch

    from engine.evaluate.harness import noise, outbox, timing
    from engine.evaluate.harness import rotation as rotation_module

    global _candidate_imported
    with torch.no_grad():
        torch.manual_seed(secrets.randbits(62))
        first = list(make_inputs(problem, device, cast))
        floor = floor_bytes(job.bytes, first, ref, checks.out_bytes)
        out_bytes = sum(checks.out_bytes)
        # (`first` is handed over: a lean rotation lets it go before drawing its own sets)
        rotation = rotation_module.Rotation.draw(first, lambda: make_inputs(problem, device, cast),
                                                 device, out_bytes, job.time_budget_s,
                                                 cap=checks.plan.rotation_bytes if checks.plan else None)
        rotation.protect(ref)  # (its outputs are poisoned after each call: never its weights)
        clean = dict(job.ref_eager_clean) if job.ref_eager_clean else None
        if clean is None and not _candidate_imported:
            call_ref = caller(ref)
            waited, t0 = noise.cpu_waited_s() if device != "cuda" else None, clocks.perf_counter()
            stats = timing.time_one(lambda *a: call_ref(*a), device, min(job.time_budget_s / 2, CLEAN_BUDGET_S),
                                    job.max_reps, feed=rotation)
            after, wall = noise.cpu_waited_s() if waited is not None else None, clocks.since(t0)
            wait = (after - waited) / wall if waited is not None and after is not None and wall > 0 else 0.0
            # Kept for later jobs (engine.evaluate.host.evaluator) only when no other work slowed it.
            clean = {"median": stats.median, "p10": stats.p10, "p90": stats.p90, "lo": stats.lo, "hi": stats.hi,
                     "measured": wait <= noise.CPU_WAIT_MAX}
            outbox.tell("reference_clean", clean)  # to the judge, which keeps it for later jobs
    sol = timing.speed_of_light(job.flops, floor, checks.dtypes[0] if checks.dtypes else None, device,
                                job.cache_dir)
    del first
    rotation.park()  # a lean rotation's sets: drawn again when timing starts (engine.evaluate.harness.rotation)
    _candidate_imported = True
    return BeforeCandidate(rotation, clean, sol)


def floor_bytes(declared: float | None, inputs: Any, ref: Any, out_bytes: list[int]) -> float | None:
    """The bytes any correct implementation must move: the problem's own count (`problem.cost`:
    its declared formula, else inputs + parameters + outputs at these sizes), and never more than
    the inputs, the reference's parameters and the outputs counted here (a formula that
    overstates them does not raise the floor)."""
    import torch

    from engine.evaluate.harness.rotation import tensor_bytes

    counted = tensor_bytes(list(inputs)) + sum(out_bytes)
    if isinstance(ref, torch.nn.Module):
        counted += sum(p.numel() * p.element_size() for p in ref.parameters())
    if declared and counted:
        return float(min(declared, counted))
    return float(declared or counted) or None


def judge_reference(inproc: Any, clean: dict[str, Any] | None, cpu_wait: float | None = None) -> str | None:
    """The flag for a reference slowed in the candidate's process: its in-process median over
    REF_SLOWED times the clean one (over REF_SLOWED / (1 - w) where the cpu timer waited for a core
    a fraction w of the time, w at most 0.5: other work on the host slows it too), and its interval
    wholly above the clean interval."""
    if not clean or not clean.get("median") or inproc.median <= 0:
        return None
    ratio = inproc.median / clean["median"]
    limit = REF_SLOWED / (1 - min(max(cpu_wait or 0.0, 0.0), 0.5))
    if ratio > limit and inproc.lo > clean.get("hi", clean["median"]):
        return (f"reference-slowed: the reference takes {inproc.median:.4g} ms in the candidate's process"
                f" ({inproc.lo:.4g}-{inproc.hi:.4g}) against {clean['median']:.4g} ms where no candidate ran"
                f" ({clean.get('lo', clean['median']):.4g}-{clean.get('hi', clean['median']):.4g}):"
                f" {ratio:.2f}x, over {limit:.3g}x")
    return None


def check_samples(rotation: Any, ref: Any, ref64: Any, device: str, atol: float, rtol: float,
                  dtypes: list[Any], answers: str = "fp64",
                  noise: frozenset[int] = frozenset()) -> tuple[bool, str, list[str], int]:
    """The sampled timed outputs against the reference's answers on their sets (fp64, or the
    reference's own precision where the memory plan says so: `answers`), computed now, after the
    candidate's outputs exist, one set at a time. A sample that kept a window of a large output
    is compared on that window. (all passed, why not, flags, samples checked). A timed call that
    changed its inputs is flagged (`inputs-modified`)."""
    import torch

    flags: list[str] = list(rotation.violations)  # each timed call's own checks (rotation._timed_call)
    for sample in rotation.samples:
        if not sample.inputs_unchanged:
            where = f"timed rep {sample.rep + 1} of {sample.reps} (pass {sample.timing_pass})"
            flags.append(f"inputs-modified: the candidate changed its inputs in {where}")
    by_set: dict[int, list[Any]] = {}
    for sample in rotation.samples:
        by_set.setdefault(sample.set_index, []).append(sample)
    for index, samples in sorted(by_set.items()):
        expected = None
        passed: list[list[Any]] = []  # outputs that passed (equal ones need no compare)
        for sample in samples:
            where = f"timed rep {sample.rep + 1} of {sample.reps} (pass {sample.timing_pass})"
            if sample.outputs is None:
                return False, f"timed outputs: {where} returned no tensor", flags, len(rotation.samples)
            if any(_identical(o, sample.outputs) for o in passed):
                continue  # bit for bit an output of this set that passed
            if expected is None:
                if answers == "fp64":
                    expected = caller(ref64)(*to_device(rotation.sets[index], device, torch.float64))
                else:
                    # (on the set itself: it is not used again after its answers; no copy of it)
                    expected = caller(ref)(*rotation.sets[index])
            ok, _, reason = compare(sample.outputs, _windowed(expected, sample), atol, rtol,
                                    dtypes, noise=noise)
            if not ok:
                return False, f"timed outputs: {where}: {reason}", flags, len(rotation.samples)
            passed.append(sample.outputs)
        del expected
    return True, "", flags, len(rotation.samples)


def _windowed(expected: Any, sample: Any) -> Any:
    """The expected outputs cut as `sample` kept its outputs (a window of a large one)."""
    from engine.evaluate.child.check import flatten

    flat = flatten(expected)
    if not sample.windows:
        return flat
    return [t if start is None or i >= len(sample.outputs)
            else t.reshape(-1)[start:start + sample.outputs[i].numel()]
            for i, (t, start) in enumerate(zip(flat, sample.windows, strict=False))]


def _identical(a: list[Any], b: list[Any]) -> bool:
    import torch

    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
                                    for x, y in zip(a, b, strict=True))


def time_candidate(job: EvalJob, ref: Any, ref64: Any, watch: integrity_checks.Watch, pre: BeforeCandidate,
                   gpu: dict[str, Any] | None, dtypes: list[Any]) -> tuple[Any, list[str], dict[str, Any]]:
    """Time the reference and the candidate interleaved on the rotation's input sets (`pre`,
    engine.evaluate.harness.rotation; engine.evaluate.harness.noise settles the passes; on a GPU, `gpu`'s probe
    watches other processes), look for work escaping the CUDA events, check the sampled timed
    outputs against the fp64 reference, and set the in-process reference time against the clean
    one (a reference slowed in this process is flagged, and the clean time is the speedup's then).
    The integrity checks of the `timed` and `rechecked` phases (engine.evaluate.harness.integrity_checks)
    judge what was seen, on `watch` (its `call_new`, the candidate called the harness's way).
    (the settled passes, their flags, a record for the verdict's timing). Raises what the candidate raises."""
    import dataclasses

    from engine.evaluate.harness import gpuload, memory, noise, timing

    record: dict[str, Any] = {}
    device, call_new = watch.device, watch.call_new
    assert call_new is not None
    rotation = pre.rotation
    probe = gpuload.probe_for(gpu) if device == "cuda" else None
    call_ref = caller(ref)
    rotation.ensure()
    settled = noise.settle(lambda: timing.time_pass(
        lambda *a: call_ref(*a), lambda *a: call_new(*a), device,
        budget_s=job.time_budget_s, max_reps=job.max_reps, probe=probe, feed=rotation))
    stats = watch.stats = settled.kept.stats
    watch.rotation = rotation
    memory.mark("timing", device)
    flags = integrity_checks.run("timed", watch).flags
    memory.mark("timed-checks", device)
    t0 = clocks.perf_counter()
    ok, reason, sample_flags, checked = check_samples(rotation, ref, ref64, device, job.atol, job.rtol, dtypes,
                                                      watch.expected.answers if watch.expected else "fp64",
                                                      noise_outputs(watch.expected, job.rtol))
    watch.recheck = (ok, reason, sample_flags)
    record["rotation"] = {**rotation.cost(), "checked": checked, "check_s": round(clocks.since(t0), 4)}
    rotation.release()
    if pre.clean:
        clean = {k: v for k, v in pre.clean.items() if k != "measured"}
        # measured: timed here, before the candidate was imported, on a quiet host (then kept)
        record["reference_clean"] = {**{k: round(v, 6) for k, v in clean.items()},
                                     "measured": bool(pre.clean.get("measured"))}
        slowed = judge_reference(stats.ref, clean, settled.kept.cpu_wait)
        quiet = not settled.kept.contention and (settled.kept.cpu_wait or 0.0) <= noise.CPU_WAIT_MAX
        if quiet and stats.ref.hi * REF_SLOWED < clean.get("lo", clean["median"]):
            # A kept clean time far above a quiet in-process one was taken on a busy host: the
            # evaluator drops it, and the next fresh worker measures it again.
            record["reference_clean"]["stale"] = True
        if slowed:
            if quiet and device == "cuda":
                watch.reference_slowed = slowed  # flagged (integrity_checks: reference-slowed)
            else:  # other work on the host or the GPU may be what slowed it (on a 2-core cpu host
                # honest kernels were flagged this way while builds ran, the timer's core waits
                # notwithstanding): not flagged, but the speedup is not taken against the slowed
                # time either, so slowing the reference gains a candidate nothing
                record["reference_clean"]["not_judged"] = slowed
            record["reference_clean"]["speedup_against_clean"] = True
            clean_stats = timing.Stats(clean["median"], clean.get("p10", clean["median"]),
                                       clean.get("p90", clean["median"]), clean.get("lo", clean["median"]),
                                       clean.get("hi", clean["median"]))
            kept = dataclasses.replace(settled.kept, stats=dataclasses.replace(stats, ref=clean_stats))
            passes = [kept if p is settled.kept else p for p in settled.passes]
            settled = dataclasses.replace(settled, kept=kept, passes=passes)
    if pre.sol.floor_ms or pre.sol.flops_ms:
        record["speed_of_light"] = {k: v for k, v in pre.sol.to_dict().items() if v is not None}
    watch.stats = settled.kept.stats
    flags += integrity_checks.run("rechecked", watch).flags
    return settled, flags, record
