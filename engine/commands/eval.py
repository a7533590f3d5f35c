"""`ktree eval REFERENCE SOLUTION...`: solution files checked and timed against a reference, built
at once and timed one at a time; one verdict, or a table of them."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from engine import options
from engine.commands._common import isolation_note
from engine.commands._flags import Commands
from engine.commands._output import emit, emit_json, note, say
from engine.launch import (
    UsageError,
    checked_problem,
    job_cost,
    local_evaluator,
    profile_note,
    resolve_backend,
    tolerances,
)
from engine.options import CheckSettings, Placement


def solution_files(given: list[str]) -> list[tuple[Path, str]]:
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
            raise UsageError(f"{path}: {not_python(source) or 'defines no ModelNew'}")
        out.append((path, source))
    return out


def not_python(source: str) -> str | None:
    """Why a file is no Python at all (its syntax error, and where), or None: said instead of "defines
    no ModelNew" for a file that is not Python, or was cut off."""
    import ast

    try:
        ast.parse(source)
    except SyntaxError as exc:
        return f"is not Python: {exc.msg} (line {exc.lineno})"
    except ValueError as exc:  # a null byte
        return f"is not Python: {exc}"
    return None


def evaluate(args: argparse.Namespace) -> int:
    problem = checked_problem(args.reference)
    solutions = solution_files(args.solution)
    atol, rtol = tolerances(problem, args.atol, args.rtol)
    backend, arch = resolve_backend(args.backend)
    isolation = isolation_note(args.isolation)
    if not args.quiet:  # what a solution can reach, said before it runs
        from engine.evaluate import isolation_detail

        say(f"ktree: isolation: {isolation}{isolation_detail(isolation)}")
    if problem.degenerate:  # said once, before any verdict (each verdict notes it too)
        from engine.problems import DEGENERATE_LINE

        say(f"ktree: {problem.name}: {DEGENERATE_LINE}")
    if said := profile_note(backend, args.profile):
        note(said)
    sizes = problem.sizes_for(backend)
    flops, nbytes = job_cost(problem, sizes)
    evaluator = local_evaluator(backend, arch, args.gpus, isolation=isolation, profile=args.profile)

    from engine.commands._eval_progress import EvalProgress, labels

    progress = EvalProgress(evaluator, len(solutions), quiet=args.quiet)

    async def go() -> list[Any]:
        jobs = [evaluator.job(problem.path, source, sizes, atol=atol, rtol=rtol, flops=flops, bytes=nbytes,
                              eval_timeout=args.eval_timeout) for _, source in solutions]
        names = labels([path for path, _ in solutions])
        try:  # one evaluator: the builds share its compile pool, its devices time one at a time
            return list(await asyncio.gather(*(
                progress.run(name, lambda on_phase, job=job: evaluator.evaluate(job, on_phase))
                for name, job in zip(names, jobs, strict=True))))
        finally:
            await evaluator.close()

    verdicts = asyncio.run(go())
    code = exit_code(verdicts)
    single = len(args.solution) == 1 and not Path(args.solution[0]).is_dir()
    if single:  # one solution: its verdict, as before
        if args.json:
            emit_json(verdicts[0].to_dict())
        else:
            from engine.record.report import format_verdict

            emit(format_verdict(verdicts[0]))
        _say_reference_failed(verdicts, as_json=args.json)
        return code
    named = [(str(path), v) for (path, _), v in zip(solutions, verdicts, strict=True)]
    if args.json:
        emit_json([{"file": path, **v.to_dict()} for path, v in named])
    else:
        from engine.record.report import eval_table

        emit(eval_table(named))
    _say_reference_failed(verdicts, as_json=args.json)
    return code


def exit_code(verdicts: list[Any]) -> int:
    """0 when every solution is correct; 3 when the reference itself failed (nothing could be
    judged); else 1 (`ktree eval --help` says so)."""
    if _reference_failure(verdicts) is not None:
        return 3
    return 0 if all(v.status == "correct" for v in verdicts) else 1


def _reference_failure(verdicts: list[Any]) -> str | None:
    """The log of a verdict that says the reference itself failed, if one does."""
    from engine.evaluate import REFERENCE_FAILED

    return next((v.log for v in verdicts if (v.log or "").startswith(REFERENCE_FAILED)), None)


def _say_reference_failed(verdicts: list[Any], as_json: bool) -> None:
    """Name a failing reference as such: on stdout after the verdicts, on stderr with --json (whose
    stdout stays one JSON document)."""
    from engine.evaluate import REFERENCE_FAILED

    failed = _reference_failure(verdicts)
    if failed:  # its last line is the exception
        reason = next((ln.strip() for ln in reversed(failed.splitlines()) if ln.strip()), "")
        (say if as_json else emit)(f"{REFERENCE_FAILED} (not the solution): {reason}")


def register(commands: Commands) -> None:
    parser = commands.add("eval", evaluate, help="evaluate solution files against a reference",
                          epilog="exit code 0: every solution correct; 1: one or more not correct (incorrect,"
                                 " flagged, failed to build or run, timed out); 2: a usage error; 3: the"
                                 " reference itself failed, so no solution could be judged")
    parser.add_argument("reference", help="KernelBench-format reference (.py) or built-in name")
    parser.add_argument("solution", nargs="+",
                        help="solution file(s) defining ModelNew, or a directory of them (its *.py);"
                             " several are built at once and timed one at a time")
    options.add_flags(parser, Placement, only=("backend", "gpus", "isolation", "profile"),
                      defaults={"profile": "off"},
                      helps={"gpus": "the GPUs it may run on (default: every visible GPU)",
                             "profile": "profile each correct solution and print its diagnosis (default off); "
                                        + options.PROFILE_HELP})
    options.add_flags(parser, CheckSettings, only=("atol", "rtol", "eval_timeout"))
    parser.add_argument("--json", action="store_true",
                        help="print the Verdict as JSON (several solutions: a list, each with its file)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress lines on stderr (building, waiting for a GPU and who holds it,"
                             " checking, timing, done)")
