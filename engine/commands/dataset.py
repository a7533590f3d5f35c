"""`ktree dataset export|stats` and `ktree bench dataset`: flags -> engine.dataset -> a few lines.
Bad input (an unknown session, an empty selection, a non-empty --out without --force) is one line
and exit 2, through UsageError."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine import options
from engine.commands._common import db_path
from engine.commands._flags import Commands
from engine.commands._output import emit, emit_json
from engine.launch import UsageError


def _options(args: argparse.Namespace) -> Any:
    from engine.dataset.sink import FORMATS
    from engine.dataset.source import DatasetError, Selection
    from engine.dataset.writer import VIEWS, ExportOptions

    if args.all and (args.sessions or args.suite is not None):
        raise UsageError("--all exports every session: give no SESSION or --suite with it")
    if args.sessions and args.suite is not None:
        raise UsageError("give SESSION ids or --suite N, not both")
    if args.split_by is None and (args.test_fraction is not None or args.seed is not None):
        raise UsageError("--test-fraction and --seed choose the split: they need --split-by problem")
    views = tuple(dict.fromkeys(v for v in args.view or ["tables"] for v in (VIEWS if v == "all" else (v,))))
    try:
        return ExportOptions(
            selection=Selection(sessions=tuple(args.sessions), suite=args.suite,
                                include_scripted=args.include_scripted),
            views=views, formats=FORMATS if getattr(args, "format", "both") == "both" else (args.format,),
            correct_only=args.correct_only, min_speedup=args.min_speedup, dedupe=args.dedupe,
            exclude_flagged=args.exclude_flagged, split_by=args.split_by,
            test_fraction=0.2 if args.test_fraction is None else args.test_fraction,
            seed=args.seed or 0)
    except DatasetError as exc:
        raise UsageError(str(exc)) from None


def _rows(manifest: dict[str, Any]) -> str:
    return ", ".join(f"{table} {n if isinstance(n, int) else ' + '.join(f'{v} {k}' for k, v in n.items())}"
                     for table, n in manifest["rows"].items())


def export(args: argparse.Namespace) -> int:
    from engine.dataset.source import DatasetError
    from engine.dataset.writer import run

    options = _options(args)
    out = Path(args.out)
    try:
        manifest = run(db_path(args), options, out, force=args.force)
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc}") from None
    if args.json:
        emit_json(manifest)
    else:
        sessions = manifest["sessions"]
        left = manifest["scripted_left_out"]
        emit(f"wrote {out}: {_rows(manifest)} from {len(sessions)} session(s) in {manifest['seconds']:.2f} s;"
              f" card {out / 'README.md'}, manifest {out / 'manifest.json'}")
        if left:
            emit(f"left out {len(left)} scripted session(s) ({', '.join(map(str, left))}): --include-scripted"
                  " exports them")
    return 0


def stats(args: argparse.Namespace) -> int:
    """What `export` would write, counted, nothing written."""
    from engine.dataset.source import DatasetError
    from engine.dataset.writer import run

    options = _options(args)
    try:
        manifest = run(db_path(args), options, None)
    except DatasetError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        emit_json(manifest)
        return 0
    counts = manifest["counts"]
    scripted = sum(s["scripted"] for s in manifest["sessions"])
    lines = [f"{len(manifest['sessions'])} session(s) ({scripted} scripted), {len(counts['by_problem'])}"
             f" problem(s), {counts['variants']} variant(s) selected",
             f"rows: {_rows(manifest)}"]
    if manifest["scripted_left_out"]:
        lines.append(f"scripted sessions left out: {', '.join(map(str, manifest['scripted_left_out']))}"
                     " (--include-scripted)")
    for key in ("status", "language", "problem", "model", "gpu"):
        got = counts[f"by_{key}"]
        lines.append(f"by {key}: " + (", ".join(f"{k} {n}" for k, n in got.items()) or "-"))
    emit("\n".join(lines))
    return 0


def bench(args: argparse.Namespace) -> int:
    from engine.bench.dataset import dataset_bench, dataset_table

    result = dataset_bench(args.rows, args.sessions)
    if args.json:
        emit_json(result)
    else:
        emit(dataset_table(result))
    return 0


def register(commands: Commands) -> None:
    """`ktree dataset export|stats`, and `ktree bench dataset` in the benches' group."""
    dataset = commands.group("dataset",
                             help="the searches as training data: Parquet/JSONL tables,"
                                  " sft/preference/reward views and a dataset card (docs/dataset.md)")
    ds_export = dataset.add("export", export, help="write the selection to a folder")
    ds_export.add_argument("--out", required=True, metavar="DIR", help="the folder (new or empty)")
    ds_export.add_argument("--force", action="store_true", help="write over a previous export in DIR")
    ds_export.add_argument("--format", choices=["parquet", "jsonl", "both"], default="both",
                           help="the tables' file format: Parquet, JSON Lines, or both (the default)")
    ds_stats = dataset.add("stats", stats, help="count what export would write")
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
    bd = commands.group("bench").add(
        "dataset", bench, help="seconds and peak memory of `ktree dataset export` on synthetic rows")
    bd.add_argument("--rows", type=options.positive, default=10_000, help="variant rows (default 10000)")
    bd.add_argument("--sessions", type=options.positive, default=20,
                    help="sessions they are spread over (default 20)")
    bd.add_argument("--json", action="store_true", help="the results as JSON")
