"""How long one evaluation may hold its device before it is killed.

A fixed limit (300 s, as before) let a looping candidate hold the device's host lock, and every
evaluation of every ktree process queued behind it, for five minutes. The limit now follows the
problem: the time the checks and the timing of a *correct* candidate need, from the reference's
measured eager time, times a generous factor, within a floor and a cap.

- What a correct candidate needs (`needed_s`): every timing pass takes its time budget
  (`EvalJob.time_budget_s`) or, for slow calls, its warm-up and least reps; up to 1 + MAX_RETIMES
  passes; the check trials; a candidate up to SLOWER_X times slower than the reference (slower
  than that it is no use as a kernel, and a limit need not wait for it).
- FACTOR x that, never under the floor: the fixed work of an evaluation (load, the fp64 answers of
  the checks, the clean reference time, the cpu peaks once per host: ~5 s of CPU on an idle 2-core
  host) on a host 10x loaded by other work is ~50 s, hence 60 s on the cpu; 120 s on a GPU (its
  CUDA context, cuDNN/cuBLAS handles, the first calls' autotuning); a kernel language may set its
  own (engine.evaluate.languages: Triton's is 300 s, its JIT may run under the lock for up to
  240 s on a GPU, and its interpreter is slow on the cpu).
- The problem's size on top of the floor (a problem may take gigabytes): drawing the trials' and the timed sets'
  inputs, the answers, the streamed comparisons and fingerprints pass over its bytes (inputs and
  outputs, `EvalJob.bytes`) about SIZE_PASSES times, at SIZE_RATE bytes per second (a GPU's
  memory at a tenth of its speed, a cpu's at a few GB/s): a 13 GB ReLU gets 26 s more on a GPU.
- Never over CAP_S (plus the size's share: a problem of gigabytes is not cut by the cap).
- No reference time known yet (the first evaluation of a problem on a host): UNKNOWN_S, the old limit.

`--eval-timeout SECONDS` (run, suite, eval) replaces it. The limit and where it came from are in
every verdict's `timing["eval_limit"]`, and a timed-out verdict's log says them.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.evaluate.harness.noise import ESCAPE_REPS, MAX_RETIMES, MIN_REPS, SAMPLES, WARMUP

FLOOR_S = {"cpu": 60.0, "cuda": 120.0}
CAP_S = 900.0
UNKNOWN_S = 300.0  # no reference time known yet
FACTOR = 4.0
SLOWER_X = 20.0  # a correct candidate this many times slower than the reference still finishes
WARMUP_AND_LEAST_REPS = WARMUP + MIN_REPS
SIZE_PASSES = 200
SIZE_RATE = {"cpu": 2e9, "cuda": 1e11}  # bytes per second a pass over the problem's memory takes at worst
EXTRA_CALLS = ESCAPE_REPS + SAMPLES * (1 + MAX_RETIMES)  # the escaping-work check's calls, the
# sampled timed outputs' fp64 answers


@dataclass(frozen=True)
class EvalLimit:
    """The seconds an evaluation may run, and why: `source` is "flag" (--eval-timeout), "auto"
    (from the reference's time) or "unknown" (no reference time yet)."""

    seconds: float
    source: str
    why: str

    def to_dict(self) -> dict[str, object]:
        return {"s": round(self.seconds, 3), "source": self.source, "why": self.why}

    def killed(self) -> str:
        """A timed-out verdict's first line."""
        return f"killed after {round(self.seconds, 1):g} s: the evaluation's time limit ({self.why})"


def needed_s(ref_ms: float, time_budget_s: float, trials: int) -> float:
    """The seconds the checks and the timing of a correct candidate up to SLOWER_X times slower
    than the reference take at most."""
    passes = 1 + MAX_RETIMES
    pair_s = ref_ms / 1e3 * (1 + SLOWER_X)  # one reference call and one candidate call
    per_pass = max(time_budget_s, WARMUP_AND_LEAST_REPS * pair_s)
    return passes * per_pass + (trials + EXTRA_CALLS) * pair_s


def size_s(backend: str, nbytes: float | None) -> float:
    """The seconds a problem of `nbytes` (inputs and outputs) adds to the fixed work."""
    return SIZE_PASSES * max(nbytes or 0.0, 0.0) / SIZE_RATE.get(backend, SIZE_RATE["cpu"])


def eval_limit(backend: str, ref_ms: float | None, *, time_budget_s: float, trials: int,
               floor_s: float | None = None, eval_timeout: float | None = None,
               nbytes: float | None = None) -> EvalLimit:
    """The limit for one evaluation: `eval_timeout` (the flag) when set, else from `ref_ms`, the
    reference's eager median (None: unknown). `floor_s`: the kernel language's own floor, where it
    has one (engine.evaluate.languages: Triton's JIT and interpreter), else the backend's; the
    problem's size (`nbytes`, its inputs and outputs) adds to it."""
    if eval_timeout:
        return EvalLimit(float(eval_timeout), "flag", f"--eval-timeout {eval_timeout:g}")
    size = round(size_s(backend, nbytes), 1)
    said = f" + {size:g} s for its {nbytes / 1e9:.3g} GB" if nbytes and size >= 1 else ""
    base = floor_s or FLOOR_S.get(backend, 60.0)
    floor = base + (size if said else 0.0)
    if not ref_ms or ref_ms <= 0:
        seconds = max(UNKNOWN_S, base) + (size if said else 0.0)
        return EvalLimit(seconds, "unknown",
                         f"no reference time known yet: {max(UNKNOWN_S, base):g} s{said};"
                         " --eval-timeout sets it")
    need = needed_s(ref_ms, time_budget_s, trials)
    seconds = round(min(CAP_S + (size if said else 0.0), max(floor, FACTOR * need)), 1)
    return EvalLimit(seconds, "auto",
                     f"auto: {FACTOR:g}x the {need:.3g} s a correct candidate needs at the reference's"
                     f" {ref_ms:.4g} ms, at least {base:g} s{said}, at most {CAP_S:g} s;"
                     " --eval-timeout sets it")
