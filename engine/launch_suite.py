"""The one way a suite is built (`ktree suite`, and the TUI alike): `SuiteRequest` for a new one,
`SuiteResumeRequest` to continue a recorded one, each checked and handed back as a typed
`PreparedSuite`; its estimate. Each problem is checked as engine.launch checks a single search,
and bad input is the same `UsageError`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine.launch import (
    RunRequest,
    UsageError,
    _build_models,
    _check_choices,
    _search_config,
    check_languages,
    check_scripted,
    checked_problem,
    estimate_run,
    isolation_level,
    make_evaluator,
    parse_languages,
    resolve_backend,
)

if TYPE_CHECKING:
    from engine.evaluate.base import Evaluator
    from engine.search.suite import Suite, SuiteEntry
    from engine.store import Store

LEVELS = ("level1", "level2")


@dataclass(frozen=True)
class SuiteRequest:
    """A suite, as `ktree suite SPEC ... [run flags]` asks for it: each problem searched as
    `run` says (its `problem` is not used), under `suite_budget_usd` for all of them together."""

    problems: tuple[str, ...]  # directories, built-in levels, files, built-in problem names
    run: RunRequest
    suite_budget_usd: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "problems", tuple(self.problems))


@dataclass(frozen=True)
class SuiteResumeRequest:
    """Continue a recorded suite: its problems and search come from the store; these say where to
    evaluate this time (None: as recorded)."""

    suite: int
    gpus: tuple[int, ...] | None = None
    compile_workers: int | None = None
    executor: str | None = None
    ray_address: str | None = None
    ray_workers: int | None = None
    suite_budget_usd: float | None = None


@dataclass(frozen=True)
class PreparedSuite:
    entries: list[SuiteEntry]
    evaluator: Evaluator
    name: str
    record: dict[str, Any]
    cap_usd: float | None = None
    resume: int | None = None

    def suite(self, store: Store, bus_for: Any = None) -> Suite:
        from engine.search.suite import Suite

        return Suite(store, self.entries, self.evaluator, name=self.name, record=self.record,
                     cap_usd=self.cap_usd, resume=self.resume, bus_for=bus_for)


def suite_files(specs: Sequence[str]) -> list[str]:
    """The problem files the specs name, in order, each once: a directory's *.py (KernelBench's
    `19_ReLU.py` sorted by its number), a built-in level's problems, a file, a built-in name.
    A spec that names nothing is a usage error; a file that does not load is not (the suite
    records it)."""
    import re
    from pathlib import Path

    from engine.problems import BUILTIN_DIR, ProblemError, resolve

    def order(p: Path) -> tuple[int, str]:
        m = re.match(r"\d+", p.name)
        return (int(m.group()) if m else 1 << 30, p.name)

    out: list[str] = []
    for spec in specs:
        path = BUILTIN_DIR / spec if spec in LEVELS else Path(spec)
        if path.is_dir():
            found = sorted((p for p in path.glob("*.py") if p.is_file() and p.name != "__init__.py"), key=order)
            if not found:
                raise UsageError(f"{spec}: a directory with no problem files (*.py)")
            out += [str(p.resolve()) for p in found]
            continue
        try:
            out.append(str(resolve(spec)))
        except ProblemError as exc:
            raise UsageError(str(exc)) from None
    if not out:
        raise UsageError("ktree suite needs problems: a directory, level1, level2, or files")
    return list(dict.fromkeys(out))


def estimate_suite(request: SuiteRequest, reasoning_history: dict[str, list[int]] | None = None
                   ) -> dict[str, Any]:
    """The suite's estimate: each problem's (engine.estimate) summed; problems that cannot be
    estimated (they do not load) are listed with their reason."""

    backend, _ = resolve_backend(request.run.backend)
    per: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for spec in suite_files(request.problems):
        try:
            per.append(estimate_run(replace(request.run, problem=spec), backend, reasoning_history))
        except UsageError as exc:
            skipped[spec] = str(exc)
    if not per:
        raise UsageError("no problem of the suite can be estimated: " + "; ".join(skipped.values()))
    total = dict(per[0])
    for key in ("expected", "at_most"):
        total[key] = {k: round(sum(e[key][k] for e in per), 4) for k in per[0][key]}
    total["calls"] = {k: sum(e["calls"][k] for e in per) for k in per[0]["calls"]}
    total["reasoning"] = dict(per[0]["reasoning"])
    for key in ("tokens", "cost_usd"):
        total["reasoning"][key] = [round(sum(e["reasoning"][key][i] for e in per), 4) for i in range(3)]
    total["with_reasoning_usd"] = [round(sum(e["with_reasoning_usd"][i] for e in per), 4) for i in range(3)]
    total["problems"], total["skipped"] = len(per), skipped
    total["suite_budget_usd"] = request.suite_budget_usd
    return total


def _suite_entries(files: list[str], run: RunRequest, backend: str) -> list[SuiteEntry]:
    """Each file checked as `ktree run` would check it; what makes one problem unusable is its
    entry's error (the suite goes on), what makes all of them so (no key) a UsageError."""
    from pathlib import Path

    from engine.search.suite import SuiteEntry

    entries = []
    scripted = run.provider == "scripted" or any(m.startswith("scripted") for m in run.models)
    for spec in files:
        name = Path(spec).stem
        try:
            problem = checked_problem(spec)
            if scripted:
                check_scripted(problem.name, backend, parse_languages(run.language))
            request = replace(run, problem=spec)
            config = _search_config(request, problem)
        except UsageError as exc:
            entries.append(SuiteEntry(spec, name, error=str(exc)))
            continue
        models = _build_models(list(run.models), run.provider, problem, backend, seed=run.seed,
                               base_url=run.base_url, timeout_s=run.llm_timeout)
        entries.append(SuiteEntry(spec, problem.name, problem, models, config))
    return entries


