"""`ktree bench pipeline|timing|compile|profile|gpu-cost|verdicts|kernelbench`: flags -> engine.bench.* ->
a table or JSON; exit 1 when a measurement failed. (`ktree bench dataset` is the dataset command's.)"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from engine import options
from engine.commands._common import db_path, open_store, problem_specs, source_hash
from engine.commands._flags import Commands
from engine.commands._output import emit, emit_json, say
from engine.domain import DEFAULT_LANGUAGE
from engine.evaluate import languages
from engine.launch import (
    UsageError,
    check_local_flags,
    check_scripted,
    checked_gpus,
    checked_problem,
    job_cost,
    make_evaluator,
    parse_languages,
    resolve_backend,
)


def pipeline(args: argparse.Namespace) -> int:
    """A scripted search with no LLM latency: how busy the device is kept."""
    from engine.bench.pipeline import format_pipeline, parse_latency, pipeline_bench

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
    cpu_devices = args.cpu_devices
    if cpu_devices is not None and cuda:
        raise UsageError("--cpu-devices is for the cpu backend (on cuda, --gpus picks the devices)")
    if args.scaling:
        return _scaling(args, problem, backend, arch, languages, evaluator)
    results = []
    for language in languages:
        results.append(asyncio.run(pipeline_bench(
            problem, backend, arch, rounds=args.rounds or (3 if cuda else 1),
            ideas=args.ideas or (4 if cuda else 2), variants=args.variants or (4 if cuda else 2),
            top=args.top, compile_workers=args.compile_workers, cold=args.cold,
            log=sys.stderr if args.log else None, evaluator=evaluator,
            gpus=None if evaluator is not None else checked_gpus(backend, args.gpus),
            repeat_sources=args.repeat_sources, llm_latency=args.llm_latency, suite=args.suite,
            llm_concurrency=args.llm_concurrency, language=language, devices=cpu_devices or 1,
            cpu_timer=args.cpu_timer,
        )))
    if args.json:
        emit_json(results[0] if len(results) == 1 else results)
    else:
        emit("\n\n".join(format_pipeline(r) for r in results))
    return 0 if all(r["status"] == "finished" for r in results) else 1


def _scaling(args: argparse.Namespace, problem: Any, backend: str, arch: str | None,
             languages: list[str], evaluator: Any) -> int:
    """`bench pipeline --scaling`: one device against several, per source mode (engine.bench.scaling)."""
    from engine.bench.scaling import MODES, format_scaling, scaling_bench

    if evaluator is not None:
        raise UsageError("--scaling runs on this host's devices: it is for --executor local")
    if len(languages) > 1:
        raise UsageError("--scaling benches one language at a time")
    if args.repeat_sources or args.cold:
        raise UsageError("--scaling runs both source modes itself (--sources); --repeat-sources and --cold"
                         " are for a single run")
    modes = [m.strip() for m in args.sources.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise UsageError(f"--sources: give one or both of {', '.join(MODES)}")
    if backend == "cuda":
        from engine.evaluate import visible_gpu_indices

        gpus = checked_gpus(backend, args.gpus) or visible_gpu_indices()
        if len(gpus) < 2:
            raise UsageError(f"--scaling needs two GPUs or more (this machine shows {len(gpus)})")
        devices = len(gpus)
    else:
        gpus, devices = None, args.cpu_devices or 2
        if devices < 2:
            raise UsageError("--scaling needs two devices or more: --cpu-devices 2")
    cuda = backend == "cuda"
    result = asyncio.run(scaling_bench(
        problem, backend, arch, gpus=gpus, devices=devices, modes=modes,
        rounds=args.rounds or (3 if cuda else 1), ideas=args.ideas or (4 if cuda else 2),
        variants=args.variants or (4 if cuda else 2), top=args.top, compile_workers=args.compile_workers,
        log=sys.stderr if args.log else None, llm_latency=args.llm_latency, suite=args.suite,
        llm_concurrency=args.llm_concurrency, language=languages[0], cpu_timer=args.cpu_timer))
    if args.json:
        emit_json(result)
    else:
        emit(format_scaling(result))
    return 0 if result["status"] == "finished" else 1


def timing(args: argparse.Namespace) -> int:
    """Each problem's reference, eager and torch.compile, recorded in the DB; `--load` again
    with the host loaded, `--agreement` the timer against itself and triton's do_bench."""
    from engine.bench.reference_timing import (
        agreement,
        agreement_table,
        load_table,
        reference_table,
        time_loaded,
        time_reference,
    )
    from engine.evaluate import LocalEvaluator

    db = db_path(args)
    problems = problem_specs(args.problems)
    backend, arch = resolve_backend(args.backend)
    if args.agreement and backend != "cuda":
        raise UsageError("--agreement compares the timer with triton's do_bench, which needs a GPU: run it with"
                         " --backend cuda on a machine with one")
    if args.agreement:
        rows = asyncio.run(agreement(problems, backend, arch, job_cost))
        if args.json:
            emit_json(rows)
        else:
            emit(agreement_table(rows))
        return 0 if all("error" not in r for r in rows) else 1

    async def go() -> list[dict[str, Any]]:
        store = await open_store(db)
        evaluator = LocalEvaluator(backend, cuda_arch=arch, cpu_timer=args.cpu_timer)
        try:
            rows = await asyncio.gather(*(time_reference(evaluator, p) for p in problems))
            for p, r in zip(problems, rows, strict=True):
                if "error" not in r:
                    await store.reference_times.add(
                        problem=p.name, source_hash=source_hash(p), sizes=r["sizes"],
                        backend=backend, device=r["device"], torch_version=r["torch_version"],
                        eager_ms=r.get("eager_ms"), compile_ms=r.get("compile_ms"))
        finally:
            await store.close()
        return list(rows)

    rows = asyncio.run(go())
    if args.load:
        rows = asyncio.run(time_loaded(rows, problems, backend, arch, args.load, args.load_cores,
                                       cpu_timer=args.cpu_timer))
    if args.json:
        emit_json(rows)
    else:
        emit(reference_table(rows))
        if backend == "cpu":
            emit("cpu: a search measures no torch.compile baseline (its speedups are against eager only); the"
                 " torch.compile times here are `bench timing`'s own, for comparison")
        if args.load:
            emit()
            emit(load_table(rows))
    return 0 if all("error" not in r for r in rows) else 1


