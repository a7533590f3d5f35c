"""The one way a suite is built (`ktree suite`, and the TUI alike): `SuiteRequest` for a new one,
`SuiteResumeRequest` to continue a recorded one, each checked and handed back as a typed
`PreparedSuite`; its estimate. Each problem is checked as engine.launch checks a single search,
and bad input is the same `UsageError`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine.launch.run import (
    RunRequest,
    _build_models,
    _check_choices,
    _search_config,
    check_languages,
    check_scripted,
    checked_problem,
    estimate_run,
    make_evaluator,
    resolve_backend,
    resolved_placement,
)
from engine.options import UsageError

if TYPE_CHECKING:
    from engine.evaluate import Evaluator
    from engine.options import Placement
    from engine.record.store import Store
    from engine.search.suite import Suite, SuiteEntry

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
    placement: Placement | None = None  # the evaluator's, as resolved (each session records it)

    def suite(self, store: Store, bus_for: Any = None) -> Suite:
        from engine.search.suite import Suite

        return Suite(store, self.entries, self.evaluator, name=self.name, record=self.record,
                     cap_usd=self.cap_usd, resume=self.resume, bus_for=bus_for, placement=self.placement)


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
    """The suite's estimate: each problem's (engine.launch.estimate) summed; problems that cannot be
    estimated (they do not load) are listed with their reason."""

    backend, _ = resolve_backend(request.run.placement.backend)
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
    if len(per) > 1:  # not the first problem's words: each one's own prompts, its own solution size
        from engine.launch.estimate import assumptions

        sizes = sorted({e["solution_tokens"] for e in per})
        solution = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]} (by problem)"
        total["assumptions"] = assumptions(f"each of the {len(per)} problems' own prompts", solution)
        del total["solution_tokens"]
    total["suite_budget_usd"] = request.suite_budget_usd
    return total


def _suite_entries(files: list[str], run: RunRequest, backend: str) -> list[SuiteEntry]:
    """Each file checked as `ktree run` would check it; what makes one problem unusable is its
    entry's error (the suite goes on), what makes all of them so (no key) a UsageError."""
    from pathlib import Path

    from engine.search.suite import SuiteEntry

    entries = []
    llm = run.llm
    scripted = llm.provider == "scripted" or any(m.startswith("scripted") for m in llm.models)
    for spec in files:
        name = Path(spec).stem
        try:
            problem = checked_problem(spec)
            if scripted:
                check_scripted(problem.name, backend, run.shape.languages)
            request = replace(run, problem=spec)
            config = _search_config(request, problem)
        except UsageError as exc:
            entries.append(SuiteEntry(spec, name, error=str(exc)))
            continue
        models = _build_models(list(llm.models), llm.provider, problem, backend, seed=run.checks.seed,
                               base_url=llm.base_url, timeout_s=llm.llm_timeout)
        entries.append(SuiteEntry(spec, problem.name, problem, models, config))
    return entries


def prepare_suite(request: SuiteRequest) -> PreparedSuite:
    """A new suite: the problem files found, the evaluator built once for all of them, each
    problem checked (one that fails is kept with its reason)."""
    run = request.run
    _check_choices(run)
    if request.suite_budget_usd is not None and request.suite_budget_usd <= 0:
        raise UsageError("--suite-budget-usd: must be more than 0")
    files = suite_files(request.problems)
    check_languages(run.shape.languages)
    evaluator, placement = _evaluator(run)
    entries = _suite_entries(files, run, placement.backend)
    record = {"run": {**run.record(), "backend": placement.backend, "gpus": evaluator.gpus},
              "suite_budget_usd": request.suite_budget_usd, "specs": list(request.problems)}
    return PreparedSuite(entries, evaluator, " ".join(request.problems), record, request.suite_budget_usd,
                         placement=placement)


def _evaluator(run: RunRequest, recorded_gpus: Sequence[int] | None = None) -> tuple[Evaluator, Placement]:
    """The suite's one evaluator, and its placement as resolved (each problem's session records it)."""
    place = run.placement
    backend, evaluator = make_evaluator(
        place.backend, executor=place.executor, gpus=place.gpus, recorded_gpus=recorded_gpus,
        compile_workers=place.compile_workers, isolation=place.isolation, ray_address=place.ray_address,
        ray_workers=place.ray_workers)
    return evaluator, resolved_placement(place, evaluator)


async def prepare_suite_resume(request: SuiteResumeRequest, store: Store) -> PreparedSuite:
    """A recorded suite, ready to continue on the caller's store."""
    from engine.record.store import session_state

    suite = await store.suites.get(request.suite)
    if suite is None:
        raise UsageError(f"no suite {request.suite} in {store.path}")
    if suite["status"] == "running":
        raise UsageError(f"suite {request.suite} is still running (pid {suite['pid']})")
    sessions = await store.suites.sessions(request.suite)
    done = {s["problem_path"] for s in sessions if session_state(s) in ("finished", "stopped", "failed")}
    if suite["status"] == "finished" and done >= set(suite["problems"]):
        raise UsageError(f"suite {request.suite} has finished; there is nothing to resume")
    recorded = dict(suite["config"]["run"])
    overrides = {k: v for k, v in (("gpus", request.gpus), ("compile_workers", request.compile_workers),
                                   ("executor", request.executor), ("ray_address", request.ray_address),
                                   ("ray_workers", request.ray_workers)) if v is not None}
    run = RunRequest.from_record({**recorded, **overrides, "gpus": request.gpus})
    cap = request.suite_budget_usd
    if cap is None:
        cap = suite["config"].get("suite_budget_usd")

    def assemble() -> PreparedSuite:
        evaluator, placement = _evaluator(run, recorded_gpus=recorded.get("gpus"))
        entries = _suite_entries(list(suite["problems"]), run, placement.backend)
        return PreparedSuite(entries, evaluator, suite["name"], suite["config"], cap, resume=request.suite,
                             placement=placement)

    return assemble() if run.placement.executor == "ray" else await asyncio.to_thread(assemble)
