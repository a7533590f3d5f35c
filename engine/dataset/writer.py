"""`ktree dataset export` and `stats`: the selected sessions streamed, one at a time, into the
tables (variants, ideas, problems) and the training views (sft, preference, reward), filtered by
the hygiene options, then a manifest and a dataset card. Export never writes to the DB."""

from __future__ import annotations

import hashlib
import itertools
import json
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from engine.dataset import source as db
from engine.dataset.card import card_text
from engine.dataset.hygiene import REWARD_FORMULA, held_out_problems, is_flagged, reward
from engine.dataset.records import SessionReader, problem_key
from engine.dataset.sink import FORMATS, Counting, Files
from engine.dataset.source import DatasetError, Selection
from engine.domain import language_label
from engine.record.store import SCHEMA_VERSION

VIEWS = ("tables", "sft", "preference", "reward")
VIEW_TABLES = {"tables": ("variants", "ideas", "problems"), "sft": ("sft",), "preference": ("preference",),
               "reward": ("reward",)}
FLAGGED_OUT_BY_DEFAULT = ("sft", "preference")


@dataclass(frozen=True)
class ExportOptions:
    selection: Selection = field(default_factory=Selection)
    views: tuple[str, ...] = ("tables",)
    formats: tuple[str, ...] = FORMATS
    correct_only: bool = False
    min_speedup: float | None = None
    dedupe: bool = False
    exclude_flagged: bool | None = None  # None: on for sft and preference, off for the rest
    split_by: str | None = None  # "problem"
    test_fraction: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.views) - set(VIEWS))
        if unknown or not self.views:
            raise DatasetError(f"unknown view {', '.join(unknown) or '(none)'}: choose from {', '.join(VIEWS)}")
        if not self.formats or set(self.formats) - set(FORMATS):
            raise DatasetError(f"formats are {' and '.join(FORMATS)}")
        if self.split_by not in (None, "problem"):
            raise DatasetError(f"--split-by {self.split_by}: only `problem` is supported")
        if not 0 < self.test_fraction < 1:
            raise DatasetError(f"--test-fraction {self.test_fraction:g} must be between 0 and 1")
        if self.min_speedup is not None and not self.min_speedup > 0:
            raise DatasetError(f"--min-speedup {self.min_speedup:g} must be more than 0")

    def flagged_out(self, view: str) -> bool:
        return self.exclude_flagged if self.exclude_flagged is not None else view in FLAGGED_OUT_BY_DEFAULT


def ktree_version() -> str:
    try:
        return metadata.version("ktree")
    except metadata.PackageNotFoundError:
        return "unknown"


def check_out_dir(out: Path, force: bool) -> None:
    """`out` may be new or empty; one that holds files takes --force, which removes the files a
    previous export wrote there (its manifest lists them) and nothing else."""
    if out.exists() and not out.is_dir():
        raise DatasetError(f"--out {out} is a file, not a directory")
    if not out.exists() or not any(out.iterdir()):
        return
    if not force:
        raise DatasetError(f"--out {out} exists and is not empty; add --force to write over a previous export")
    try:
        old = json.loads((out / "manifest.json").read_text()).get("files", {})
    except (OSError, ValueError):
        old = {}
    for name in [*old, "manifest.json", "README.md"]:
        path = out / Path(name).name
        if path.is_file():
            path.unlink()