def compile(args: argparse.Namespace) -> int:
    """Build time per variant with and without each compile lever."""
    from engine.bench.compile import CONFIGS, compile_bench, compile_table

    backend, arch = resolve_backend(args.backend)
    has = sorted({structure for _, structure, _ in CONFIGS[backend]})
    if args.structure and not set(args.structure) & set(has):
        raise UsageError(f"--structure {', '.join(args.structure)}: the {backend} backend builds only the"
                         f" {', '.join(has)} structure (fast and ctypes are CUDA solution structures)")
    result = asyncio.run(compile_bench(backend, arch or "", sources=args.sources,
                                       concurrent=max(0, args.concurrent),
                                       parallel_configs=args.side_by_side,
                                       structures=args.structure))
    if args.json:
        emit_json(result)
    else:
        emit(compile_table(result))
    failed = any(r["compiled"] < r["builds"] for r in result["configs"])
    return 1 if failed else 0


def _check_honest_problems(problems: list[str], backend: str) -> None:
    """UsageError for a problem with no honest scripted kernels on this backend (the benches
    that evaluate the scripted library's honest kernels)."""
    from engine.bench.honest import honest_variants
    from engine.llm.scripted import scripted_problems

    for name in problems:
        if not honest_variants(name, backend):
            raise UsageError(f"no honest scripted {backend} kernels for {name!r} (scripted problems:"
                             f" {', '.join(scripted_problems())})")


def profile(args: argparse.Namespace) -> int:
    """What a profile costs per variant, on each profiler path."""
    from engine.bench.profile_cost import profile_bench, profile_table

    backend, arch = resolve_backend(args.backend)
    _check_honest_problems(args.problems, backend)
    if backend == "cpu" and args.path and set(args.path) & {"ncu", "torch"}:
        raise UsageError("--path ncu and torch profile GPU kernels: on cpu only auto")
    result = asyncio.run(profile_bench(backend, arch, args.problems or None, args.path, args.variants))
    if args.json:
        emit_json(result)
    else:
        emit(profile_table(result))
    return 0 if all(s["profiled"] == s["variants"] for s in result["paths"].values()) else 1


