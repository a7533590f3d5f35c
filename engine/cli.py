"""`ktree`: the command line. With no arguments it opens the sessions screen.

The parser and a dispatch table: each subcommand's body is a function of engine/commands/ from
the parsed flags to an exit code. Usage errors print one line and exit 2; nothing here prints a
traceback for bad input. This is the entry point, at the top; nothing below imports it.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from engine import options
from engine.commands import bench as bench_cmd
from engine.commands import dataset as dataset_cmd
from engine.commands import eval as eval_cmd
from engine.commands import export as export_cmd
from engine.commands import problems as problems_cmd
from engine.commands import run as run_cmd
from engine.commands import sessions as sessions_cmd
from engine.commands import show as show_cmd
from engine.commands import suite as suite_cmd
from engine.commands._common import USAGE_ERROR, db_path
from engine.commands._output import error, say
from engine.domain import BACKEND_CHOICES, DEFAULT_LANGUAGE
from engine.evaluate import PROFILE_MODES, languages
from engine.launch import UsageError, check_cpu_timer
from engine.options import CheckSettings, Placement

DB_HELP = "SQLite database (default: $KTREE_DB or ./store.db)"

BACKEND_HELP = "where to run: cuda, cpu, or auto (cuda where a GPU is visible, else cpu)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def _executor_flags(parser: argparse.ArgumentParser) -> None:
    options.add_flags(parser, Placement, only=("executor", "ray_address", "ray_workers"))


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
    run.add_argument("--resume", type=options.positive, metavar="SESSION",
                     help="continue an unfinished session where it stopped (no PROBLEM then)")
    run.add_argument("--estimate", action="store_true",
                     help="print the expected LLM calls, tokens and dollars, and exit")
    options.add_search_flags(run)  # every part's flags (engine.options: shape, budgets, LLM, checks, placement)
    run.add_argument("--headless", action="store_true", help="no TUI: one line per event")
    run.add_argument("--json", action="store_true", help="with --headless: summary as JSON")

    suite = command("suite", help="search every problem of a directory, a built-in level or a list"
                                  " of files at once (one session a problem)")
    suite.add_argument("problems", nargs="*", metavar="PATH|level1|level2|FILE",
                       help="a directory of KernelBench-format files (e.g. a KernelBench checkout's"
                            " level1/), a built-in level, problem files or built-in names")
    suite.add_argument("--resume", type=options.positive, metavar="SUITE",
                       help="continue an interrupted suite (no problems then)")
    suite.add_argument("--suite-budget-usd", type=options.dollars, default=None,
                       help="stop starting LLM work in every problem once the suite has spent this")
    for action in run._actions:  # every search flag of `run`, per problem (as argparse's parents= shares them)
        if action.dest not in ("help", "problem", "resume", "db"):
            suite._add_action(action)

    ev = command("eval", help="evaluate solution files against a reference",
                 epilog="exit code 0: every solution correct; 1: one or more not correct (incorrect,"
                        " flagged, failed to build or run, timed out); 2: a usage error; 3: the"
                        " reference itself failed, so no solution could be judged")
    ev.add_argument("reference", help="KernelBench-format reference (.py) or built-in name")
    ev.add_argument("solution", nargs="+",
                    help="solution file(s) defining ModelNew, or a directory of them (its *.py);"
                         " several are built at once and timed one at a time")
    options.add_flags(ev, Placement, only=("backend", "gpus", "isolation", "profile"),
                      defaults={"profile": "off"},
                      helps={"gpus": "the GPUs it may run on (default: every visible GPU)",
                             "profile": "profile each correct solution and print its diagnosis (default off); "
                                        + options.PROFILE_HELP})
    options.add_flags(ev, CheckSettings, only=("atol", "rtol", "eval_timeout"))
    ev.add_argument("--json", action="store_true",
                    help="print the Verdict as JSON (several solutions: a list, each with its file)")
    ev.add_argument("--quiet", "-q", action="store_true",
                    help="no progress lines on stderr (building, waiting for a GPU and who holds it, checking,"
                         " timing, done)")

    command("sessions", help="list past sessions in the database")
    show = command("show", help="a session's tree with statuses and speedups")
    show.add_argument("session", nargs="?", type=options.positive, help="session id (default: latest)")
    show.add_argument("--all", action="store_true", help="every session in the database")
    show.add_argument("--table", action="store_true", help="the variants as a markdown table")
    show.add_argument("--json", action="store_true", help="the variants as JSON")
    show.add_argument("--suite", type=options.positive, metavar="SUITE",
                      help="a suite's report: per problem best speedups, then fast_p and geomean")
    show.add_argument("--markdown", metavar="FILE", help="with --suite: also write the report here")
    show.add_argument("--profile", type=options.positive, metavar="NODE",
                      help="profile this correct variant of SESSION now (a search profiles only its"
                           " parents and its best): asked of the engine if the session runs, else"
                           " taken here; prints one line")
    export = command("export", help="the best correct variant as a KernelBench solution file")
    export.add_argument("session", type=options.positive, help="session id")
    export.add_argument("--node", type=options.positive, help="this variant instead of the best")
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
    ds_export.add_argument("--format", choices=["parquet", "jsonl", "both"], default="both",
                           help="the tables' file format: Parquet, JSON Lines, or both (the default)")
    ds_stats = dataset_sub.add_parser("stats", parents=[common], help="count what export would write")
    for p in (ds_export, ds_stats):
        p.add_argument("sessions", nargs="*", type=options.positive, metavar="SESSION", help="session ids")
        p.add_argument("--suite", type=options.positive, metavar="N", help="the sessions of suite N")
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
    bt.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help=BACKEND_HELP)
    bt.add_argument("--json", action="store_true", help="the results as JSON")
    bt.add_argument("--load", choices=["cores", "compile"], default=None,
                    help="then time every reference again with the host loaded: `cores` runs --load-cores"
                         " busy loops, `compile` keeps ktree's own compile pool building; reports idle vs"
                         " loaded")
    bt.add_argument("--load-cores", type=options.positive, default=None, metavar="N",
                    help="busy loops for --load cores (default: one per core)")
    cpu_timer_help = ("cpu backend: how the timer gets its cores: pause (default) holds the builds while it"
                      " times; pin gives the timer half the cores and the builds the rest (KTREE_CPU_TIMER)")
    bt.add_argument("--cpu-timer", choices=["pause", "pin"], default=None, help=cpu_timer_help)
    bp = bench_command("pipeline", help="a scripted search with no LLM latency: how busy the"
                                               " device is kept, wall time vs compile + device time")
    bp.add_argument("problem", nargs="?", default="softmax")
    bp.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help=BACKEND_HELP)
    bp.add_argument("--language", default=DEFAULT_LANGUAGE, metavar="|".join(languages.choices()),
                    help="the variants' kernel language; with two, one bench per language in turn")
    bp.add_argument("--rounds", type=options.positive, help="default: 3 on cuda, 1 on cpu")
    bp.add_argument("--ideas", type=options.positive, help="default: 4 on cuda, 2 on cpu")
    bp.add_argument("--variants", type=options.positive, help="default: 4 on cuda, 2 on cpu")
    bp.add_argument("--top", type=options.positive, default=2, help="parents kept each round (default 2)")
    bp.add_argument("--compile-workers", type=options.positive, default=None,
                    help="compile processes (default: as the evaluator sizes its pool)")
    bp.add_argument("--gpus", type=options.gpu_list, default=None, metavar="0,1,...", help="the GPUs to"
                    " evaluate on (default: every visible GPU); with several, per-GPU load is reported")
    bp.add_argument("--scaling", action="store_true",
                    help="one device against several in one run: the search on every device given (--gpus;"
                         " on cpu, --cpu-devices) and on the first alone, per source mode (--sources):"
                         " variants per minute, their ratio, each device's busy and idle fractions")
    bp.add_argument("--sources", default="distinct,repeated", metavar="distinct,repeated",
                    help="with --scaling: the source modes to run (default both)")
    bp.add_argument("--cpu-devices", type=options.positive, default=None, metavar="N",
                    help="cpu backend: evaluate on N cpu slots at once (default 1; 2 with --scaling)")
    bp.add_argument("--cold", action="store_true",
                    help="an empty build cache (the precompiled header too) for this run")
    bp.add_argument("--repeat-sources", action="store_true",
                    help="the scripted library's files as they are: identical sources hit the build cache"
                         " and its ideas run out (default: every variant a distinct source, K ideas a call)")
    bp.add_argument("--llm-latency", metavar="SPEC",
                    help="each scripted call waits as a model would: seconds (e.g. 40) or"
                         " lognormal:median=40,sigma=0.5 (default: no wait)")
    bp.add_argument("--suite", type=options.positive, default=1, metavar="N",
                    help="a suite of N problems at once (the scripted ones in turn), one LLM limit and"
                         " one evaluator shared; reports device busy fractions")
    bp.add_argument("--llm-concurrency", type=options.positive, default=8,
                    help="concurrent LLM calls (shared by a suite's problems; default 8)")
    bp.add_argument("--cpu-timer", choices=["pause", "pin"], default=None, help=cpu_timer_help)
    bp.add_argument("--json", action="store_true", help="the results as JSON")
    bp.add_argument("--log", action="store_true",
                    help="one line per node status change on stderr, as the search goes")
    _executor_flags(bp)
    bt.add_argument("--agreement", action="store_true",
                    help="instead: the timer run to run, and against triton's do_bench (GPU)")
    bpr = bench_command("profile", help="what a profile costs per variant (each profiler path) on the"
                                        " seed problems' honest scripted kernels")
    bpr.add_argument("problems", nargs="*", help="scripted problem names (default: the five seed problems)")
    bpr.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help=BACKEND_HELP)
    bpr.add_argument("--path", action="append", choices=["ncu", "torch", "auto"],
                     help="profiler paths to measure (repeatable; default: ncu and torch on cuda, auto on cpu)")
    bpr.add_argument("--variants", type=options.positive, default=None, metavar="N",
                     help="at most N honest variants per problem (default: all)")
    bpr.add_argument("--json", action="store_true", help="the results as JSON")
    bg = bench_command("gpu-cost", help="seconds each variant holds the device, by phase, beside its timing"
                                        " floor, for the seed problems' honest scripted kernels")
    bg.add_argument("problems", nargs="*", help="scripted problem names (default: the five seed problems)")
    bg.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help=BACKEND_HELP)
    bg.add_argument("--variants", type=options.positive, default=3, metavar="N",
                    help="at most N honest variants per problem (default 3)")
    bg.add_argument("--profile", default="off", choices=PROFILE_MODES,
                    help="also profile each correct variant on demand (the profile column; default off)")
    bg.add_argument("--json", action="store_true", help="the results as JSON")
    bd = bench_command("dataset", help="seconds and peak memory of `ktree dataset export` on synthetic rows")
    bd.add_argument("--rows", type=options.positive, default=10_000, help="variant rows (default 10000)")
    bd.add_argument("--sessions", type=options.positive, default=20,
                    help="sessions they are spread over (default 20)")
    bd.add_argument("--json", action="store_true", help="the results as JSON")
    bv = bench_command("verdicts", help="the evaluator on the real-world corpus (tests/realworld): honest"
                                        " kernels must end correct, hacks must not; recall, false rejects")
    bv.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help=BACKEND_HELP)
    bv.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable; default: all)")
    bv.add_argument("--corpus", metavar="DIR",
                    help="another corpus folder with a cases.toml (default: tests/realworld)")
    bv.add_argument("--json", action="store_true", help="the results as JSON")
    bk = bench_command("kernelbench", help="every problem of a KernelBench checkout evaluated (the reference's"
                                           " own forward wrapped as ModelNew, or a folder's solutions):"
                                           " verdict, peak GPU and host memory, held and wall seconds")
    bk.add_argument("path", metavar="PATH",
                    help="a KernelBench checkout, its KernelBench/ folder or one level folder (level1/)")
    bk.add_argument("--levels", metavar="1,2", help="the levels to run (default 1, or the level PATH is)")
    bk.add_argument("--problems", metavar="1-10,19,23",
                    help="only these problem numbers: ranges and lists (default: all)")
    bk.add_argument("--solutions", metavar="DIR",
                    help="a folder of solutions named as the problems (DIR/level1/19_ReLU.py or"
                         " DIR/19_ReLU.py); a problem without one is skipped (default: the reference's own"
                         " forward wrapped as ModelNew, whose expected verdict is flagged)")
    bk.add_argument("--jobs", type=options.positive, default=1, metavar="N",
                    help="problems in flight at once through one evaluator, as a suite's (default 1)")
    bk.add_argument("--out", metavar="DIR",
                    help="write the table and JSON here, and each row to DIR/kernelbench.jsonl as it finishes;"
                         " a rerun with the same DIR skips the problems that already have a verdict there")
    bk.add_argument("--compare-with", metavar="FILE.jsonl",
                    help="an earlier run's rows (its kernelbench.jsonl, or its --out folder): each status set"
                         " beside this run's (the alone column); a differing one fails the bench")
    bk.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help=BACKEND_HELP)
    bk.add_argument("--gpus", type=options.gpu_list, default=None, metavar="0,1,...",
                    help="the GPUs to evaluate on (default: every visible GPU)")
    bk.add_argument("--timeout", "--eval-timeout", dest="timeout", type=options.seconds, default=None,
                    metavar="S", help="each problem's evaluation limit in seconds, as eval's --eval-timeout"
                                      " (default: from the problem's size)")
    bk.add_argument("--cpu-timer", choices=["pause", "pin"], default=None, help=cpu_timer_help)
    bk.add_argument("--json", action="store_true", help="the results as JSON")
    bc = bench_command("compile", help="build time per variant with and without each compile lever")
    bc.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help=BACKEND_HELP)
    bc.add_argument("--sources", type=options.positive, default=2, help="builds per configuration (default 2)")
    bc.add_argument("--concurrent", type=int, default=16,
                    help="then this many distinct builds at once with every lever (default 16; 0: skip)")
    bc.add_argument("--structure", action="append", choices=["stock", "fast", "ctypes"],
                    help="only these solution structures (repeatable; default: all for the backend)")
    bc.add_argument("--side-by-side", action="store_true",
                    help="run the configurations at once (faster, but they share the cores)")
    bc.add_argument("--json", action="store_true", help="the results as JSON")
    return parser

def _browse(args: argparse.Namespace) -> int:
    """No subcommand: the sessions screen."""
    from engine.commands._tui import open_app

    return open_app(db_path(args))


# `ktree COMMAND [SUBCOMMAND]` -> its body: parsed flags in, exit code out.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "": _browse,
    "run": run_cmd.run,
    "suite": suite_cmd.suite,
    "eval": eval_cmd.evaluate,
    "sessions": sessions_cmd.sessions,
    "problems": problems_cmd.problems,
    "show": show_cmd.show,
    "export": export_cmd.export,
    "dataset export": dataset_cmd.export,
    "dataset stats": dataset_cmd.stats,
    "bench pipeline": bench_cmd.pipeline,
    "bench timing": bench_cmd.timing,
    "bench compile": bench_cmd.compile,
    "bench profile": bench_cmd.profile,
    "bench gpu-cost": bench_cmd.gpu_cost,
    "bench verdicts": bench_cmd.verdicts,
    "bench kernelbench": bench_cmd.kernelbench,
    "bench dataset": dataset_cmd.bench,
}


def _times(name: str, args: argparse.Namespace) -> bool:
    """Whether the command may time something on the cpu (and so reads KTREE_CPU_TIMER): a
    listing, an export or a dataset does not; the TUI may start a search."""
    if name == "show":
        return bool(getattr(args, "profile", None))
    return name in ("", "run", "suite", "eval") or (name.startswith("bench ") and name != "bench dataset")


def command_name(args: argparse.Namespace) -> str:
    """The dispatch table's key for parsed flags: `bench timing`, `run`, or "" for none."""
    words = [args.command, getattr(args, "bench", None), getattr(args, "dataset", None)]
    return " ".join(w for w in words if w)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        name = command_name(args)
        if _times(name, args):
            check_cpu_timer()  # every evaluator reads it, the benches' and eval's too
        if name not in COMMANDS:
            raise UsageError(f"unknown command {args.command}")
        return COMMANDS[name](args)
    except UsageError as exc:
        error(str(exc))
        return USAGE_ERROR
    except KeyboardInterrupt:
        say("ktree: interrupted")
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except sqlite3.DatabaseError as exc:  # damage deeper in the file than opening it reads
        error(f"{db_path(args)} is damaged ({exc}); `sqlite3 DB .recover` may save its rows")
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
