"""`ktree dataset`: the recorded scripted search (cpu backend) exported in every view and loaded as
a user would (pyarrow, pandas: `datasets` is not installed on CI, see pyproject.toml), row counts
against the DB, the card against the files, --dedupe on a planted duplicate, the split by problem
on a synthetic many-problem DB, and bad input (one line, exit 2). No compile here: the search is
the session's shared recording."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from engine.bench.dataset import synthetic_db
from engine.cli import main
from engine.dataset.hygiene import is_flagged, normalised_source, reward, source_hash
from engine.domain import language_label
from tests.conftest import query

TABLES = ("variants", "ideas", "problems", "sft", "preference", "reward")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _export(db: Path, out: Path, *flags: str) -> dict:
    assert main(["dataset", "export", "--db", str(db), "--out", str(out), *flags]) == 0
    return json.loads((out / "manifest.json").read_text())


def _copy(db: Path, to: Path) -> Path:
    """A copy of a (WAL) DB, whole, through SQLite's backup."""
    with sqlite3.connect(db) as src, sqlite3.connect(to) as dst:
        src.backup(dst)
    return to


@pytest.fixture(scope="module")
def exported(recorded_search: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    db = recorded_search["db"]
    before = _sha(db)
    out = tmp_path_factory.mktemp("dataset") / "all"
    manifest = _export(db, out, "--include-scripted", "--view", "all")
    return {"db": db, "out": out, "manifest": manifest, "db_sha_before": before}


@pytest.mark.slow
def test_every_view_loads_with_pyarrow_and_pandas(exported: dict) -> None:
    out = exported["out"]
    for table in TABLES:
        arrow = pq.read_table(out / f"{table}.parquet")
        frame = pd.read_parquet(out / f"{table}.parquet")
        lines = pd.read_json(out / f"{table}.jsonl", lines=True)
        assert arrow.num_rows == len(frame) == len(lines) == exported["manifest"]["rows"][table], table
        # an empty view keeps its schema in Parquet; its JSONL has no line to carry column names
        assert list(frame.columns) == arrow.schema.names and arrow.schema.names, table
        if len(lines):
            assert list(lines.columns) == arrow.schema.names, table
        assert frame["scripted"].all() and (frame["split"] == "train").all()
    counts = exported["manifest"]["counts"]  # a cpu search: C++ kernels, no GPU (its cores named)
    assert set(counts["by_language"]) == {"C++ (cpu)"}, counts["by_language"]
    assert all(g.startswith("none (cpu ") or g == "(not measured)" for g in counts["by_gpu"]), counts["by_gpu"]
    # sft holds only variants faster than their parent: on a loaded host a run may have none (its
    # rows are checked against the variants table in test_the_views_keep_their_promises); the
    # preference pairs come from the library's correct/incorrect replies, whatever the timings
    assert exported["manifest"]["rows"]["preference"] > 0


@pytest.mark.slow
def test_row_counts_match_the_db_which_export_leaves_alone(exported: dict) -> None:
    db, out = exported["db"], exported["out"]
    variants = pd.read_parquet(out / "variants.parquet")
    ids = [r[0] for r in query(db, "SELECT id FROM nodes WHERE kind = 'variant' ORDER BY id")]
    assert variants["node_id"].tolist() == ids
    statuses = dict(query(db, "SELECT id, status FROM nodes WHERE kind = 'variant'"))
    assert all(statuses[n] == s for n, s in zip(variants["node_id"], variants["status"], strict=True))
    # each variant's prompt and reply are its recorded call's
    calls = dict(query(db, "SELECT node_id, reply FROM llm_calls WHERE purpose IN ('implement', 'fix')"))
    assert all(calls[n] == r for n, r in zip(variants["node_id"], variants["reply"], strict=True))
    ideas = pd.read_parquet(out / "ideas.parquet")
    assert len(ideas) == query(db, "SELECT COUNT(*) FROM nodes WHERE kind = 'idea' AND status = 'ok'")[0][0]
    assert ideas["prompt"].notna().all()  # every scripted idea has the call that proposed it
    assert ideas["variants"].sum() == len(variants)
    problems = pd.read_parquet(out / "problems.parquet")
    assert problems["problem"].tolist() == ["softmax"] and problems["ref_eager_ms"].iloc[0] > 0
    evaluated = variants[variants["status"].isin(["correct", "incorrect", "compile_error", "runtime_error",
                                                  "timeout", "crashed", "flagged", "failed"])]
    assert len(pd.read_parquet(out / "reward.parquet")) == len(evaluated)
    assert _sha(db) == exported["db_sha_before"]


@pytest.mark.slow
def test_the_views_keep_their_promises(exported: dict) -> None:
    out = exported["out"]
    variants = pd.read_parquet(out / "variants.parquet").set_index("node_id")
    sft = pd.read_parquet(out / "sft.parquet")
    for row in sft.itertuples():
        v = variants.loc[row.node_id]
        assert v.status == "correct" and v.speedup_eager > v.base_speedup and row.completion == v.reply
        assert not is_flagged(v.status, list(v["flags"]))
    flagged = [is_flagged(s, list(f)) for s, f in zip(variants.status, variants["flags"], strict=True)]
    expected_sft = variants[(variants.status == "correct") & (variants.speedup_eager > variants.base_speedup)
                            & variants.prompt.notna() & ~pd.Series(flagged, index=variants.index)]
    assert sorted(sft["node_id"]) == sorted(expected_sft.index)
    pref = pd.read_parquet(out / "preference.parquet")
    for row in pref.itertuples():
        chosen, rejected = variants.loc[row.chosen_node_id], variants.loc[row.rejected_node_id]
        assert chosen.prompt == rejected.prompt == row.prompt and chosen.idea_node_id == rejected.idea_node_id
        assert chosen.status == "correct" and row.margin > 0
        if rejected.status == "correct" and pd.notna(chosen.speedup_lo) and pd.notna(rejected.speedup_hi):
            assert chosen.speedup_lo > rejected.speedup_hi  # intervals apart
        elif rejected.status == "correct":  # a time the judge's outside clock set has no interval: medians
            assert chosen.speedup_eager > rejected.speedup_eager
    rewards = pd.read_parquet(out / "reward.parquet")
    for row in rewards.itertuples():
        assert row.reward == pytest.approx(reward(row.status, variants.loc[row.node_id].speedup_eager))


@pytest.mark.slow
def test_the_card_counts_match_the_files(exported: dict) -> None:
    out = exported["out"]
    card = (out / "README.md").read_text()
    variants = pd.read_parquet(out / "variants.parquet")

    def section(title: str) -> dict[str, int]:
        body = card.split(f"### {title}\n", 1)[1].split("\n#", 1)[0]
        return {m[0]: int(m[1]) for m in re.findall(r"^\| ([^|]+?) \| (\d+) \|$", body, re.M)}

    assert section("By status") == variants["status"].value_counts().to_dict()
    labels = [language_label(lang, backend) for lang, backend in zip(variants["language"], variants["backend"],
                                                                          strict=True)]
    assert section("By language") == pd.Series(labels).value_counts().to_dict()  # as a reader names them
    assert section("By problem") == variants["problem"].value_counts().to_dict()
    files = dict(re.findall(r"^\| (\S+\.(?:parquet|jsonl)) \| (\d+) \|$", card, re.M))
    assert set(files) == {f"{t}.{fmt}" for t in TABLES for fmt in ("parquet", "jsonl")}
    for name, n in files.items():
        rows = pq.read_table(out / name).num_rows if name.endswith(".parquet") else \
            len((out / name).read_text().splitlines())
        assert rows == int(n), name
    assert "config_name: variants" in card and "scripted sessions included" in card
    for column in ("speedup_eager", "reasoning_tokens", "human_actions", "margin"):
        assert f"| {column} |" in card


@pytest.mark.slow
def test_dedupe_removes_a_planted_duplicate(recorded_search: dict, tmp_path: Path) -> None:
    db = _copy(recorded_search["db"], tmp_path / "planted.db")
    with sqlite3.connect(db) as conn:
        original, session, parent, title, source = conn.execute(
            "SELECT id, session_id, parent_id, title, source FROM nodes WHERE kind = 'variant'"
            " AND status = 'correct' ORDER BY id LIMIT 1").fetchone()
        planted_source = "# the same kernel, reformatted\n" + source.replace("\n", "\n\n").replace("    ", "\t")
        planted = conn.execute(
            "INSERT INTO nodes(session_id, parent_id, kind, round, title, source, status, language,"
            " created_at, updated_at) VALUES (?,?,'variant',1,?,?,'correct','cuda',0,0)",
            (session, parent, title, planted_source)).lastrowid
    assert source_hash(planted_source) == source_hash(source) and planted_source != source
    _export(db, tmp_path / "whole", "--include-scripted", "--format", "parquet")
    whole = pd.read_parquet(tmp_path / "whole" / "variants.parquet")
    assert planted in set(whole["node_id"])
    _export(db, tmp_path / "dedupe", "--include-scripted", "--dedupe")
    deduped = pd.read_parquet(tmp_path / "dedupe" / "variants.parquet")
    assert original in set(deduped["node_id"]) and planted not in set(deduped["node_id"])
    assert deduped["source_hash"].is_unique
    assert len(deduped) == whole["source_hash"].nunique()


def test_the_split_never_shares_a_problem(tmp_path: Path) -> None:
    db = tmp_path / "many.db"
    synthetic_db(db, rows=240, sessions=12)  # 12 problems
    split = ("--split-by", "problem", "--test-fraction", "0.25", "--seed", "3")
    manifest = _export(db, tmp_path / "out", "--view", "all", *split)
    test_problems = set(manifest["split"]["test_problems"])
    assert len(test_problems) == 3 and len(manifest["split"]["train_problems"]) == 9
    for table in TABLES:
        train = pd.read_parquet(tmp_path / "out" / f"{table}-train.parquet")
        test = pd.read_parquet(tmp_path / "out" / f"{table}-test.parquet")
        assert not set(train["problem"]) & set(test["problem"]), table
        assert set(test["problem"]) <= test_problems and (test["split"] == "test").all()
        assert len(train) + len(test) == sum(manifest["rows"][table].values())
    again = _export(db, tmp_path / "again", *split)
    assert again["split"] == manifest["split"]  # the same seed, the same split
    card = (tmp_path / "out" / "README.md").read_text()
    assert "split: test" in card and "path: variants-test.parquet" in card


def test_parquet_is_written_in_batches(tmp_path: Path) -> None:
    """Streamed: the variants of one session come out as several row groups, not one table."""
    db = tmp_path / "big.db"
    synthetic_db(db, rows=1200, sessions=1)
    _export(db, tmp_path / "out", "--format", "parquet")
    assert pq.ParquetFile(tmp_path / "out" / "variants.parquet").num_row_groups >= 2


@pytest.mark.slow
def test_scripted_sessions_need_asking(recorded_search: dict, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset", "export", "--db", str(recorded_search["db"]), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ktree: error: empty selection") and "--include-scripted" in err
    assert not (tmp_path / "o").exists()
    assert main(["dataset", "stats", "--db", str(recorded_search["db"]), "--include-scripted", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["rows"]["variants"] == query(recorded_search["db"],
                                              "SELECT COUNT(*) FROM nodes WHERE kind = 'variant'")[0][0]
    assert stats["files"] == {}


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (["7"], "no session 7"),
    (["--suite", "4"], "no suite 4"),
    (["--min-speedup", "1e9"], "empty selection"),
    (["--split-by", "problem"], "needs two problems"),
    (["--test-fraction", "0.5"], "need --split-by"),
    (["--split-by", "problem", "--test-fraction", "1.5"], "between 0 and 1"),
    (["--all", "1"], "--all"),
    (["NONEMPTY"], "not empty; add --force"),
    (["NODB"], "no database"),
])
def test_bad_input_is_one_line_and_exit_2(recorded_search: dict, tmp_path: Path, args: list[str], says: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    db, out = recorded_search["db"], tmp_path / "out"
    if args == ["NONEMPTY"]:
        out.mkdir()
        (out / "keep.txt").write_text("mine")
        args = []
    if args == ["NODB"]:
        db, args = tmp_path / "none.db", []
    before = _sha(recorded_search["db"])
    code = main(["dataset", "export", "--db", str(db), "--out", str(out), "--include-scripted", *args])
    err = capsys.readouterr().err
    assert code == 2 and says in err and err.startswith("ktree: error:") and err.count("\n") == 1, err
    assert _sha(recorded_search["db"]) == before
    if (out / "keep.txt").exists():
        assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.slow
def test_force_writes_over_a_previous_export_only(recorded_search: dict, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _export(recorded_search["db"], out, "--include-scripted", "--view", "all")
    (out / "notes.txt").write_text("mine")
    manifest = _export(recorded_search["db"], out, "--include-scripted", "--view", "sft", "--force")
    assert sorted(p.name for p in out.iterdir()) == sorted([*manifest["files"], "manifest.json", "README.md",
                                                             "notes.txt"])


def test_normalised_source_keeps_code_and_drops_comments() -> None:
    a = ('import torch  # hi\nsrc = r"""\n#include <x.h>\n// note\n#define B 256\n'
         'int f() { /* x */ return B; }\n"""\n')
    b = 'import torch\n\nsrc = r"""\n#include <x.h>\n#define B 256\nint  f() {  return B; }\n"""  # bye\n'
    assert normalised_source(a) == normalised_source(b)
    assert source_hash(a) != source_hash(a.replace("B 256", "B 128"))
    assert "#include<x.h>" in normalised_source(a)


def test_reward_orders_outcomes() -> None:
    ladder = [reward("flagged", None), reward("compile_error", None), reward("runtime_error", None),
              reward("incorrect", None), reward("correct", 0.1), reward("correct", 0.9), reward("correct", 1.0),
              reward("correct", 2.0), reward("correct", 64.0)]
    assert ladder == sorted(ladder) and len(set(ladder)) == len(ladder)
    assert reward("correct", 1.0) == 1.0 and reward("correct", 2.0) == 2.0 and reward("correct", 64.0) == 5.0
    assert reward("cancelled", None) is None
    assert is_flagged("correct", ["review: speedup 31.0x is over 10x"]) and not is_flagged("correct", ["noisy"])


def test_bench_dataset_reports_seconds_and_memory(tmp_path: Path) -> None:
    """The benchmark runs (its numbers are reported, not asserted: it is not a timed test)."""
    from engine.bench.dataset import dataset_bench, dataset_table

    result = dataset_bench(rows=40, sessions=2)
    assert [r["variants"] for r in result["runs"]] == [4, 40]
    assert all(r["seconds"] > 0 and r["peak_mb"] > 0 and r["rows"]["variants"] == r["variants"]
               for r in result["runs"])
    assert "peak MB" in dataset_table(result)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_card_says_only_what_the_reference_was_timed_against(tmp_path: Path) -> None:
    """Issue 56, item 6: the card said "timed against PyTorch eager and torch.compile" for a session
    whose ref_compile_ms was null in every row (the cpu backend has no torch.compile baseline)."""
    db = tmp_path / "eager.db"
    synthetic_db(db, rows=40, sessions=1)  # eager reference times only
    manifest = _export(db, tmp_path / "eager", "--format", "jsonl")
    card = (tmp_path / "eager" / "README.md").read_text()
    assert manifest["counts"]["timed_against"] == ["PyTorch eager"]
    assert "timed against PyTorch eager." in card and "torch.compile" not in card.split("## Files")[0]
    problems = pd.read_json(tmp_path / "eager" / "problems.jsonl", lines=True)
    assert problems["ref_compile_ms"].isna().all()

    with sqlite3.connect(db) as conn:  # a GPU session's: torch.compile timed too
        conn.execute("UPDATE evaluations SET verdict = json_set(verdict, '$.ref_compile_ms', 0.8)")
    _export(db, tmp_path / "both", "--format", "jsonl")
    assert "timed against PyTorch eager and torch.compile." in (tmp_path / "both" / "README.md").read_text()