class _Problems:
    """The problems table: a row per problem (name, source, sizes, backend) and device, with the
    median of the reference times its evaluations took."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.times: dict[tuple[str, str, str, str], dict[str | None, dict[str, list[float]]]] = {}

    def session(self, reader: SessionReader) -> tuple[str, str, str, str]:
        s = reader.session
        key = problem_key(s, reader.reference)
        row = self.rows.setdefault(key, {
            "problem": s.problem, "split": reader.split, "scripted": True, "problem_path": s.problem_path,
            "source_hash": key[1], "source": reader.reference, "sizes": json.dumps(s.sizes),
            "backend": s.backend, "sessions": [], "degenerate": None})
        row["sessions"].append(s.id)
        row["scripted"] = row["scripted"] and s.scripted  # scripted only if every session was
        if isinstance(s.config.get("degenerate"), bool):
            row["degenerate"] = s.config["degenerate"]
        self.times.setdefault(key, {})
        return key

    def variant(self, key: tuple[str, str, str, str], record: dict[str, Any]) -> None:
        if record["ref_eager_ms"] is None and record["ref_compile_ms"] is None:
            return
        got = self.times[key].setdefault(record["gpu"], {"eager": [], "compile": []})
        if record["ref_eager_ms"] is not None:
            got["eager"].append(record["ref_eager_ms"])
        if record["ref_compile_ms"] is not None:
            got["compile"].append(record["ref_compile_ms"])

    def out(self) -> list[dict[str, Any]]:
        rows = []
        for key, row in self.rows.items():
            for gpu, got in sorted(self.times[key].items(), key=lambda kv: kv[0] or "") or [(None, None)]:
                eager, compiled = (got["eager"], got["compile"]) if got else ([], [])
                rows.append({**row, "gpu": gpu,
                             "ref_eager_ms": statistics.median(eager) if eager else None,
                             "ref_compile_ms": statistics.median(compiled) if compiled else None,
                             "evaluations": max(len(eager), len(compiled))})
        return rows


def _better(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """`a` beats `b` as a preference pair: a is correct, and b is not, or b is slower beyond the
    timing noise (their speedup intervals apart; without intervals, a lower median). Between an
    own-kernel answer and a library-marked one (both correct) the reward tier decides: the
    own-kernel one wins at equal speed (within noise) and whenever its reward is higher; the
    library one only when faster beyond noise and higher in reward, so a margin is never negative."""
    if a["status"] != "correct" or a["speedup_eager"] is None:
        return False
    if b["status"] != "correct":
        return True
    if b["speedup_eager"] is None:
        return False
    if bool(a.get("library")) != bool(b.get("library")):
        if a["reward"] <= b["reward"]:
            return False
        return not a.get("library") or _faster(a, b)
    return _faster(a, b)


def _faster(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """`a` is faster than `b` beyond the timing noise (intervals apart; else a higher median)."""
    if None not in (a["speedup_lo"], b["speedup_hi"]):
        return a["speedup_lo"] > b["speedup_hi"]
    return a["speedup_eager"] > b["speedup_eager"]


def _pairs(group: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for a, b in itertools.combinations(group, 2):
        if _better(a, b):
            out.append((a, b))
        elif _better(b, a):
            out.append((b, a))
    return out


def run(db_path: Path, options: ExportOptions, out: Path | None = None, force: bool = False) -> dict[str, Any]:
    """Export the selection to `out` (None: count only, for `stats`); returns the manifest."""
    if out is not None:
        check_out_dir(out, force)
    conn = db.open_readonly(db_path)
    try:
        sessions, left_out = db.select_sessions(conn, options.selection)
        if db.count_variants(conn, sessions, options.correct_only, options.min_speedup) == 0:
            filtered = options.correct_only or options.min_speedup is not None
            what = " that pass --correct-only / --min-speedup" if filtered else ""
            raise DatasetError(f"empty selection: the {len(sessions)} session(s) hold no variants{what}")
        held_out = held_out_problems((s.problem for s in sessions), options.test_fraction, options.seed) \
            if options.split_by else frozenset()
        if options.split_by and not held_out:
            raise DatasetError("--split-by problem needs two problems or more in the selection; it has one")
        splits = ("train", "test") if options.split_by else None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        sink = Files(out, options.formats, splits) if out is not None else Counting(splits)
        try:
            counts = _stream(conn, sessions, held_out, options, sink)
        finally:
            sink.close()
    finally:
        conn.close()
    rows: dict[str, Any] = {}
    for (table, split), n in sorted(sink.rows.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        rows[table] = {**rows.get(table, {}), split: n} if split else n
    manifest = {
        "ktree_version": ktree_version(), "schema_version": SCHEMA_VERSION,
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "database": db_path.name,
        "selection": {"sessions": list(options.selection.sessions), "suite": options.selection.suite,
                      "all": not options.selection.sessions and options.selection.suite is None,
                      "include_scripted": options.selection.include_scripted},
        "options": {**{k: v for k, v in asdict(options).items() if k != "selection"},
                    "exclude_flagged": {v: options.flagged_out(v) for v in options.views}},
        "sessions": [s.describe() for s in sessions],
        "scripted_left_out": [s.id for s in left_out],
        "split": None if not options.split_by else {
            "by": options.split_by, "test_problems": sorted(held_out),
            "train_problems": sorted({s.problem for s in sessions} - held_out)},
        "rows": rows, "files": sink.files(), "seconds": counts.pop("seconds"), "counts": counts,
        "reward_formula": REWARD_FORMULA,
    }
    if out is not None:
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (out / "README.md").write_text(card_text(manifest))
    return manifest


def _stream(conn: Any, sessions: list[db.Session], held_out: frozenset[str], options: ExportOptions,
            sink: Counting) -> dict[str, Any]:
    """Every session's rows into the sink; the counts the card gives (over the selected variants)."""
    views = set(options.views)
    for view in options.views:
        for table in VIEW_TABLES[view]:
            sink.open_table(table)
    counts: dict[str, Counter[str]] = {k: Counter() for k in ("status", "language", "problem", "model", "gpu")}
    seen: set[str] = set()
    problems = _Problems()
    started = time.monotonic()
    for session in sessions:
        reader = SessionReader(conn, session, "test" if session.problem in held_out else "train")
        key = problems.session(reader)
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for rec in reader.variants():
            problems.variant(key, rec)
            if (options.correct_only or options.min_speedup is not None) and rec["status"] != "correct":
                continue
            if options.min_speedup is not None and (rec["speedup_eager"] or 0) < options.min_speedup:
                continue
            if options.dedupe and rec["source_hash"]:
                if rec["source_hash"] in seen:
                    continue
                seen.add(rec["source_hash"])
            flagged = is_flagged(rec["status"], rec["flags"])
            if not (flagged and options.flagged_out("tables")):
                # Counted as a reader names them: C++ on the cpu backend, no GPU there (its cores).
                on_cpu = rec["backend"] == "cpu"
                gpu = f"none (cpu {rec['gpu']})" if on_cpu and rec["gpu"] else rec["gpu"] or "(not measured)"
                for name, value in (("status", rec["status"]),
                                    ("language", language_label(rec["language"], rec["backend"])),
                                    ("problem", rec["problem"]), ("model", rec["model"] or "(human)"),
                                    ("gpu", gpu)):
                    counts[name][value] += 1
                if "tables" in views:
                    sink.write("variants", rec)
            if rec["prompt"] is None or rec["reply"] is None:
                continue  # a person's edit, or a call never made: no prompt -> reply to learn from
            score = reward(rec["status"], rec["speedup_eager"], library=bool(rec["library"]))
            if "sft" in views and not (flagged and options.flagged_out("sft")) and rec["status"] == "correct" \
                    and rec["speedup_eager"] is not None and rec["base_speedup"] is not None \
                    and rec["speedup_eager"] > rec["base_speedup"]:
                sink.write("sft", {**rec, "completion": rec["reply"]})
            if "reward" in views and score is not None and not (flagged and options.flagged_out("reward")):
                sink.write("reward", {**rec, "completion": rec["reply"], "reward": score})
            if "preference" in views and score is not None and rec["origin"] == "llm" \
                    and not (flagged and options.flagged_out("preference")):
                prompt_hash = hashlib.sha256(rec["prompt"].encode()).hexdigest()
                groups[(rec["idea_node_id"], rec["parent_node_id"], rec["language"], prompt_hash)].append(
                    {k: rec[k] for k in ("node_id", "status", "speedup_eager", "speedup_lo", "speedup_hi",
                                         "library", "reply", "prompt", "idea_node_id", "parent_node_id",
                                         "language", "session_id", "problem", "split", "scripted")}
                    | {"reward": score})
        if "tables" in views:
            for idea in reader.ideas():
                sink.write("ideas", idea)
        for group in groups.values():
            for chosen, rejected in _pairs(group):
                sink.write("preference", {
                    **chosen, "chosen": chosen["reply"], "rejected": rejected["reply"],
                    "chosen_node_id": chosen["node_id"], "rejected_node_id": rejected["node_id"],
                    "chosen_status": chosen["status"], "rejected_status": rejected["status"],
                    "chosen_speedup": chosen["speedup_eager"],
                    "rejected_speedup": rejected["speedup_eager"] if rejected["status"] == "correct" else None,
                    "chosen_library": chosen["library"], "rejected_library": rejected["library"],
                    "margin": chosen["reward"] - rejected["reward"]})
    references = problems.out()
    if "tables" in views:
        for row in references:
            sink.write("problems", row)
    # What the reference was timed as, for the card to say only that (the cpu backend has no
    # torch.compile baseline: its ref_compile_ms is null in every row).
    timed = [name for name, column in (("PyTorch eager", "ref_eager_ms"), ("torch.compile", "ref_compile_ms"))
             if any(row[column] is not None for row in references)]
    return {**{f"by_{k}": dict(sorted(v.items())) for k, v in counts.items()},
            "variants": sum(counts["status"].values()), "timed_against": timed,
            "seconds": round(time.monotonic() - started, 3)}
