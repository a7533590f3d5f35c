"""`ktree bench verdicts`: the evaluator against a corpus of real-world-shaped kernels.

The corpus (`tests/realworld/` of a checkout: `cases.toml` lists the cases) holds honest kernels,
written the messy way published LLM kernels are (a torch epilogue, a mask, a final `torch.mean`, a
library GEMM with a fused epilogue, an algorithmic rewrite, a reshape or a cast of the output), and
hacks (fallbacks to torch, results unused, inherited references, threads and side streams,
constant or cached outputs, modified inputs, a rebound timer, a precision downgrade, a subsampled
loss). Every case is evaluated on the backend's file (the CPU file on cpu, the CUDA or Triton one
on cuda) at the backend's sizes, all through one LocalEvaluator (its compile pool builds them side
by side; its device judges one at a time). A case passes when an honest kernel ends `correct` and
a hack does not; the summary gives the hacks caught (recall) and the honest kernels rejected (the
false-reject rate). An honest case may also say which mark its correct verdict should carry (a
torch-ops `note`, or `library`: Verdict.library set); a missing mark is counted, not failed.
"""

from __future__ import annotations

import asyncio
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.bench.summary import markdown_table
from engine.evaluate import LocalEvaluator, is_timing_flag, languages
from engine.problems import load_problem

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "realworld"
KINDS = ("honest", "hack")
MARKS = ("note", "library")
# Each case's timing budget: the bench measures verdicts, not speedups (the recheck on the timed
# inputs and the speed-of-light floor still see a timed run). No torch.compile baseline either.
TIME_BUDGET_S = 0.5
ERRORS = ("compile_error", "runtime_error", "timeout", "crashed")


class CorpusError(ValueError):
    """A manifest that cannot be used: one line naming the case and the field."""


@dataclass(frozen=True)
class Case:
    name: str
    problem: str  # a built-in problem's name, or a path (made absolute against the corpus folder)
    kind: str  # honest | hack
    klass: str  # what kind of kernel or hack it is ("epilogue", "torch-fallback", ...)
    cpu: Path
    gpu: Path
    language: str  # the gpu file's (engine.evaluate.languages)
    expect: str = ""  # honest: the mark a correct verdict carries (note | library), "" none said
    caught_by: str = ""  # hack: the check meant to catch it (for the reader)

    def source_file(self, backend: str) -> Path:
        return self.cpu if backend == "cpu" else self.gpu


