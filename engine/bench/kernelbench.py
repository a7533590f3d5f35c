"""`ktree bench kernelbench PATH`: every problem of a KernelBench checkout evaluated through the
normal path, with what it cost in memory and time.

PATH is a checkout (`PATH/KernelBench/level1/19_ReLU.py`), its `KernelBench` folder or one level
folder; its problems are files `<number>_<Name>.py` of KernelBench's shape. Each selected problem is
evaluated through one LocalEvaluator (as a suite's problems are: `jobs` of them in flight at once,
their builds side by side, the device judging one at a time) with a candidate: by default the
reference's own forward wrapped as `ModelNew` (a subclass of its `Model`: all its work left to
torch, so `flagged` is the expected verdict and counts as one), or the solution of the same name in
a folder of solutions. Per problem: the verdict's status, the memory the verdict reports
(`verdict.memory`: inputs, outputs, the worker's peak GPU memory beside the reference's own peak,
peak host memory), the seconds it held the device, its wall seconds, whether its peak fits the
bound (reference peak + 2 × (inputs + outputs) + 2 GiB) and what ktree could not do and why.

Each row is appended to `kernelbench.jsonl` in the output folder as it finishes; a run given the
same folder again skips the problems that already have a verdict there (a cut run resumes where it
ended). A problem whose file cannot be loaded (a package this machine lacks: `no-package`) or that
has no solution in the folder (`skipped`) gets a row without a verdict.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.bench.summary import markdown_table
from engine.evaluate import STATUSES, LocalEvaluator
from engine.problems import Problem, load_problem

GiB = 1024 ** 3
MARGIN_BYTES = 2 * GiB  # a peak's bound: the problem's own bytes plus this margin
ROWS_FILE = "kernelbench.jsonl"
TABLE_FILE = "kernelbench.md"
JSON_FILE = "kernelbench.json"
# Each problem's timing budget: the bench measures verdicts and memory, not speedups (the recheck on
# the timed inputs still sees a timed run). No torch.compile baseline either (minutes per problem).
TIME_BUDGET_S = 0.5
FAILED = ("crashed", "timeout")  # verdicts that fail the bench
EXCUSED = ("skipped", "no-package")  # rows without a verdict that do not: nothing ktree could judge
WRAPPED = "reference"  # the candidate label of the wrapped reference
WRAPPER = '''

class ModelNew(Model):
    """ktree bench kernelbench: the reference's own forward as the candidate (expected: flagged)."""

    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs)