def _with_isolation(entries: list[SuiteEntry], evaluator: Any) -> list[SuiteEntry]:
    """Each problem's config records the isolation its shared evaluator runs code under."""
    level = isolation_level(evaluator)
    return [replace(e, config=replace(e.config, isolation=level)) if e.config is not None else e
            for e in entries]


def prepare_suite(request: SuiteRequest) -> PreparedSuite:
    """A new suite: the problem files found, the evaluator built once for all of them, each
    problem checked (one that fails is kept with its reason)."""
    from dataclasses import asdict

    run = request.run
    _check_choices(run)
    if request.suite_budget_usd is not None and request.suite_budget_usd <= 0:
        raise UsageError("--suite-budget-usd: must be more than 0")
    files = suite_files(request.problems)
    check_languages(parse_languages(run.language))
    backend, evaluator = make_evaluator(
        run.backend, executor=run.executor, gpus=run.gpus, compile_workers=run.compile_workers,
        isolation=run.isolation, ray_address=run.ray_address, ray_workers=run.ray_workers,
        eval_timeout=run.eval_timeout)
    entries = _with_isolation(_suite_entries(files, run, backend), evaluator)
    record = {"run": {**asdict(run), "backend": backend, "gpus": evaluator.gpus},
              "suite_budget_usd": request.suite_budget_usd, "specs": list(request.problems)}
    return PreparedSuite(entries, evaluator, " ".join(request.problems), record, request.suite_budget_usd)


async def prepare_suite_resume(request: SuiteResumeRequest, store: Store) -> PreparedSuite:
    """A recorded suite, ready to continue on the caller's store."""
    from engine.store import session_state

    suite = await store.suite(request.suite)
    if suite is None:
        raise UsageError(f"no suite {request.suite} in {store.path}")
    if suite["status"] == "running":
        raise UsageError(f"suite {request.suite} is still running (pid {suite['pid']})")
    sessions = await store.suite_sessions(request.suite)
    done = {s["problem_path"] for s in sessions if session_state(s) in ("finished", "stopped", "failed")}
    if suite["status"] == "finished" and done >= set(suite["problems"]):
        raise UsageError(f"suite {request.suite} has finished; there is nothing to resume")
    recorded = dict(suite["config"]["run"])
    overrides = {k: v for k, v in (("gpus", request.gpus), ("compile_workers", request.compile_workers),
                                   ("executor", request.executor), ("ray_address", request.ray_address),
                                   ("ray_workers", request.ray_workers)) if v is not None}
    known = RunRequest.__dataclass_fields__
    run = RunRequest(**{k: v for k, v in {**recorded, **overrides}.items() if k in known})
    cap = request.suite_budget_usd
    if cap is None:
        cap = suite["config"].get("suite_budget_usd")

    def assemble() -> PreparedSuite:
        backend, evaluator = make_evaluator(
            run.backend, executor=run.executor, gpus=request.gpus, recorded_gpus=recorded.get("gpus"),
            compile_workers=run.compile_workers, isolation=run.isolation, ray_address=run.ray_address,
            ray_workers=run.ray_workers, eval_timeout=run.eval_timeout)
        entries = _suite_entries(list(suite["problems"]), run, backend)
        return PreparedSuite(entries, evaluator, suite["name"], suite["config"], cap, resume=request.suite)

    return assemble() if run.executor == "ray" else await asyncio.to_thread(assemble)