def load_cases(corpus: Path | None = None) -> list[Case]:
    """The corpus' cases, in the manifest's order; CorpusError for a bad entry or a missing file."""
    root = Path(corpus or CORPUS)
    manifest = root / "cases.toml"
    try:
        data = tomllib.loads(manifest.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CorpusError(f"{manifest}: {exc}") from None
    cases: list[Case] = []
    for i, entry in enumerate(data.get("case") or []):
        name = str(entry.get("name") or f"#{i + 1}")
        missing = [k for k in ("name", "problem", "kind", "class", "cpu", "gpu", "language")
                   if not entry.get(k)]
        if missing:
            raise CorpusError(f"{manifest}: case {name}: missing {', '.join(missing)}")
        if entry["kind"] not in KINDS:
            raise CorpusError(f"{manifest}: case {name}: kind must be one of {', '.join(KINDS)}")
        if entry["language"] not in (known := languages.names()):
            raise CorpusError(f"{manifest}: case {name}: language must be one of {', '.join(known)}")
        expect = str(entry.get("expect") or "")
        if expect and (expect not in MARKS or entry["kind"] != "honest"):
            raise CorpusError(f"{manifest}: case {name}: expect is for honest cases: {', '.join(MARKS)}")
        problem = str(entry["problem"])
        if problem.endswith(".py"):
            problem = str(root / problem)
        case = Case(name=name, problem=problem, kind=entry["kind"], klass=str(entry["class"]),
                    cpu=root / entry["cpu"], gpu=root / entry["gpu"], language=entry["language"],
                    expect=expect, caught_by=str(entry.get("caught_by") or ""))
        for path in (case.cpu, case.gpu):
            if not path.is_file():
                raise CorpusError(f"{manifest}: case {name}: no file {path}")
        cases.append(case)
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CorpusError(f"{manifest}: case names used twice: {', '.join(dupes)}")
    return cases


def select(cases: list[Case], names: list[str] | None) -> list[Case]:
    """The named cases (all without names); CorpusError for a name the corpus lacks."""
    if not names:
        return cases
    known = {c.name: c for c in cases}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CorpusError(f"no case {', '.join(unknown)} in the corpus (cases: {', '.join(known)})")
    return [known[n] for n in dict.fromkeys(names)]


def judge(case: Case, verdict: Any) -> dict[str, Any]:
    """One row: the verdict in short, and whether it meets the case's expectation (honest:
    correct; hack: anything else), with its expected mark where the case names one."""
    flags = [f for f in verdict.flags if not f.startswith("review") and not is_timing_flag(f)]
    notes = list(verdict.notes)
    library = dict(verdict.library or {})
    correct = verdict.status == "correct"
    passed = correct if case.kind == "honest" else not correct
    mark_ok = None  # only said of a correct honest verdict whose case names a mark
    if case.kind == "honest" and case.expect and correct:
        mark_ok = bool(library) if case.expect == "library" else any(n.startswith("torch-ops") for n in notes)
    log = "" if passed else (verdict.log or "")[-600:]
    # Why a verdict is neither correct nor flagged (incorrect, a build or run failure): its log's
    # first line, for the table.
    why = "" if verdict.status in ("correct", "flagged") else (verdict.log or "").strip().split("\n")[0][:70]
    return {
        "case": case.name, "kind": case.kind, "class": case.klass, "problem": Path(case.problem).stem,
        "language": "cpp" if verdict.backend == "cpu" else case.language, "device": verdict.device,
        "status": verdict.status, "flags": flags, "notes": notes, "library": library,
        "expect": "correct" + (f" + {case.expect}" if case.expect else "") if case.kind == "honest"
        else "not correct", "caught_by": case.caught_by,
        "result": "PASS" if passed else "FAIL", "mark_ok": mark_ok, "why": why,
        "speedup": verdict.speedup_eager, "compile_s": verdict.compile_s, "eval_s": verdict.eval_s, "log": log,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Hacks caught (recall), honest kernels rejected (false-reject rate), marks missing, cases
    that failed to build or run."""
    hacks = [r for r in rows if r["kind"] == "hack"]
    honest = [r for r in rows if r["kind"] == "honest"]
    caught = sum(r["result"] == "PASS" for r in hacks)
    rejected = sum(r["result"] == "FAIL" for r in honest)
    return {
        "cases": len(rows), "hacks": len(hacks), "hacks_caught": caught,
        "recall": round(caught / len(hacks), 4) if hacks else None,
        "honest": len(honest), "honest_rejected": rejected,
        "false_reject_rate": round(rejected / len(honest), 4) if honest else None,
        "marks_missing": sorted(r["case"] for r in honest if r["mark_ok"] is False),
        "failed": sorted(r["case"] for r in rows if r["result"] == "FAIL"),
        # Hacks that never ran to a judgement (a build or run failure): not correct, but not caught
        # by a check either; the corpus' files are meant to build and run.
        "errored": sorted(r["case"] for r in rows if r["status"] in ERRORS),
        "passed": rejected == 0 and caught == len(hacks),
    }


async def verdicts_bench(backend: str, arch: str | None = None, names: list[str] | None = None,
                         corpus: Path | None = None, log: Any = None) -> dict[str, Any]:
    """Evaluate the corpus' cases (the named ones; all without names) on `backend`: {backend,
    device, wall_s, rows: one per case (judge), summary (summarize)}."""
    cases = select(load_cases(corpus), names)
    problems = {c.problem: load_problem(c.problem) for c in cases}
    evaluator = LocalEvaluator(backend, cuda_arch=arch, compile_baseline=False)
    started = time.monotonic()
    out = log if log is not None else sys.stderr

    async def one(case: Case) -> dict[str, Any]:
        problem = problems[case.problem]
        cost = problem.cost(backend)
        source = case.source_file(backend).read_text()
        job = evaluator.job(problem.path, source, problem.sizes_for(backend), flops=cost.flops,
                            bytes=cost.bytes, time_budget_s=TIME_BUDGET_S)
        verdict = await evaluator.evaluate(job)
        row = judge(case, verdict)
        if out:
            print(f"{case.name}: {verdict.status} ({row['result']})", file=out, flush=True)
        return row

    # The slow builds first (torch headers: tens of seconds, where a plain C++ or CUDA-headers-only
    # build takes one or two), so they overlap the other cases' evaluations; rows in manifest order.
    order = sorted(range(len(cases)), key=lambda i: "torch/extension.h" not in
                   cases[i].source_file(backend).read_text())
    try:
        done = dict(zip(order, await asyncio.gather(*(one(cases[i]) for i in order)), strict=True))
        rows = [done[i] for i in range(len(cases))]
    finally:
        await evaluator.close()
    device = next((r["device"] for r in rows if r["device"]), backend)
    return {"backend": backend, "device": device, "wall_s": round(time.monotonic() - started, 1),
            "rows": rows, "summary": summarize(rows)}


def _short(row: dict[str, Any]) -> str:
    """Flags, notes and the library mark in a few words: each one's prefix (`torch-ops`,
    `harness`, ...) and, for the library mark, its ops; else why it failed, else `-`."""
    parts = [f.split(":")[0] for f in row["flags"]]
    parts += [f"note {n.split(':')[0]}" for n in row["notes"]]
    if row["library"]:
        parts.append("library " + ",".join(str(op) for op in row["library"].get("ops") or []))
    return "; ".join(dict.fromkeys(parts)) or row.get("why") or "-"


def verdicts_table(result: dict[str, Any]) -> str:
    """The rows as a markdown table, then the summary below it."""
    rows = []
    for r in result["rows"]:
        expect = r["expect"] + ("" if r["mark_ok"] is not False else " (mark missing)")
        rows.append([r["case"], r["kind"], r["class"], r["status"], _short(r), expect, r["result"]])
    s = result["summary"]
    header = ["case", "kind", "class", "status", "flags / notes / library", "expected", "result"]
    lines = [markdown_table(header, rows), ""]
    if s["hacks"]:
        lines.append(f"hacks caught: {s['hacks_caught']}/{s['hacks']} (recall {100 * s['recall']:.0f} %)")
    if s["honest"]:
        lines.append(f"honest rejected: {s['honest_rejected']}/{s['honest']}"
                     f" (false-reject rate {100 * s['false_reject_rate']:.0f} %)")
    if s["errored"]:
        lines.append(f"did not build or run: {', '.join(s['errored'])}")
    if s["marks_missing"]:
        lines.append(f"honest correct without their expected mark: {', '.join(s['marks_missing'])}")
    lines.append(f"{result['backend']}: {s['cases']} cases in {result['wall_s']:g} s;"
                 f" {'all as expected' if s['passed'] else 'failed: ' + ', '.join(s['failed'])}")
    return "\n".join(lines)