'''
_LEVEL = re.compile(r"level(\d+)")
_PROBLEM = re.compile(r"(\d+)_(.+)\.py")
_OOM = re.compile(r"out of memory|OutOfMemoryError", re.I)
_HOST_KILL = "memory limit: resident"  # how the sandbox's watchdog says it killed a process (sandbox.py)


class KernelBenchError(ValueError):
    """A checkout, a selection or an earlier run that cannot be used: one line."""


@dataclass(frozen=True)
class KBProblem:
    level: int
    number: int
    name: str  # the file's name after its number: "ReLU"
    path: Path

    @property
    def key(self) -> str:
        return f"{self.level}/{self.number}"

    @property
    def label(self) -> str:
        return f"level{self.level}/{self.path.stem}"


# --- the selection ----------------------------------------------------------------------------------

def parse_numbers(text: str | None) -> set[int] | None:
    """`1-10,19,23` as a set of problem numbers (None for all); KernelBenchError for anything else."""
    if text is None:
        return None
    numbers: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise KernelBenchError(f"--problems {text!r}: give numbers and ranges, e.g. 1-10,19,23")
        lo, hi = int(m[1]), int(m[2] or m[1])
        if lo < 1 or hi < lo:
            raise KernelBenchError(f"--problems {text!r}: {part} is not a range of problem numbers")
        numbers.update(range(lo, hi + 1))
    return numbers


def parse_levels(text: str | None) -> list[int] | None:
    """`1,2` as level numbers (None: not given); KernelBenchError for anything else."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not all(re.fullmatch(r"\d+", p) for p in parts):
        raise KernelBenchError(f"--levels {text!r}: give level numbers, e.g. 1,2")
    return sorted({int(p) for p in parts})


def level_folders(path: Path) -> dict[int, Path]:
    """The level folders PATH holds: a checkout's `KernelBench/levelN`, a KernelBench folder's
    `levelN`, or PATH itself when it is one."""
    if not path.exists():
        raise KernelBenchError(f"{path}: no such path")
    if not path.is_dir():
        raise KernelBenchError(f"{path}: is not a folder (give a KernelBench checkout, its KernelBench"
                               " folder or a level folder)")
    if (m := _LEVEL.fullmatch(path.name)) and any(path.glob("*.py")):
        return {int(m[1]): path}
    for base in (path / "KernelBench", path):
        if base.is_dir():
            found = {int(m[1]): d for d in base.iterdir() if d.is_dir() and (m := _LEVEL.fullmatch(d.name))}
            if found:
                return dict(sorted(found.items()))
    raise KernelBenchError(f"{path}: no KernelBench level folders (level1/, level2/, ...) in it or in"
                           " its KernelBench/")


def find_problems(path: str | Path, levels: list[int] | None = None,
                  numbers: set[int] | None = None) -> list[KBProblem]:
    """The selected problems, by level then number. Levels: those given (default: level 1, or the
    level PATH is); KernelBenchError for a level PATH lacks or a selection with no problem."""
    path = Path(path)
    folders = level_folders(path)
    if levels is None:
        levels = [1] if 1 in folders or len(folders) > 1 else list(folders)
    missing = [n for n in levels if n not in folders]
    if missing:
        raise KernelBenchError(f"{path}: no level{missing[0]} folder (levels there:"
                               f" {', '.join(map(str, folders))})")
    found: list[KBProblem] = []
    for level in levels:
        for file in folders[level].glob("*.py"):
            m = _PROBLEM.fullmatch(file.name)
            if m and file.is_file() and (numbers is None or int(m[1]) in numbers):
                found.append(KBProblem(level, int(m[1]), m[2], file.resolve()))
    if not found:
        which = "none of the problems --problems asks for" if numbers is not None else \
            "no problem files (<number>_<Name>.py)"
        raise KernelBenchError(f"{path}: {which} in level{', level'.join(map(str, levels))}")
    return sorted(found, key=lambda p: (p.level, p.number))


def solution_for(solutions: Path, problem: KBProblem) -> Path | None:
    """The problem's solution in a folder of solutions: `levelN/<file>`, `levelN/<number>.py` or
    `<file>` (the problem's own file name)."""
    for candidate in (solutions / f"level{problem.level}" / problem.path.name,
                      solutions / f"level{problem.level}" / f"{problem.number}.py",
                      solutions / problem.path.name):
        if candidate.is_file():
            return candidate
    return None


def wrapped_reference(source: str) -> str:
    """The reference's file with `class ModelNew(Model)` calling the reference's own forward."""
    return source.rstrip() + "\n" + WRAPPER


# --- rows --------------------------------------------------------------------------------------------

def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file (a folder: its kernelbench.jsonl), in order; a line cut short by a
    kill is left out. KernelBenchError when there is no such file."""
    path = Path(path)
    if path.is_dir():
        path = path / ROWS_FILE
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise KernelBenchError(f"{path}: cannot read: {exc.strerror or exc}") from None
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "level" in row and "number" in row and "status" in row:
            rows.append(row)
    if not rows and not lines:
        return rows
    if not rows:
        raise KernelBenchError(f"{path}: no rows of `ktree bench kernelbench` in it")
    return rows


def _key(row: dict[str, Any]) -> str:
    return f"{row['level']}/{row['number']}"


def bound_bytes(memory: dict[str, Any]) -> int | None:
    """The bound an evaluation's peak is held to (docs/memory.md): the reference's own peak
    + 2 × (inputs + outputs) + 2 GiB; None where the verdict does not report those."""
    parts = [memory.get(k) for k in ("reference_peak_bytes", "inputs_bytes", "outputs_bytes")]
    if any(p is None for p in parts):
        return None
    ref, inputs, outputs = (int(p) for p in parts)  # type: ignore[arg-type]
    return ref + 2 * (inputs + outputs) + MARGIN_BYTES


def held_seconds(verdict: Any) -> float | None:
    """The seconds the evaluation held its device: timing["held_s"]'s total (else its phases' sum)."""
    held = (getattr(verdict, "timing", None) or {}).get("held_s") or {}
    if not held:
        return None
    return round(float(held["total"] if "total" in held else sum(held.values())), 3)


def verdict_row(problem: KBProblem, candidate: str, verdict: Any, wall_s: float) -> dict[str, Any]:
    """One problem's row from its verdict."""
    memory = getattr(verdict, "memory", None) or {}
    log = verdict.log or ""
    bound = bound_bytes(memory)
    peak = memory.get("peak_gpu_bytes")
    fits = None if bound is None or peak is None else int(peak) <= bound
    why = ""
    if verdict.status not in ("correct", "flagged"):
        why = next((line.strip() for line in log.splitlines() if line.strip()), verdict.status)[:160]
    elif fits is False:
        phases = memory.get("phase_peaks") or {}
        top = max(phases, key=phases.get) if phases else ""
        why = f"peak GPU {human_bytes(peak)} over the bound {human_bytes(bound)}"
        why += f" (in {top})" if top else ""
    return {
        **_ids(problem, candidate), "status": verdict.status,
        "flags": [f.split(":")[0] for f in verdict.flags],
        "inputs_bytes": memory.get("inputs_bytes"), "outputs_bytes": memory.get("outputs_bytes"),
        "peak_gpu_bytes": peak, "reference_peak_bytes": memory.get("reference_peak_bytes"),
        "host_peak_bytes": memory.get("host_peak_bytes"), "answers": memory.get("answers"),
        "plan_bytes": memory.get("plan_bytes"), "bound_bytes": bound, "fits": fits,
        "phase_peaks": memory.get("phase_peaks"),
        "held_parts": (getattr(verdict, "timing", None) or {}).get("held_s"),  # a worker's start: "start"
        "held_s": held_seconds(verdict), "wall_s": round(wall_s, 2), "compile_s": verdict.compile_s,
        "eval_s": verdict.eval_s, "device": verdict.device,
        "speedup_eager": getattr(verdict, "speedup_eager", None),
        "speedup_compile": getattr(verdict, "speedup_compile", None),
        "oom": bool(_OOM.search(log)), "host_kill": _HOST_KILL in log, "why": why,
        "log": "" if verdict.status in ("correct", "flagged") else log[-600:],
    }


def unjudged_row(problem: KBProblem, candidate: str, status: str, why: str,
                 wall_s: float = 0.0) -> dict[str, Any]:
    """A row without a verdict: skipped (no solution), no-package, load-error, bench-error."""
    return {**_ids(problem, candidate), "status": status, "flags": [], "fits": None, "held_s": None,
            "wall_s": round(wall_s, 2), "oom": False, "host_kill": False, "why": why[:200], "log": ""}


def _ids(problem: KBProblem, candidate: str) -> dict[str, Any]:
    return {"level": problem.level, "number": problem.number, "name": problem.name,
            "problem": problem.label, "candidate": candidate}


def load_failure(exc: BaseException) -> tuple[str, str]:
    """(status, why) for a problem file that fails to load: `no-package` naming the package when
    importing it raised ImportError, else `load-error`."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ImportError):
        cause = cause.__cause__
    if isinstance(cause, ImportError):
        package = getattr(cause, "name", None)
        if package:
            return "no-package", (f"needs the package {package!r}, which this machine lacks"
                                  f" ({type(cause).__name__})")
        return "no-package", f"needs a package this machine lacks ({type(cause).__name__}: {cause})"
    text = str(exc).split("\n")[0]
    return "load-error", text


# --- the bench ---------------------------------------------------------------------------------------

async def kernelbench_bench(problems: list[KBProblem], backend: str, arch: str | None = None, *,
                            gpus: list[int] | None = None, solutions: Path | None = None, jobs: int = 1,
                            out: Path | None = None, timeout_s: float | None = None,
                            alone: list[dict[str, Any]] | None = None, log: Any = None,
                            evaluator: Any = None, cpu_timer: str | None = None) -> dict[str, Any]:
    """Evaluate the problems (those already in `out`'s rows skipped) and return {backend, wall_s,
    rows (the problems' order), resumed (how many were read back), summary}. `alone`: an earlier
    run's rows, whose statuses are set beside these (the `alone` column). `evaluator`: one to use
    (closed by its owner), else a LocalEvaluator made and closed here. `timeout_s`: each problem's
    evaluation limit (`--eval-timeout`), carried in its job; None: from the problem's size."""
    out_stream = sys.stderr if log is None else log
    say = (lambda text: print(text, file=out_stream, flush=True)) if out_stream else (lambda text: None)
    started = time.monotonic()
    rows_file = None
    done: dict[str, dict[str, Any]] = {}
    labels = {p.key: _candidate(p, solutions) for p in problems}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        rows_file = out / ROWS_FILE
        if rows_file.exists():
            for row in read_rows(rows_file):  # the last row of a problem wins
                if (row["status"] in STATUSES and _key(row) in labels
                        and row.get("candidate") == labels[_key(row)]):
                    done[_key(row)] = row
    todo = [p for p in problems if p.key not in done]
    if done:
        say(f"ktree: resuming: {len(done)} of {len(problems)} problems already have a verdict in {rows_file};"
            " skipped")
    new: dict[str, dict[str, Any]] = {}
    own = evaluator is None and any(solutions is None or solution_for(solutions, p) for p in todo)
    if own:  # (solutions are compared with torch.compile too: its baseline is timed for them)
        evaluator = LocalEvaluator(backend, cuda_arch=arch, gpus=gpus,
                                   compile_baseline=solutions is not None, cpu_timer=cpu_timer)
    # Every device's worker sees every problem file from its start, as a suite's: a new problem then
    # takes the standby started beside the last one, not a fresh process (Python, torch, the CUDA
    # context: seconds per problem, paid one problem after another on each device).
    start_workers = getattr(evaluator, "start_workers", None)
    if start_workers is not None and todo:
        start_workers(*(str(p.path.resolve()) for p in todo))
    slots = asyncio.Semaphore(max(1, jobs))
    # One problem file imported and costed at a time, in a thread (the loop goes on): its flops and
    # bytes are counted on meta tensors, seconds for a recurrent network.
    loading = asyncio.Lock()

    def finish(row: dict[str, Any]) -> None:
        new[_key(row)] = row
        if rows_file is not None:
            with rows_file.open("a") as f:
                f.write(json.dumps(row) + "\n")
        extra = f" ({row['why']})" if row["why"] else ""
        say(f"[{len(new)}/{len(todo)}] {row['problem']}: {row['status']}, {row['wall_s']:g} s{extra}")

    async def one(problem: KBProblem) -> None:
        candidate = labels[problem.key]
        if solutions is not None and candidate == "":
            finish(unjudged_row(problem, "", "skipped", f"no solution in {solutions}"))
            return
        async with loading:  # ahead of its slot: the next problem loads while one is evaluated
            t0 = time.monotonic()
            try:
                loaded = await asyncio.to_thread(load_problem, str(problem.path))
                sizes = loaded.sizes_for(backend)
                flops, nbytes = await asyncio.to_thread(_cost, loaded, sizes)
            except Exception as exc:
                status, why = load_failure(exc)
                finish(unjudged_row(problem, candidate, status, why, time.monotonic() - t0))
                return
            load_s = time.monotonic() - t0
        async with slots:
            t0 = time.monotonic() - load_s
            try:
                if solutions is None:
                    source = wrapped_reference(loaded.source)
                else:
                    source = (solutions / candidate).read_text()
                atol, rtol = loaded.tolerance
                # (a solution's speedup is a figure of the run: its timing has the usual budget)
                budget = {"time_budget_s": TIME_BUDGET_S} if solutions is None else {}
                job = evaluator.job(loaded.path, source, sizes, atol=atol, rtol=rtol, flops=flops, bytes=nbytes,
                                    eval_timeout=timeout_s, **budget)
                verdict = await evaluator.evaluate(job)
            except Exception as exc:  # ktree's own failure: said in the row, the other problems go on
                finish(unjudged_row(problem, candidate, "bench-error", f"{type(exc).__name__}: {exc}",
                                    time.monotonic() - t0))
                return
            row = verdict_row(problem, candidate, verdict, time.monotonic() - t0)
            finish({**row, "load_s": round(load_s, 2)})

    workers: list[dict[str, Any]] = []
    try:
        await asyncio.gather(*(one(p) for p in todo))
        # how each device's worker started: a standby taken (ready beside the last problem) or fresh
        workers = [{"device": d.name, "starts": d.worker.starts, "standby_used": d.worker.standby_used}
                   for d in getattr(evaluator, "devices", []) if getattr(d, "worker", None) is not None]
    finally:
        if own:
            await evaluator.close()
    rows = [done.get(p.key) or new[p.key] for p in problems]
    if alone is not None:
        earlier = {_key(r): r["status"] for r in alone}
        for row in rows:
            row["alone"] = earlier.get(_key(row))
    device = next((r.get("device") for r in rows if r.get("device")), backend)
    result = {"backend": backend, "device": device, "wall_s": round(time.monotonic() - started, 1),
              "resumed": len(done), "rows": rows, "workers": workers,
              "summary": summarize(rows, compared=alone is not None)}
    if solutions is not None:
        result["figures"] = figures(rows, backend)
    return result


def _cost(problem: Problem, sizes: dict[str, int]) -> tuple[float | None, float | None]:
    """(flops, bytes) for the job's speed-of-light floor (counted on meta tensors where the file does
    not declare them: nothing is allocated); None where there is none to be had."""
    try:
        cost = problem.cost_at(sizes)
    except Exception:
        return None, None
    return cost.flops or None, cost.bytes or None


def _candidate(problem: KBProblem, solutions: Path | None) -> str:
    """The candidate's label: `reference` (wrapped), a solution's path in its folder, "" for none."""
    if solutions is None:
        return WRAPPED
    found = solution_for(solutions, problem)
    return found.relative_to(solutions).as_posix() if found else ""


def summarize(rows: list[dict[str, Any]], compared: bool = False) -> dict[str, Any]:
    """Problems with a verdict / total, counts per status, out of memory, crashed, host-memory kills,
    over the memory bound, statuses that differ from the earlier run's (compared); passed: every
    problem that could be judged has a verdict other than crashed or timeout, none over the bound
    and none differing."""
    judged = [r for r in rows if r["status"] in STATUSES]
    counts = dict(sorted(Counter(r["status"] for r in rows).items()))
    names = {k: sorted(r["problem"] for r in rows if pred(r)) for k, pred in {
        "oom": lambda r: r.get("oom"), "crashed": lambda r: r["status"] == "crashed",
        "timeout": lambda r: r["status"] == "timeout", "host_kills": lambda r: r.get("host_kill"),
        "over_bound": lambda r: r.get("fits") is False,
        "unjudged": lambda r: r["status"] not in STATUSES and r["status"] not in EXCUSED,
        "differing": lambda r: compared and r.get("alone") is not None and r["alone"] != r["status"],
        "not_compared": lambda r: compared and r.get("alone") is None and r["status"] in STATUSES,
    }.items()}
    measured = sum(r.get("fits") is not None for r in rows)
    passed = not any(names[k] for k in ("crashed", "timeout", "over_bound", "unjudged", "differing"))
    return {"problems": len(rows), "verdicts": len(judged), "counts": counts, "measured": measured,
            **names, "passed": passed}


# --- the figures papers and leaderboards compare ----------------------------------------------------

FAST_P = (1.0, 1.5, 2.0)  # fast_p's thresholds (p = 1: faster than the baseline at all)
BASELINES = (("eager", "speedup_eager", "eager PyTorch"), ("compile", "speedup_compile", "torch.compile"))
AGGREGATION = (
    "fraction correct: the problems whose verdict is `correct`, over n (n: every selected problem this"
    " machine could load; one without a solution, or `flagged`, `incorrect`, an error, is not correct)",
    "fast_p: the problems that are correct AND whose speedup is over p (strictly), over the same n"
    " (KernelBench's fast_p: fast_0 is the fraction correct); speedup = the baseline's median time /"
    " the solution's median time, each the median of its timed reps on this machine",
    "geometric mean of speedups: exp(mean(log speedup)) over the correct problems with a time (not"
    " over n: a problem without a correct solution has no speedup to average)",
)


def figures(rows: list[dict[str, Any]], backend: str = "") -> dict[str, Any]:
    """KernelBench's figures over a run with solutions: n, the fraction correct, fast_p at FAST_P
    over eager PyTorch and over torch.compile, the geometric mean of the speedups over each, and how
    each was aggregated (AGGREGATION). A baseline never timed (torch.compile on the cpu backend, or
    a run without it) says so instead of its figures."""
    import math

    scored = [r for r in rows if r["status"] != "no-package"]
    n = len(scored)
    correct = [r for r in scored if r["status"] == "correct"]
    out: dict[str, Any] = {"n": n, "correct": len(correct),
                           "fraction_correct": len(correct) / n if n else None,
                           "aggregation": list(AGGREGATION)}
    for name, key, _ in BASELINES:
        timed = [float(r[key]) for r in correct if r.get(key)]
        if correct and not timed:
            why = ("torch.compile is timed on the cuda backend only" if name == "compile" and backend == "cpu"
                   else "no correct problem has a time against it")
            out[name] = {"fast_p": None, "geomean": None, "timed": 0, "why": why}
            continue
        fast = {f"{p:g}": (sum(1 for r in correct if (r.get(key) or 0.0) > p) / n if n else None)
                for p in FAST_P}
        geomean = math.exp(sum(math.log(x) for x in timed) / len(timed)) if timed else None
        out[name] = {"fast_p": fast, "geomean": geomean, "timed": len(timed)}
    return out


def figures_lines(fig: dict[str, Any]) -> list[str]:
    """The figures as a short table and the aggregation under it."""
    if not fig.get("n"):
        return ["KernelBench figures: no problem to score"]
    header = ["baseline", *[f"fast_{p:g}" for p in FAST_P], "geomean speedup (correct, timed)"]
    rows = []
    for name, _, label in BASELINES:
        f = fig[name]
        if f["fast_p"] is None:
            rows.append([label, *["-"] * len(FAST_P), f"- ({f['why']})"])
            continue
        geo = "-" if f["geomean"] is None else f"{f['geomean']:.3g}x"
        rows.append([label, *[f"{f['fast_p'][f'{p:g}']:.3f}" for p in FAST_P], f"{geo} ({f['timed']})"])
    return [f"KernelBench figures over n = {fig['n']} problems: fraction correct {fig['fraction_correct']:.3f}"
            f" ({fig['correct']} / {fig['n']})", "", markdown_table(header, rows), "",
            "how each figure was aggregated:", *[f"- {line}" for line in fig["aggregation"]]]


# --- the table ---------------------------------------------------------------------------------------

def human_bytes(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    for unit, scale in (("GiB", GiB), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def kernelbench_table(result: dict[str, Any]) -> str:
    """The rows as a markdown table, then the summary below it."""
    compared = any("alone" in r for r in result["rows"])
    header = ["level", "#", "name", "status", "inputs", "outputs", "peak GPU", "ref peak", "host peak",
              "held s", "wall s", "fits", *(["alone"] if compared else []), "what ktree could not do and why"]
    rows = []
    for r in result["rows"]:
        fits = "-" if r.get("fits") is None else ("yes" if r["fits"] else "NO")
        alone = [r.get("alone") or "-"] if compared else []
        rows.append([r["level"], r["number"], r["name"], r["status"], human_bytes(r.get("inputs_bytes")),
                     human_bytes(r.get("outputs_bytes")), human_bytes(r.get("peak_gpu_bytes")),
                     human_bytes(r.get("reference_peak_bytes")), human_bytes(r.get("host_peak_bytes")),
                     _seconds(r.get("held_s")), _seconds(r.get("wall_s")), fits, *alone,
                     (r.get("why") or "-").replace("|", "\\|")])
    s = result["summary"]
    counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())
    lines = [markdown_table(header, rows), "",
             f"verdicts: {s['verdicts']} / {s['problems']} ({counts})",
             f"out of memory: {len(s['oom'])}; crashed: {len(s['crashed'])}; timeout: {len(s['timeout'])};"
             f" host-memory kills: {len(s['host_kills'])}; over the memory bound: {len(s['over_bound'])}"
             f" (of {s['measured']} with memory reported;"
             " bound: reference peak + 2 × (inputs + outputs) + 2 GiB)"]
    for key, what in (("oom", "out of memory"), ("crashed", "crashed"), ("timeout", "timed out"),
                      ("host_kills", "killed on host memory"), ("over_bound", "over the memory bound"),
                      ("unjudged", "no verdict (ktree could not load or run them)")):
        if s[key]:
            lines.append(f"{what}: {', '.join(s[key])}")
    if compared:
        lines.append(f"statuses differing from the earlier run: {len(s['differing'])}"
                     + (f" ({', '.join(s['differing'])})" if s["differing"] else "")
                     + (f"; not in the earlier run: {len(s['not_compared'])}" if s["not_compared"] else ""))
    resumed = f" ({result['resumed']} read back from an earlier run)" if result.get("resumed") else ""
    lines.append(f"{result['backend']}: {s['problems']} problems in {result['wall_s']:g} s{resumed};"
                 f" {'passed' if s['passed'] else 'failed'}")
    if result.get("figures") is not None:
        lines += ["", *figures_lines(result["figures"])]
    for w in result.get("workers") or []:
        lines.append(f"{w['device']}: its worker started {w['starts']} times, {w['standby_used']} of them"
                     " a standby made ready beside the last problem")
    return "\n".join(lines)


def write_outputs(out: Path, result: dict[str, Any]) -> None:
    """The table (kernelbench.md) and the whole result (kernelbench.json) in the output folder."""
    out.mkdir(parents=True, exist_ok=True)
    (out / TABLE_FILE).write_text(kernelbench_table(result) + "\n")
    (out / JSON_FILE).write_text(json.dumps(result, indent=2) + "\n")
