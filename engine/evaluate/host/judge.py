"""The judge the candidate cannot reach (docs/judge.md): its clean process, its fresh-input calls, its clock,
and the verdict composed here, in the engine's process.

What the candidate's process reports once the candidate's code ran there is a claim: that code can
rebind ktree's own modules, walk frames to the timer's samples, hook every module of the process, or
return lazy outputs. So after a `correct` claim the judge checks it from outside:

For each of AUDIT_CALLS fresh seeds, in turn:

1. Its clean process (engine.evaluate.child.judge_process: never imports a candidate) calls the
   reference on inputs drawn from the seed and keeps the outputs as answers; the judge times the
   round trip on its own clock (`ref_ms`), the process its own call (`inner_ms`) and the making of
   the reference on the job's first call (`setup_ms`): the rest is what drawing the inputs, handing
   the outputs over and the pipe cost.
2. Then the candidate's process gets the seed (it has never seen it; its verdict is in), calls the
   candidate once and hands the outputs over as bytes inside the call (engine.evaluate.child.audit);
   the judge times the round trip (`cand_ms`).
3. The clean process compares the bytes with its answers (engine.evaluate.child.check.compare).

Where those calls cannot allow the claimed time (`disbelieved`), more pairs follow, up to
MOST_CALLS: a host's load only ever adds to a round trip, so a candidate slowed by its neighbours
(two test workers on two cores put 4-20 ms on an honest 0.2 ms kernel's calls) meets a quiet pair
sooner or later, while work the candidate hid from its own clock is in every call.

`compose` then decides: an output that differs on fresh inputs is `incorrect`; a claimed time that
the judge's clock cannot allow (below `(min cand_ms - min overhead) / BELIEF - slack`, CUDA_BELIEF on a GPU) is
not believed: the outside figure stands and the speedups are taken against it, with a note
(`outside-clock: ...`; not a flag: a kernel's honest first-call costs on fresh inputs can do it
too); a claimed reference time above the one measured where no candidate ran is
not believed either: the speedups are taken against the clean one. Outputs above HANDOVER_BYTES are
handed over as one window that the judge picks with the seed (on a GPU 32 MiB: a candidate that
could compute that window alone, and knew which calls are the judge's, would pay only for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import secrets
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from engine.evaluate.host import clean_reference
from engine.evaluate.host.sandbox import Sandbox, evaluation_binds, kill_tree, make_workdir
from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import Verdict

AUDIT_CALLS = 3
MOST_CALLS = 15  # (an extra pair costs ~10 ms on the cpu; a big model's more on a GPU: the deadline holds)
# The most of each output handed over a call (a window the judge picks with the seed): on a GPU the
# copy and the judge's compare are held time.
HANDOVER_BYTES = {"cpu": 256 * 2**20, "cuda": 32 * 2**20}
# A claimed time is believed down to the outside figure over BELIEF, less SLACK_MS: an honest median
# of flushed, rotated calls against one call on freshly drawn inputs timed from another process.
BELIEF = 2.0
# On a GPU the outside figure carries several ms that no step explains (writing the 32 MiB window
# alone varied 20-34 ms a call on an H200): an honest 0.26 ms Triton SiLU read 3.47 ms from outside
# after 15 pairs, a forged 0.18 ms claim on a 6.7 ms kernel 13.1 ms. There a claim is believed down to
# the figure over CUDA_BELIEF: a forgery many times under its kernel's time is still not.
CUDA_BELIEF = 8.0
# On a GPU, a Triton launch's host work under a loaded host (16 evaluations at once) costs a single
# call tenths of a millisecond that its events do not see.
SLACK_MS = {"cpu": 0.3, "cuda": 0.5}
# On the cpu, an outside figure that stands says the host was loaded where the reference's own call in
# the judge's clean process took over LOADED times its clean median (a 16x256 softmax took 7.5-12 ms
# there under a full test run and more on two cores): the figure may be high then.
LOADED = 3.0
# A claimed reference time is believed up to this times the clean one's upper end.
REF_BELIEF = 1.5
START_TIMEOUT_S = 300.0

CallCandidate = Callable[[dict[str, Any], float], Awaitable[tuple[dict[str, Any] | None, float]]]


class Judge:
    """The clean process of one device, started on first use, started again for a problem file it
    cannot see (strict isolation binds the files it was started with)."""

    def __init__(self, env: dict[str, str], sandbox: Sandbox, cache_dir: str, outputs_dir: Path):
        self.env = dict(env)  # the device's (its cores, its GPU), as the candidate's process has them
        self.sandbox = sandbox
        self.cache_dir = cache_dir
        self.outputs_dir = outputs_dir  # where the candidate's process hands its outputs over (read-only here)
        self.proc: asyncio.subprocess.Process | None = None
        self._problems: tuple[str, ...] = ()
        self._dir = make_workdir("judge")
        self._lock = asyncio.Lock()  # one audit at a time
        self._starting = asyncio.Lock()

    async def ready(self, problem_path: str) -> str | None:
        """The process, started if needed; None when ready, else why not. One start at a time (an
        early start and a job's may ask at once)."""
        async with self._starting:
            return await self._ready(problem_path)

    async def _ready(self, problem_path: str) -> str | None:
        if self.proc is not None and (self.proc.returncode is not None or problem_path not in self._problems):
            await self.stop()
        if self.proc is not None:
            return None
        problems = tuple(dict.fromkeys((*self._problems, problem_path)))
        cache_ro, _ = evaluation_binds(self.cache_dir)
        # a fork server of its own, whose child becomes the clean process: the judge's calls travel
        # the same relay as the candidate's (engine.evaluate.child.judge_process)
        argv = self.sandbox.command([sys.executable, "-m", "engine.evaluate.child.worker_process", "--judge"],
                                   workdir=self._dir, read_only=[*problems, *cache_ro, str(self.outputs_dir)],
                                   writable=[])
        with open(self._dir / "stderr.txt", "ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, cwd=self._dir, env=self.sandbox.env(self.env, workdir=self._dir),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                start_new_session=True)
        self._problems = problems
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = b""
        with contextlib.suppress(TimeoutError, BrokenPipeError, ConnectionResetError):
            line = await asyncio.wait_for(self.proc.stdout.readline(), START_TIMEOUT_S)
            if b"ready" in line:
                self.proc.stdin.write(b'{"judge": 1}\n')
                await self.proc.stdin.drain()
                line = await asyncio.wait_for(self.proc.stdout.readline(), START_TIMEOUT_S)
        if b"judging" not in line:
            await self.stop()
            tail = (self._dir / "stderr.txt").read_text(errors="replace")[-2000:]
            return f"the judge's process did not start\n{tail}"
        return None

    async def request(self, message: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any] | None, float]:
        """(its answer, or None where it died or took too long; the round trip's seconds on this clock)."""
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            await self.proc.stdin.drain()
            line = await asyncio.wait_for(self.proc.stdout.readline(), max(timeout_s, 1.0))
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            await self.stop()
            return None, time.perf_counter() - t0
        took = time.perf_counter() - t0
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or "exited" in answer:  # its process died (its server says so)
            await self.stop()
            return None, took
        return answer, took

    async def audit(self, job: EvalJob, call_candidate: CallCandidate, job_dir: Path,
                    timeout_s: float, claim_ms: float | None = None) -> dict[str, Any]:
        """The fresh-input calls of one evaluation (the module's steps 1-3), more where the first
        cannot allow the claimed time (`claim_ms`): a record for `compose`."""
        async with self._lock:
            t0 = time.monotonic()
            record = await self._audit(job, call_candidate, job_dir, timeout_s, claim_ms)
            return {**record, "wall_s": round(time.monotonic() - t0, 4)}

    async def _audit(self, job: EvalJob, call_candidate: CallCandidate, job_dir: Path,
                     timeout_s: float, claim_ms: float | None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        why = await self.ready(job.problem_path)
        if why is not None:
            return {"error": why, "judge": True}
        plain = job.replace(solution_source="", input_seed=None).to_dict()
        handover = HANDOVER_BYTES.get(job.backend, HANDOVER_BYTES["cuda"])
        calls: list[dict[str, Any]] = []
        # In pairs, the reference's call then the candidate's on the same seed, back to back: the
        # host's load then weighs on both alike. The answers come first: the candidate's process
        # learns a seed only once its answers exist.
        while len(calls) < AUDIT_CALLS or (
                len(calls) < MOST_CALLS and disbelieved(claim_ms, outside_ms(calls), job.backend)
                and deadline - time.monotonic() > 1.0):
            i = len(calls)
            c = {"seed": secrets.randbits(62), "window": secrets.randbelow(10**6) / 10**6}
            calls.append(c)
            ask = {"job": plain, "seed": c["seed"], "max_bytes": handover, "window": c["window"],
                   "out": str(self._dir / "ref")}
            answer, took = await self.request({"call": ask}, deadline - time.monotonic())
            if answer is None or "error" in answer:
                why = (answer or {}).get("error", "no answer")
                return {"error": f"the reference failed on fresh inputs: {why}", "judge": True}
            c["ref_ms"], c["inner_ms"] = 1e3 * took, float(answer["inner_ms"])
            for part in ("extra_ms", "setup_ms", "draw_ms", "write_ms"):
                c[part] = float(answer.get(part) or 0.0)
            out = job_dir / f"audit-{i}"
            reply, took = await call_candidate({"seed": c["seed"], "out": str(out), "max_bytes": handover,
                                                "window": c["window"]}, deadline - time.monotonic())
            if reply is None:
                return {"error": "the candidate's process died or hung on a fresh-input call", "calls": calls}
            if "audit_error" in reply:
                return {"error": f"on fresh inputs: {reply['audit_error']}", "calls": calls, "runtime": True}
            c["cand_ms"] = 1e3 * took
            result, _ = await self.request({"compare": {"seed": c["seed"], "path": str(out), "atol": job.atol,
                                                        "rtol": job.rtol}}, deadline - time.monotonic())
            if result is None:
                return {"error": "the judge's process failed comparing", "calls": calls, "judge": True}
            c.update(ok=bool(result.get("ok")), errs=result.get("errs") or {},
                     reason=str(result.get("reason", "")))
            if not c["ok"]:
                break
        with contextlib.suppress(Exception):
            await self.request({"forget": 1}, 30.0)
        return {"calls": calls}

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            kill_tree(proc.pid)
            await proc.wait()

    async def close(self) -> None:
        await self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


def judged(verdict: Verdict, job: EvalJob, learnt: dict[str, Any] | None, clean_file: Path, cache_dir: str,
           backend: str) -> Verdict:
    """What the judge makes of a worker's verdict (`learnt`: `Worker.judged`; None for a one-shot
    process, which tells nothing): the clean facts its process told before the candidate's import
    kept for later jobs (the reference's clean time, the device's peaks), and the claim composed
    against the fresh-input calls (`compose`)."""
    told = (learnt or {}).get("clean") or {}
    clean_reference.keep(clean_file, job, verdict.timing, told.get("reference_clean"))
    keep_peaks(cache_dir, told.get("peaks"))
    if learnt is None:
        return verdict
    return compose(verdict, learnt.get("audit"), job.ref_eager_clean or told.get("reference_clean") or None,
                   backend)


def keep_peaks(cache_dir: str, told: dict[str, Any] | None) -> None:
    """The device's peaks an evaluation's process measured before its candidate was imported
    (engine.evaluate.harness.timing), written where no evaluation process may write (PEAKS_DIR)."""
    import os
    import re

    from engine.evaluate.harness.timing import PEAKS_DIR

    if not cache_dir or not isinstance(told, dict) or not isinstance(told.get("peaks"), dict):
        return
    name = str(told.get("name", ""))
    if not re.fullmatch(r"[A-Za-z0-9_.+,=-]+\.json", name):
        return
    folder = Path(cache_dir, *PEAKS_DIR)
    with contextlib.suppress(OSError, TypeError, ValueError):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(told["peaks"]))
        os.replace(tmp, folder / name)


def outside_ms(calls: list[dict[str, Any]]) -> float | None:
    """The least time a call of the candidate can have taken, by the judge's clock: the candidate's
    quickest round trip less the least that drawing, handing over and the pipe cost the reference's
    calls (a round trip less the call's own time and what the clean process did that the candidate's
    does not: `extra_ms`, the making of the reference on the job's first call among it). The least of
    each, not pair by pair: one reference call slowed by something else (its process's first kernels,
    the host) once zeroed the figure, and a forged 6x claim stood on a GPU."""
    timed = [c for c in calls if "cand_ms" in c and "ref_ms" in c]
    if not timed:
        return None
    overhead = min(max(c["ref_ms"] - c["inner_ms"] - c.get("extra_ms", c.get("setup_ms", 0.0)), 0.0)
                   for c in timed)
    return max(min(c["cand_ms"] for c in timed) - overhead, 0.0)


def host_loaded(calls: list[dict[str, Any]], clean: dict[str, Any] | None) -> str | None:
    """Said beside an outside figure that stands (it may be high, never a claim let through): the
    reference's quickest call in the judge's clean process took over LOADED times its clean
    median, the host's other work weighing on every round trip."""
    inner = [c["inner_ms"] for c in calls if "inner_ms" in c]
    if not inner or not clean or not clean.get("median") or min(inner) <= LOADED * clean["median"]:
        return None
    return (f"the host was loaded: the reference's quickest call took {min(inner):.4g} ms in the judge's"
            f" process against {clean['median']:.4g} ms where no candidate ran")


def disbelieved(claim_ms: float | None, outside: float | None, backend: str) -> bool:
    """Whether the judge's clock cannot allow the claimed time of a call: below the outside figure
    over BELIEF (CUDA_BELIEF on a GPU), less the backend's slack."""
    return (claim_ms is not None and outside is not None
            and claim_ms < outside / (CUDA_BELIEF if backend == "cuda" else BELIEF)
            - SLACK_MS.get(backend, SLACK_MS["cpu"]))


def compose(verdict: Verdict, audit: dict[str, Any] | None, clean: dict[str, Any] | None,
            backend: str) -> Verdict:
    """The verdict the judge gives: the candidate's claim (`verdict`) against the fresh-input calls
    (`audit`, from Judge.audit) and the reference's time where no candidate ran (`clean`)."""
    if verdict.status != "correct" or audit is None:
        return verdict
    record = {k: v for k, v in audit.items() if k != "judge"}
    timing = {**(verdict.timing or {}), "judge": record}
    if audit.get("error"):
        if audit.get("judge"):  # the judge's own failure: the claim stands unchecked, and says so
            note = f"judge: not checked from outside: {audit['error']}"
            return dataclasses.replace(verdict, timing=timing, notes=(*verdict.notes, note))
        status = "runtime_error" if audit.get("runtime") else "crashed"
        return dataclasses.replace(verdict, status=status, timing=timing, speedup_eager=None,
                                   speedup_compile=None,
                                   log=f"the judge's fresh-input call: {audit['error']}\n{verdict.log}")
    calls = audit.get("calls") or []
    wrong = next((c for c in calls if not c.get("ok")), None)
    if wrong is not None:
        errs = wrong.get("errs") or {}
        return dataclasses.replace(
            verdict, status="incorrect", timing=timing, speedup_eager=None, speedup_compile=None,
            speedup_lo=None, speedup_hi=None,
            **{k: errs[k] for k in ("max_abs_err", "max_rel_err", "rel_l2_err") if k in errs},
            log=f"on fresh inputs, judged outside the candidate's process: {wrong.get('reason')}"
                f"\n{verdict.log}")
    flags, notes = list(verdict.flags), list(verdict.notes)
    status = verdict.status
    time_ms, ref_ms = verdict.time_ms, verdict.ref_eager_ms
    outside = outside_ms(calls)
    record["outside_ms"] = outside
    if disbelieved(time_ms, outside, backend):
        assert time_ms is not None and outside is not None
        # (the load said on the cpu, where the reference's call and its clean median are both the
        # host's wall clock; on a GPU a call's host overhead alone can be several times a small
        # kernel's events)
        loaded = host_loaded(calls, clean) if backend == "cpu" else None
        notes.append(f"outside-clock: the candidate's process reports {time_ms:.4g} ms a call; the judge's own"
                     f" clock allows no less than {outside:.4g} ms ({len(calls)} fresh-input calls from"
                     f" outside, less what drawing, handing over and the pipe cost the reference's calls):"
                     f" {outside:.4g} ms stands"
                     + (f" ({loaded}: the figure may be high; a claim the clock cannot check is not let"
                        f" through)" if loaded else ""))
        time_ms = outside  # (a note, not a flag: a kernel's own first-call costs can do it honestly)
    if clean and clean.get("median") and ref_ms and ref_ms > REF_BELIEF * clean.get("hi", clean["median"]):
        notes.append(f"reference: {ref_ms:.4g} ms in the candidate's process, {clean['median']:.4g} ms where no"
                     f" candidate ran: the speedup is taken against {clean['median']:.4g} ms")
        ref_ms = clean["median"]
    if time_ms == verdict.time_ms and ref_ms == verdict.ref_eager_ms:
        return dataclasses.replace(verdict, timing=timing, notes=tuple(notes))
    speedup = ref_ms / time_ms if ref_ms and time_ms else None
    compile_ms = verdict.ref_compile_ms
    said = [n for n in notes if n.startswith("outside-clock:")]
    log = verdict.log if time_ms == verdict.time_ms else f"{said[-1]}\n{verdict.log}"
    # the speed of light's fraction follows the time that stands (its floor is the same)
    sol = verdict.sol_fraction
    if sol is not None and verdict.time_ms and time_ms and time_ms != verdict.time_ms:
        sol = sol * verdict.time_ms / time_ms
    return dataclasses.replace(
        verdict, status=status, flags=tuple(flags), notes=tuple(notes), time_ms=time_ms, ref_eager_ms=ref_ms,
        speedup_eager=speedup, speedup_compile=compile_ms / time_ms if compile_ms and time_ms else None,
        speedup_lo=None, speedup_hi=None, sol_fraction=sol, timing=timing, log=log)
