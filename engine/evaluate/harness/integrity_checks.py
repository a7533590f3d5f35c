"""The registry of integrity checks: ways a candidate can pass the numeric check without doing the
work, each a named unit (what it catches, when it runs, the evidence it leaves on the verdict).

The evaluation child (engine.evaluate.child: evaluation, check, measure) gathers what the checks read
into a `Watch` and runs the checks of each phase from here, in the order registered; any flag
makes the verdict `flagged`. docs/verdicts.md lists every check by name (tests/evaluate/test_integrity_checks.py
holds the two to each other). Phases, in the order the child reaches them:

- ``import``: before the candidate's code is imported (captures only: what the candidate may change);
- ``load``: ModelNew built, nothing called yet; a flag here ends the evaluation, no call made;
- ``trial``: each check trial, after the candidate's call, before its outputs are compared;
- ``passed``: each check trial whose outputs passed the comparison;
- ``check``: the check trials all passed;
- ``timed``: the timed passes done, their input sets still held (a check may call the candidate on them);
- ``rechecked``: the sampled timed outputs checked against fp64 answers computed after them, and the
  reference's time in the candidate's process set against its clean time;
- ``after``: the end, before the verdict is made.

A check's `run(watch)` returns a `Finding` (flags, notes); its `capture(watch)`, where it has one,
runs at `capture_at` and is kept in `watch.captured[name]`. Imports only torch and the standard
library, lazily (the engine imports the child's modules to name build dirs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

PHASES = ("import", "load", "trial", "passed", "check", "timed", "rechecked", "after")


@dataclasses.dataclass
class Finding:
    """What a check found: flags (the verdict is `flagged`) and notes (said, not held against it)."""

    flags: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def add(self, other: Finding) -> None:
        self.flags += other.flags
        self.notes += other.notes


@dataclasses.dataclass
class Watch:
    """What the child knows of the evaluation at the phase it is in: what the checks read, and
    (library, sol_fraction) what they give back besides flags and notes."""

    job: Any
    device: str
    # The registry as it stood when the watch was made (before the candidate's code is imported):
    # a candidate that empties or edits the registry changes nothing the child runs.
    checks: tuple[IntegrityCheck, ...] = dataclasses.field(default_factory=lambda: tuple(REGISTRY))
    phase: str = ""
    captured: dict[str, Any] = dataclasses.field(default_factory=dict)
    model: Any = None  # the ModelNew instance
    call_new: Callable[..., Any] | None = None  # ModelNew called the harness's way
    # check trials
    trial: int = 0
    inputs: list[Any] = dataclasses.field(default_factory=list)
    outputs: list[Any] = dataclasses.field(default_factory=list)  # the trial's, flattened
    same_out: bool = True  # the same outputs on every trial so far
    varies: dict[str, bool] = dataclasses.field(default_factory=dict)  # the reference's (child.check)
    forward_s: list[float] = dataclasses.field(default_factory=list)  # the forward's, trials after the first
    ref_ops: Any = None  # the reference forward's OpProfile
    errs: dict[str, float] = dataclasses.field(default_factory=dict)
    native_errs: dict[str, float] = dataclasses.field(default_factory=dict)
    dtypes: list[Any] = dataclasses.field(default_factory=list)
    expected: Any = None  # the ReferenceChecks (engine.evaluate.harness.expected_cache)
    # the check trials' comparison of outputs with expected ones: (ok, errors, why not)
    compare: Callable[[Any, Any], tuple[bool, dict[str, float], str]] | None = None
    # timing
    stats: Any = None  # the kept pass's timing.PairStats
    rotation: Any = None
    recheck: tuple[bool, str, list[str]] = (True, "", [])  # the sampled timed outputs: passed, why not, flags
    reference_slowed: str | None = None  # judged: a quiet GPU host (engine.evaluate.child.measure)
    sol: Any = None  # the speed of light (timing.SpeedOfLight)
    # given back
    library: dict[str, Any] = dataclasses.field(default_factory=dict)
    sol_fraction: float | None = None


@dataclasses.dataclass(frozen=True)
class IntegrityCheck:
    """One integrity check: its name, what it catches (one line), the phases it runs in, the prefix
    of the flag (or note) it leaves, and its function."""

    name: str
    catches: str
    phases: tuple[str, ...]
    evidence: str
    run: Callable[[Watch], Finding]
    capture: Callable[[Watch], Any] | None = None
    capture_at: str = "import"
    backends: tuple[str, ...] = ("cpu", "cuda")


REGISTRY: list[IntegrityCheck] = []


def register(check: IntegrityCheck) -> IntegrityCheck:
    """Add `check` to the registry (after those registered before it: the order it runs in within
    each phase); a name registered twice is an error."""
    bad = [p for p in (*check.phases, check.capture_at) if p not in PHASES]
    if bad or any(c.name == check.name for c in REGISTRY):
        raise ValueError(f"integrity check {check.name!r}: unknown phase {bad} or name taken")
    REGISTRY.append(check)
    return check


def unregister(name: str) -> None:
    REGISTRY[:] = [c for c in REGISTRY if c.name != name]


def checks_for(phase: str, backend: str | None = None,
               checks: tuple[IntegrityCheck, ...] | list[IntegrityCheck] | None = None) -> list[IntegrityCheck]:
    """The checks (default: the registry's) that run in `phase` (on `backend`), in order."""
    return [c for c in (REGISTRY if checks is None else checks)
            if phase in c.phases and (backend is None or backend in c.backends)]


def capture(phase: str, watch: Watch) -> None:
    """Run the captures taken at `phase` (into watch.captured, by check name)."""
    for c in watch.checks:
        if c.capture is not None and c.capture_at == phase and watch.device in c.backends:
            watch.captured[c.name] = c.capture(watch)


def run(phase: str, watch: Watch) -> Finding:
    """Every check of `phase` on `watch`, in the order registered: their flags and notes together."""
    watch.phase = phase
    found = Finding()
    for c in checks_for(phase, watch.device, watch.checks):
        found.add(c.run(watch))
    return found


# -- the checks, in the order they run within each phase --------------------------------------


def _integrity() -> Any:
    from engine.evaluate.harness import integrity

    return integrity


def _memory() -> Any:
    from engine.evaluate.harness import memory

    return memory


def _harness_call(w: Watch) -> Finding:
    return Finding(_integrity().harness_overrides(w.model))


register(IntegrityCheck(
    "harness-call", "a ModelNew that overrides nn.Module.__call__ (the harness would call forward alone)",
    ("load",), "harness: ... overrides nn.Module.__call__", _harness_call))


def _outputs(w: Watch) -> Finding:
    return Finding(_integrity().check_outputs(w.outputs, w.inputs, w.device))


register(IntegrityCheck(
    "outputs", "outputs that are no plain tensor on the device, or share memory with an input",
    ("passed",), "output-type: / output-device: / aliasing:", _outputs))


def _torch_ops(w: Watch) -> Finding:
    integrity = _integrity()
    if w.phase == "passed":  # trial 0: one more call, on a copy of its inputs, under the op recorder
        if w.trial == 0:
            kept = w.captured["inputs-modified"]
            # a copy of the inputs as given: from the kept clones, or drawn again where they were
            # too large to clone (engine.evaluate.harness.memory.Kept keeps fingerprints of those)
            fresh = (integrity.snapshot(kept.clones) if not kept.large
                     else w.expected.trial_inputs(w.trial, w.device))
            w.captured["torch-ops"] = integrity.check_forward_ops(lambda: w.call_new(*fresh), w.device)
        return Finding()
    recorded = w.captured.get("torch-ops")
    if recorded is None:
        return Finding()
    new_ops = recorded[0]
    if w.forward_s:  # judged against the forward's time without the recorder
        new_ops = dataclasses.replace(new_ops, total_s=min(w.forward_s))
    flags, notes, w.library = integrity.judge_torch_ops(new_ops, w.ref_ops)
    return Finding(flags, notes)


register(IntegrityCheck(
    "torch-ops", "torch doing the reference's work (a fallback), judged by the reference's op times;"
    " a library's main op is a mark, an epilogue a note", ("passed", "check"), "torch-ops:", _torch_ops))


def _host_threads(w: Watch) -> Finding:
    if w.phase == "trial":
        return Finding(_integrity().check_threads(w.captured["host-threads"]))
    recorded = w.captured.get("torch-ops")  # trial 0's recorded call counts the threads it starts
    return Finding(list(recorded[1])) if w.trial == 0 and recorded is not None else Finding()


register(IntegrityCheck(
    "host-threads", "Python threads the forward starts or leaves running (work out of the timed window"
    " and out of the op recorder's sight)", ("trial", "passed"), "host threads:", _host_threads,
    capture=lambda w: _integrity().live_threads(), capture_at="trial"))


def _escaping_work(w: Watch) -> Finding:
    from engine.evaluate.harness import timing

    return Finding(timing.check_escaping_work(lambda *a: w.call_new(*a), w.stats.new.median, feed=w.rotation))


register(IntegrityCheck(
    "escaping-work", "device work on a stream the CUDA events do not see (still running after they end)",
    ("timed",), "escaping work:", _escaping_work, backends=("cuda",)))


def _inputs_modified(w: Watch) -> Finding:
    if w.phase == "rechecked":
        return Finding(list(w.recheck[2]))
    return Finding([f"inputs-modified: the candidate changed input {i}"
                    for i in w.captured["inputs-modified"].changed(w.inputs)])


register(IntegrityCheck(
    "inputs-modified", "a candidate that writes its inputs (in a check trial or a timed rep)",
    ("trial", "rechecked"), "inputs-modified:", _inputs_modified,
    capture=lambda w: _memory().Kept(w.inputs), capture_at="trial"))


def _reference_slowed(w: Watch) -> Finding:
    return Finding([w.reference_slowed] if w.reference_slowed else [])


register(IntegrityCheck(
    "reference-slowed", "a reference slowed in the candidate's process against its time where no candidate"
    " ran (flagged on a quiet GPU; else the speedup is taken against the clean time)",
    ("rechecked",), "reference-slowed:", _reference_slowed))


def _recheck(w: Watch) -> Finding:
    ok, reason, _ = w.recheck
    return Finding([] if ok else [f"recheck: {reason}"])


register(IntegrityCheck(
    "recheck", "timed outputs that differ from the checked ones (sampled timed reps against fp64 answers"
    " computed after they exist)", ("rechecked",), "recheck:", _recheck))


def _input_independent(w: Watch) -> Finding:
    if w.same_out and w.job.trials > 1 and w.varies.get("at_all"):
        return Finding(["input-independent: ModelNew returns the same output for every input drawn,"
                        " while the reference's output changes with its inputs"])
    return Finding()


register(IntegrityCheck(
    "input-independent", "the same output for every input drawn while the reference's changes (a constant)",
    ("check",), "input-independent:", _input_independent))


def _refilled_inputs(w: Watch) -> Finding:
    if w.job.trials < 2 or w.expected is None or w.call_new is None or w.compare is None:
        return Finding()
    return Finding(_integrity().check_refilled_inputs(w.call_new, w.expected, w.device, w.compare))


register(IntegrityCheck(
    "refilled-inputs", "an answer kept by the input's address (its pointer): trial 1's input buffers refilled"
    " in place with trial 2's values must get trial 2's answer", ("check",), "refilled-inputs:",
    _refilled_inputs))


def _precision(w: Watch) -> Finding:
    return Finding(_integrity().precision_flags(w.job, w.errs, w.native_errs, w.dtypes))


register(IntegrityCheck(
    "precision", "an fp32 problem answered with 16-bit or TF32 arithmetic (errs like it against fp64)",
    ("check",), "precision:", _precision))


def _harness(w: Watch) -> Finding:
    return Finding(_integrity().check_harness(w.captured["harness"]))


register(IntegrityCheck(
    "harness", "harness functions (clocks, allclose, nn.Module.__call__, ...) rebound by the candidate",
    ("check", "after"), "harness: ... was replaced by the candidate", _harness,
    capture=lambda w: _integrity().capture_harness()))


def _forward_replaced(w: Watch) -> Finding:
    return Finding(_integrity().check_forward_unchanged(w.model, w.captured["forward-replaced"]))


register(IntegrityCheck(
    "forward-replaced", "ModelNew.forward replaced while it runs (checked and timed calls may differ)",
    ("after",), "harness: ... forward was replaced", _forward_replaced,
    capture=lambda w: _integrity().bound_forward(w.model), capture_at="load"))


def _tamper(w: Watch) -> Finding:
    from engine.evaluate.harness import tamper

    snap = w.captured["tamper"]
    # After the check trials, what the candidate changed is put back before the reference is timed.
    return Finding(tamper.check_and_restore(snap) if w.phase == "check" else tamper.check(snap))


def _tamper_capture(w: Watch) -> Any:
    from engine.evaluate.harness import tamper

    return tamper.capture()


register(IntegrityCheck(
    "tamper", "torch functions or settings the reference relies on changed by the candidate (rebound ops,"
    " threads, cuDNN/TF32 flags, active modes)", ("check", "after"), "tamper:", _tamper,
    capture=_tamper_capture))


def _reference_cache(w: Watch) -> Finding:
    from engine.evaluate.harness import expected_cache

    if w.expected.intact():
        return Finding()
    expected_cache.drop(w.expected.key)
    return Finding(["reference-cache: the cached trial inputs or expected outputs changed during this"
                    " evaluation (the candidate wrote memory it does not own)"])


register(IntegrityCheck(
    "reference-cache", "the cached trial inputs or fp64 answers written by the candidate (memory it does"
    " not own)", ("after",), "reference-cache:", _reference_cache))

SOL_FLOOR = 1.25  # flagged when faster than this many times the measured speed of light


def _speed_of_light(w: Watch) -> Finding:
    from engine.evaluate.harness import timing

    flags, notes, w.sol_fraction = timing.judge_speed_of_light(w.sol, w.stats.new.median, SOL_FLOOR)
    return Finding(flags, notes)


register(IntegrityCheck(
    "speed-of-light", "a time below the floor of the bytes the problem must move at the measured peak"
    " (fewer FLOPs than the reference: a note, `algorithmic`)", ("after",), "speed of light:",
    _speed_of_light))


def markdown_table() -> str:
    """The registry as docs/verdicts.md lists it (tests/evaluate/test_integrity_checks.py compares them):
    `python -m engine.evaluate.harness.integrity_checks` prints it."""
    rows = ["| check | what it catches | runs in | evidence |", "|---|---|---|---|"]
    for c in REGISTRY:
        where = ", ".join(c.phases) + ("" if c.backends == ("cpu", "cuda") else f" ({', '.join(c.backends)})")
        evidence = " / ".join(f"`{e.strip()}`" for e in c.evidence.split(" / "))
        rows.append(f"| `{c.name}` | {c.catches} | {where} | {evidence} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
