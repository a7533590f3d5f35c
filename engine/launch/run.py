"""The one way a search is built, for the command line and the TUI alike.

A request holds what the user asked for as plain values (`RunRequest` for a new search,
`ResumeRequest` to continue a recorded one); `prepare_run` / `prepare_resume` check all of it
that can be wrong — the problem loads, the providers can be set up, the GPUs exist — and hand back
a typed `Prepared`, from which a `Search` is made on the caller's store. Bad input raises
`UsageError`, one line naming the flag: the CLI prints it and exits 2, the TUI shows it.

Nothing here prints or parses argv: that is the CLI's (engine/cli.py, engine/commands/), which
sits above this. A suite of searches is built the same way by engine/launch/suite.py.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from engine import evaluate, options
from engine.options import Budgets, CheckSettings, LLMSettings, Placement, Shape, UsageError

if TYPE_CHECKING:
    from engine.evaluate import Evaluator
    from engine.llm.base import Provider
    from engine.problems import Problem
    from engine.record.events import EventBus
    from engine.record.store import Store
    from engine.search import Search, SearchConfig


# `--precision`: inputs and weights cast as KernelBench casts them, and the default tolerance
# (atol = rtol). KernelBench (`get_tolerance_for_precision`) uses 1e-2 for fp16 and bf16, and 1e-4 for
# fp32; the fp32 default here stays the method's own 1e-2.
PRECISION_TOLERANCES = {"fp32": 1e-2, "fp16": 1e-2, "bf16": 1e-2}


@dataclass(frozen=True)
class RunRequest:
    """A new search, as `ktree run PROBLEM ...` (or the form) asks for it: the problem and each part
    of its configuration (engine.options), as given (atol/rtol None: the problem's own)."""

    problem: str  # a built-in problem name or a path to a KernelBench-format file
    shape: Shape = field(default_factory=lambda: options.PARTS["shape"]())
    budgets: Budgets = field(default_factory=lambda: options.PARTS["budgets"]())
    llm: LLMSettings = field(default_factory=lambda: options.PARTS["llm"]())
    checks: CheckSettings = field(default_factory=lambda: options.PARTS["checks"]())
    placement: Placement = field(default_factory=lambda: options.PARTS["placement"]())

    @classmethod
    def of(cls, problem: str, **flat: Any) -> RunRequest:
        """A request from fields named flat (rounds=1, gpus=(0,), ...); a name no part has: TypeError."""
        given = options.split(flat, strict=True)
        return cls(problem, **{name: options.PARTS[name](**kw) for name, kw in given.items()})

    def record(self) -> dict[str, Any]:
        """The request, flat (a suite records it to resume its problems alike)."""
        return {"problem": self.problem, **options.record(*self.parts())}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> RunRequest:
        given = options.split(data)
        return cls(data["problem"], **{name: options.PARTS[name](**kw) for name, kw in given.items()})

    def parts(self) -> tuple[Any, ...]:
        return (self.shape, self.budgets, self.llm, self.checks, self.placement)


@dataclass(frozen=True)
class ResumeRequest:
    """Continue a recorded session: its problem, backend, models and shape come from the store.
    Of the parts given, only the fields declared `resume` count: the budgets that are not None
    replace the recorded ones; the placement says where to evaluate this time (gpus None: the GPUs
    the session ran on); base URL, LLM timeout and seed are this run's."""

    session: int
    budgets: Budgets = field(default_factory=lambda: options.PARTS["budgets"]())
    llm: LLMSettings = field(default_factory=lambda: options.PARTS["llm"]())
    checks: CheckSettings = field(default_factory=lambda: options.PARTS["checks"]())
    placement: Placement = field(default_factory=lambda: options.PARTS["placement"]())

    @classmethod
    def of(cls, session: int, **flat: Any) -> ResumeRequest:
        given = options.split(flat, {n: options.PARTS[n] for n in ("budgets", "llm", "checks", "placement")},
                              strict=True)
        return cls(session, **{name: options.PARTS[name](**kw) for name, kw in given.items()})


@dataclass(frozen=True)
class Prepared:
    """Everything a search needs that can be wrong, checked before any screen opens."""

    problem: Problem
    models: list[tuple[Provider, str]]
    evaluator: Evaluator
    config: SearchConfig
    resume: int | None = None  # the session to continue
    placement: Placement | None = None  # where it runs, as resolved (recorded with the session)

    def search(self, store: Store, bus: EventBus) -> Search:
        """The search on the caller's store (opened in the loop that runs it: aiosqlite binds to it)."""
        from engine.search import Search

        return Search(store, bus, self.models, self.evaluator, self.problem, self.config,
                      resume=self.resume, placement=self.placement)


# --- the pieces the CLI's other commands use too --------------------------------------------------

def _said_as_usage(placement: Callable[..., Any]) -> Callable[..., Any]:
    """A placement function of engine.evaluate whose PlacementError reaches the user as a UsageError."""
    @functools.wraps(placement)
    def checked(*args: Any, **kw: Any) -> Any:
        try:
            return placement(*args, **kw)
        except evaluate.PlacementError as exc:
            raise UsageError(str(exc)) from None

    return checked


# The evaluator's factory and its checks (engine.evaluate.placement), each bad choice a UsageError.
resolve_backend = _said_as_usage(evaluate.resolve_backend)
resolve_isolation = _said_as_usage(evaluate.resolve_isolation)
checked_gpus = _said_as_usage(evaluate.checked_gpus)
local_evaluator = _said_as_usage(evaluate.local_evaluator)
check_cpu_timer = _said_as_usage(evaluate.check_cpu_timer)
check_local_flags = _said_as_usage(evaluate.check_local_flags)
make_evaluator = _said_as_usage(evaluate.make_evaluator)


def profile_note(backend: str, profile: str) -> str | None:
    """What `--profile ncu|torch` does where it cannot run as asked, in words (None where it can)."""
    if backend == "cpu" and profile in ("ncu", "torch"):
        return (f"--profile {profile} needs the cuda backend; on cpu the cpu profile is used"
                " (the kernel's time against this machine's measured bandwidth and FLOP rate)")
    return None


def checked_problem(spec: str) -> Problem:
    """The problem named by `spec` (a built-in name or a path), or a one-line UsageError."""
    from engine.problems import ProblemError, load_problem

    try:
        return load_problem(spec)
    except ProblemError as exc:
        raise UsageError(str(exc)) from None


def tolerances(problem: Problem, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """(atol, rtol): the ones given, else the problem's own; a negative one is a usage error."""
    return _tol(atol, problem.tolerance[0]), _tol(rtol, problem.tolerance[1])


def job_cost(problem: Problem, sizes: dict[str, int]) -> tuple[float | None, float | None]:
    """(flops, bytes) of the problem at these sizes, for an evaluation job's speed-of-light floor;
    None where there is no cost to be had (a problem that cannot be costed only loses its floor)."""
    try:
        cost = problem.cost_at(sizes)
    except Exception:
        return None, None
    return cost.flops or None, cost.bytes or None


# --- new searches, estimates, resumes -------------------------------------------------------------

def estimate_run(request: RunRequest, backend: str | None = None,
                 reasoning_history: dict[str, list[int]] | None = None,
                 problem: Problem | None = None) -> dict[str, Any]:
    """What the search would ask of the LLMs (engine.launch.estimate's dict), before anything runs:
    no key is needed and no provider or evaluator is made. `backend` is the one to build the
    prompts for; by default the request's, resolved here. `problem`: the request's, loaded
    already (the form keeps it: loading runs the reference's inputs)."""
    from engine.config import ConfigError, load_config
    from engine.launch.estimate import estimate
    from engine.llm.registry import ProviderSetupError, auto_provider, parse_spec

    problem = problem if problem is not None else checked_problem(request.problem)
    config = _search_config(request, problem)
    try:
        settings = load_config()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    llm = request.llm
    provider = auto_provider(settings) if llm.provider == "auto" else llm.provider
    specs = list(llm.models) or (settings.default_models if llm.provider == "auto" else [])
    try:
        models = [parse_spec(s, provider) for s in specs] or [(provider, "")]
    except ProviderSetupError as exc:
        raise UsageError(str(exc)) from None
    if backend is None:
        backend, _ = resolve_backend(request.placement.backend)
    if any(p == "scripted" for p, _ in models):
        check_scripted(problem.name, backend, config.shape.languages)
    return estimate(problem, config, models, backend, settings.prices, reasoning_history)


def check_scripted(problem: str, backend: str, languages: Sequence[str] | None = None) -> None:
    """The scripted provider answers only for the problems its library has kernels for: say so
    before an estimate, not when Start fails (`languages`: the default one where not given)."""
    from engine.evaluate import languages as kernel_languages

    languages = (kernel_languages.DEFAULT,) if languages is None else languages
    from engine.llm.scripted import has_scripted, scripted_backends, scripted_problems

    for language in languages:
        if language != kernel_languages.DEFAULT and not has_scripted(problem, backend, language):
            have = ", ".join(p for p in scripted_problems() if has_scripted(p, backend, language))
            title = kernel_languages.get(language).title
            raise UsageError(f"the scripted provider has no {title} answers for {problem!r} (it has: {have})")
    if kernel_languages.DEFAULT in languages and backend not in scripted_backends(problem):
        have = ", ".join(p for p in scripted_problems() if backend in scripted_backends(p))
        raise UsageError(f"the scripted provider has no {backend} answers for {problem!r} (it has: {have});"
                         " with no LLM key only those run offline — set a key or choose one of them")


def prepare_run(request: RunRequest) -> Prepared:
    """A new search, every part checked: the problem, the tolerances, the evaluator (GPUs,
    isolation, executor) and the providers (keys, base URL, scripted answers)."""
    problem = checked_problem(request.problem)
    config = _search_config(request, problem)
    check_languages(config.shape.languages)
    place, llm = request.placement, request.llm
    backend, evaluator = make_evaluator(
        place.backend, executor=place.executor, gpus=place.gpus, compile_workers=place.compile_workers,
        isolation=place.isolation, ray_address=place.ray_address, ray_workers=place.ray_workers,
        profile=place.profile)
    models = _build_models(list(llm.models), llm.provider, problem, backend, seed=request.checks.seed,
                           base_url=llm.base_url, timeout_s=llm.llm_timeout)
    if any(getattr(p, "scripted", False) for p, _ in models):
        check_scripted(problem.name, backend, config.shape.languages)
    return Prepared(problem, models, evaluator, config, placement=resolved_placement(place, evaluator))


def resolved_placement(requested: Placement, evaluator: Any) -> Placement:
    """The placement as it was resolved: the evaluator's backend, GPUs, isolation level and compile
    workers in place of `auto`s and defaults (recorded with the session)."""
    gpus = getattr(evaluator, "gpus", None)
    return replace(requested, backend=evaluator.backend, gpus=tuple(gpus) if gpus else None,
                   isolation=isolation_level(evaluator),  # "" on Ray: each node chose its own
                   compile_workers=getattr(evaluator, "compile_workers", None) or requested.compile_workers)


def recorded_gpus(config: dict[str, Any]) -> list[int] | None:
    """The GPUs a session ran on, from its recorded config (its placement; older records: `gpus`)."""
    placed = config.get("placement") or {}
    gpus = placed.get("gpus") if "gpus" in placed else config.get("gpus")
    return list(gpus) if gpus else None


def isolation_level(evaluator: Any) -> str:
    """The isolation level this host's evaluator runs generated code under, recorded with the
    session so every screen can say it later; "" for a Ray cluster (each node chose its own)."""
    sandbox = getattr(evaluator, "sandbox", None)
    try:
        return str(sandbox.level) if sandbox is not None else ""
    except (RuntimeError, ValueError):
        return ""


def check_languages(languages: Sequence[str]) -> None:
    """A search's kernel languages can run here: each language's `requires` importable (Triton
    variants need triton, on the cpu backend too, under its interpreter). Else a usage error,
    before anything starts."""
    import importlib

    from engine.evaluate import languages as kernel_languages

    for name in languages:
        language = kernel_languages.get(name)
        if not language.requires:
            continue
        try:
            importlib.import_module(language.requires)
        except ImportError as exc:
            raise UsageError(f"--language {name}: {language.title} is not installed here ({exc});"
                             f" pip install {language.requires} or choose --language cuda") from None


async def prepare_resume(request: ResumeRequest, store: Store) -> Prepared:
    """A recorded session, ready to continue on the caller's open store: its own problem, backend,
    models and shape, with the request's budgets replacing the recorded ones. The blocking part
    (importing the problem, probing the sandbox, setting up providers) runs in a worker thread so
    the caller's loop (the TUI's) keeps drawing; on Ray it stays on the calling thread, where
    ray.init wants to be."""
    from engine.record.store import session_state

    session = await store.sessions.get(request.session)
    if session is None:
        raise UsageError(f"no session {request.session} in {store.path}")
    pending = len(await store.commands.of(request.session, pending_only=True))
    state = session_state(session)
    if state == "running":
        raise UsageError(f"session {request.session} is still running (pid {session['pid']})")
    if state == "finished" and not pending:  # with commands given since, it runs them
        raise UsageError(f"session {request.session} has finished; there is nothing to resume")
    if request.placement.executor == "ray":
        return _assemble_resume(request, session)
    return await asyncio.to_thread(_assemble_resume, request, session)


def profile_evaluator(session: dict[str, Any]) -> Evaluator:
    """The evaluator for a profile asked for on a session no engine runs: this host's, built as a
    resume builds it (the session's backend, on the GPUs it ran on), profiling only when asked, with
    the auto profiler (ncu where it reads counters, else torch.profiler; cpu: rates against peaks)."""
    _, evaluator = make_evaluator(session["backend"], recorded_gpus=recorded_gpus(session["config"]),
                                  profile="auto", profile_each=False)
    return evaluator


def _assemble_resume(request: ResumeRequest, session: dict[str, Any]) -> Prepared:
    from engine.search import SearchConfig

    for part in request.budgets, request.llm, request.checks, request.placement:
        options.check(part)
    problem = checked_problem(session["problem_path"])
    recorded = SearchConfig.from_dict(session["config"])
    place = request.placement
    backend, evaluator = make_evaluator(
        session["backend"], executor=place.executor, gpus=place.gpus,
        recorded_gpus=recorded_gpus(session["config"]), compile_workers=place.compile_workers,
        isolation=place.isolation, ray_address=place.ray_address, ray_workers=place.ray_workers,
        profile=place.profile)
    specs = session["models"]
    provider = specs[0].partition(":")[0] if specs else session["provider"].split(",")[0]
    models = _build_models(specs, provider, problem, backend, seed=request.checks.seed,
                           base_url=request.llm.base_url, timeout_s=request.llm.llm_timeout)
    # The budgets given replace the recorded ones (the fields a resume may give: engine.options).
    config = replace(recorded, budgets=options.updated(recorded.budgets, options.resumable(request.budgets)))
    return Prepared(problem, models, evaluator, config, resume=request.session,
                    placement=resolved_placement(replace(place, backend=session["backend"]), evaluator))


def _search_config(request: RunRequest, problem: Problem) -> SearchConfig:
    """The search's configuration from a checked request: the tolerances resolved (the ones given,
    else the precision's, else the problem's own)."""
    from engine.search import SearchConfig

    _check_choices(request)
    checks = request.checks
    atol, rtol = tolerances(problem, checks.atol, checks.rtol)
    if checks.precision is not None:
        tol = PRECISION_TOLERANCES[checks.precision]
        atol = tol if checks.atol is None else atol
        rtol = tol if checks.rtol is None else rtol
    return SearchConfig(shape=request.shape, budgets=request.budgets, llm=request.llm,
                        checks=replace(checks, atol=atol, rtol=rtol))


def parse_languages(spec: str) -> tuple[str, ...]:
    """`--language`'s value ("cuda", "triton", "cuda,triton") as the search's languages."""
    import argparse

    try:
        return options.language_list(spec)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--language: {exc}") from None


def _build_models(specs: list[str], provider: str, problem: Problem, backend: str, *, seed: int,
                  base_url: str | None, timeout_s: float) -> list[tuple[Provider, str]]:
    from engine.config import ConfigError, load_config
    from engine.llm.registry import ProviderSetupError, build_models

    try:
        return build_models(specs, provider, load_config(), problem=problem.name, backend=backend,
                            seed=seed, base_url=base_url, timeout_s=timeout_s)
    except (ConfigError, ProviderSetupError) as exc:
        raise UsageError(str(exc)) from None


def _check_choices(request: RunRequest) -> None:
    """Each part of a request as its flags would check it (argparse checks them on the command line;
    a request built elsewhere is checked here, in the same words: engine.options.check)."""
    for part in request.parts():
        options.check(part)


def _choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        flag = name.replace("_", "-")
        raise UsageError(f"--{flag}: invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})")


def _tol(given: float | None, default: float) -> float:
    if given is not None and given < 0:
        raise UsageError(f"tolerance {given} must not be negative")
    return default if given is None else given
