"""How long one evaluation may hold its device before it is killed (issue 36 item 3).

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
  CUDA context, cuDNN/cuBLAS handles, the first calls' autotuning), 300 s for a Triton solution on
  a GPU (its JIT may have to run under the lock: child_load.TRITON_WARMUP_S is 240 s).
- Never over CAP_S.
- No reference time known yet (the first evaluation of a problem on a host): UNKNOWN_S, the old limit.

`--eval-timeout SECONDS` (run, suite, eval) replaces it. The limit and where it came from are in
every verdict's `timing["eval_limit"]`, and a timed-out verdict's log says them.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.evaluate.noise import MAX_RETIMES

FLOOR_S = {"cpu": 60.0, "cuda": 120.0}
TRITON_FLOOR_S = 300.0  # Triton: its JIT and autotuning on a GPU, its interpreter (slow) on the cpu
CAP_S = 900.0
UNKNOWN_S = 300.0  # no reference time known yet
FACTOR = 4.0
SLOWER_X = 20.0  # a correct candidate this many times slower than the reference still finishes
WARMUP_AND_LEAST_REPS = 3 + 5  # engine.evaluate.timing.WARMUP + MIN_REPS (timing imports torch)
EXTRA_CALLS = 7 + 12  # the escaping-work check's calls, the sampled timed outputs' fp64 answers


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


def eval_limit(backend: str, ref_ms: float | None, *, time_budget_s: float, trials: int,
               language: str = "", given_s: float | None = None) -> EvalLimit:
    """The limit for one evaluation: `given_s` (the flag) when set, else from `ref_ms`, the
    reference's eager median (None: unknown)."""
    if given_s:
        return EvalLimit(float(given_s), "flag", f"--eval-timeout {given_s:g}")
    floor = TRITON_FLOOR_S if language == "triton" else FLOOR_S.get(backend, 60.0)  # cpu: interpreted
    if not ref_ms or ref_ms <= 0:
        return EvalLimit(max(UNKNOWN_S, floor), "unknown",
                         f"no reference time known yet: {max(UNKNOWN_S, floor):g} s; --eval-timeout sets it")
    need = needed_s(ref_ms, time_budget_s, trials)
    seconds = round(min(CAP_S, max(floor, FACTOR * need)), 1)
    return EvalLimit(seconds, "auto",
                     f"auto: {FACTOR:g}x the {need:.3g} s a correct candidate needs at the reference's"
                     f" {ref_ms:.4g} ms, at least {floor:g} s, at most {CAP_S:g} s; --eval-timeout sets it")