def gpu_cost(args: argparse.Namespace) -> int:
    """Seconds each variant holds the device, by phase."""
    from engine.bench.gpu_cost import gpu_cost_bench, gpu_cost_table

    backend, arch = resolve_backend(args.backend)
    _check_honest_problems(args.problems, backend)
    result = asyncio.run(gpu_cost_bench(backend, arch, args.problems or None, args.variants, args.profile))
    if args.json:
        emit_json(result)
    else:
        emit(gpu_cost_table(result))
    return 0 if result["rows"] and all(r["status"] == "correct" for r in result["rows"]) else 1


def verdicts(args: argparse.Namespace) -> int:
    """The real-world corpus' cases evaluated: 0 only when every honest kernel is correct and no
    hack is."""
    from pathlib import Path

    from engine.bench.verdicts import CorpusError, load_cases, select, verdicts_bench, verdicts_table

    corpus = Path(args.corpus) if args.corpus else None
    try:
        select(load_cases(corpus), args.case)
    except CorpusError as exc:
        raise UsageError(str(exc)) from None
    backend, arch = resolve_backend(args.backend)
    result = asyncio.run(verdicts_bench(backend, arch, args.case, corpus))
    if args.json:
        emit_json(result)
    else:
        emit(verdicts_table(result))
    return 0 if result["summary"]["passed"] else 1


def kernelbench(args: argparse.Namespace) -> int:
    """Every selected problem of a KernelBench checkout evaluated with the wrapped reference (or a
    folder's solutions): 0 when each that could be judged got a verdict other than crashed or
    timeout, none is over the memory bound and none differs from --compare-with's."""
    from pathlib import Path

    from engine.bench.kernelbench import (
        KernelBenchError,
        find_problems,
        kernelbench_bench,
        kernelbench_table,
        parse_levels,
        parse_numbers,
        read_rows,
        write_outputs,
    )

    solutions = Path(args.solutions) if args.solutions else None
    if solutions is not None and not solutions.is_dir():
        raise UsageError(f"--solutions {solutions}: no such folder")
    try:
        problems = find_problems(Path(args.path), parse_levels(args.levels), parse_numbers(args.problems))
        alone = read_rows(args.compare_with) if args.compare_with else None
    except KernelBenchError as exc:
        raise UsageError(str(exc)) from None
    backend, arch = resolve_backend(args.backend)
    gpus = checked_gpus(backend, args.gpus)
    out = Path(args.out) if args.out else None
    result = asyncio.run(kernelbench_bench(problems, backend, arch, gpus=gpus, solutions=solutions,
                                           jobs=args.jobs, out=out, timeout_s=args.eval_timeout, alone=alone,
                                           cpu_timer=args.cpu_timer))
    if out is not None:
        write_outputs(out, result)
        say(f"ktree: rows in {out / 'kernelbench.jsonl'}, the table in {out / 'kernelbench.md'}, the whole"
            f" result in {out / 'kernelbench.json'}")
    if args.json:
        emit_json(result)
    else:
        emit(kernelbench_table(result))
    return 0 if result["summary"]["passed"] else 1


def register(commands: Commands) -> None:
    """`ktree bench ...`: each bench's flags, those it shares with a search (or another bench)
    declared once in engine.options' parts (`add_bench_flags`)."""
    group = commands.group("bench", help="benchmarks")
    flags = options.add_bench_flags
    bt = group.add("timing", timing, help="time each problem's reference, eager and torch.compile")
    bt.add_argument("problems", nargs="*", help="problem names or paths (default: all built-in)")
    flags(bt, "backend")
    bt.add_argument("--json", action="store_true", help="the results as JSON")
    bt.add_argument("--load", choices=["cores", "compile"], default=None,
                    help="then time every reference again with the host loaded: `cores` runs --load-cores"
                         " busy loops, `compile` keeps ktree's own compile pool building; reports idle vs"
                         " loaded")
    bt.add_argument("--load-cores", type=options.positive, default=None, metavar="N",
                    help="busy loops for --load cores (default: one per core)")
    flags(bt, "cpu_timer")
    bt.add_argument("--agreement", action="store_true",
                    help="instead: the timer run to run, and against triton's do_bench (GPU)")
    _pipeline_flags(group.add("pipeline", pipeline, help="a scripted search with no LLM latency: how busy the"
                                                         " device is kept, wall time vs compile + device time"))
    bpr = group.add("profile", profile, help="what a profile costs per variant (each profiler path) on the"
                                             " seed problems' honest scripted kernels")
    bpr.add_argument("problems", nargs="*", help="scripted problem names (default: the five seed problems)")
    flags(bpr, "backend")
    bpr.add_argument("--path", action="append", choices=["ncu", "torch", "auto"],
                     help="profiler paths to measure (repeatable; default: ncu and torch on cuda, auto on cpu)")
    bpr.add_argument("--variants", type=options.positive, default=None, metavar="N",
                     help="at most N honest variants per problem (default: all)")
    bpr.add_argument("--json", action="store_true", help="the results as JSON")
    bg = group.add("gpu-cost", gpu_cost, help="seconds each variant holds the device, by phase, beside its"
                                              " timing floor, for the seed problems' honest scripted kernels")
    bg.add_argument("problems", nargs="*", help="scripted problem names (default: the five seed problems)")
    flags(bg, "backend")
    bg.add_argument("--variants", type=options.positive, default=3, metavar="N",
                    help="at most N honest variants per problem (default 3)")
    flags(bg, "profile", defaults={"profile": "off"},
          helps={"profile": "also profile each correct variant on demand (the profile column; default off)"})
    bg.add_argument("--json", action="store_true", help="the results as JSON")
    bv = group.add("verdicts", verdicts,
                   help="the evaluator on the real-world corpus (tests/realworld): honest"
                        " kernels must end correct, hacks must not; recall, false rejects")
    flags(bv, "backend")
    bv.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable; default: all)")
    bv.add_argument("--corpus", metavar="DIR",
                    help="another corpus folder with a cases.toml (default: tests/realworld)")
    bv.add_argument("--json", action="store_true", help="the results as JSON")
    _kernelbench_flags(group.add(
        "kernelbench", kernelbench, help="every problem of a KernelBench checkout evaluated (the reference's"
                                         " own forward wrapped as ModelNew, or a folder's solutions):"
                                         " verdict, peak GPU and host memory, held and wall seconds"))
    bc = group.add("compile", compile, help="build time per variant with and without each compile lever")
    flags(bc, "backend")
    bc.add_argument("--sources", type=options.positive, default=2, help="builds per configuration (default 2)")
    bc.add_argument("--concurrent", type=int, default=16,
                    help="then this many distinct builds at once with every lever (default 16; 0: skip)")
    bc.add_argument("--structure", action="append", choices=["stock", "fast", "ctypes"],
                    help="only these solution structures (repeatable; default: all for the backend)")
    bc.add_argument("--side-by-side", action="store_true",
                    help="run the configurations at once (faster, but they share the cores)")
    bc.add_argument("--json", action="store_true", help="the results as JSON")


def _pipeline_flags(bp: argparse.ArgumentParser) -> None:
    bp.add_argument("problem", nargs="?", default="softmax")
    options.add_bench_flags(bp, "backend")
    bp.add_argument("--language", default=DEFAULT_LANGUAGE, metavar="|".join(languages.choices()),
                    help="the variants' kernel language; with two, one bench per language in turn")
    options.add_bench_flags(
        bp, "rounds", "ideas", "variants", "top", "compile_workers", "gpus",
        defaults={"rounds": None, "ideas": None, "variants": None},
        helps={"rounds": "default: 3 on cuda, 1 on cpu", "ideas": "default: 4 on cuda, 2 on cpu",
               "variants": "default: 4 on cuda, 2 on cpu", "top": "parents kept each round (default 2)",
               "compile_workers": "compile processes (default: as the evaluator sizes its pool)",
               "gpus": "the GPUs to evaluate on (default: every visible GPU); with several, per-GPU load is"
                       " reported"})
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
    options.add_bench_flags(bp, "llm_concurrency", "cpu_timer",
                            helps={"llm_concurrency": "concurrent LLM calls (shared by a suite's problems;"
                                                      " default 8)"})
    bp.add_argument("--json", action="store_true", help="the results as JSON")
    bp.add_argument("--log", action="store_true",
                    help="one line per node status change on stderr, as the search goes")
    options.add_bench_flags(bp, "executor", "ray_address", "ray_workers")


def _kernelbench_flags(bk: argparse.ArgumentParser) -> None:
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
    options.add_bench_flags(
        bk, "backend", "gpus", "eval_timeout", "cpu_timer",
        helps={"gpus": "the GPUs to evaluate on (default: every visible GPU)",
               "eval_timeout": "each problem's evaluation limit in seconds, as eval's --eval-timeout"
                               " (default: from the problem's size)"})
    bk.add_argument("--json", action="store_true", help="the results as JSON")
