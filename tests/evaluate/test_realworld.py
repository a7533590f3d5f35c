"""The real-world verdict corpus (tests/realworld/, issue 33) on the cpu backend: every honest
kernel ends `correct` (with the mark its case names: a torch-ops note, or Verdict.library), every
hack does not. One `ktree bench verdicts` run for the module (the cases' plain C++ builds take
seconds each; one needs torch headers); then the manifest, the table and the exit rule."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engine.bench.verdicts import (
    CorpusError,
    load_cases,
    select,
    summarize,
    verdicts_bench,
    verdicts_table,
)
from tests.conftest import run_ktree

# The corpus' verdicts need the host to itself (a library mark rests on the reference's op shares,
# which another worker's build shifts): run after the parallel part of the full command.
pytestmark = pytest.mark.alone

CASES = load_cases()
HONEST = [c.name for c in CASES if c.kind == "honest"]
HACKS = [c.name for c in CASES if c.kind == "hack"]


@pytest.fixture(scope="module")
def bench() -> dict[str, Any]:
    return asyncio.run(verdicts_bench("cpu", log=False))


def row(bench: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in bench["rows"] if r["case"] == name)


def test_the_corpus_is_the_size_the_issue_asks():
    assert len(HONEST) >= 12 and len(HACKS) >= 12
    for case in CASES:
        assert case.cpu.is_file() and case.gpu.is_file()
        assert "ModelNew" in case.cpu.read_text() and "ModelNew" in case.gpu.read_text()
        gpu = case.gpu.read_text()
        assert ("@triton.jit" in gpu) if case.language == "triton" else ("cuda_sources" in gpu)


@pytest.mark.slow
@pytest.mark.parametrize("name", HONEST)
def test_an_honest_kernel_is_correct(bench: dict[str, Any], name: str):
    r = row(bench, name)
    assert r["status"] == "correct", f"{r['flags']}\n{r['log']}"
    case = next(c for c in CASES if c.name == name)
    if case.expect == "library":
        assert r["library"] and r["library"].get("ops"), r
    elif case.expect == "note":
        assert any(n.startswith("torch-ops") for n in r["notes"]), r["notes"]


@pytest.mark.slow
@pytest.mark.parametrize("name", HACKS)
def test_a_hack_is_not_correct(bench: dict[str, Any], name: str):
    r = row(bench, name)
    assert r["status"] != "correct", r
    if name == "pointer_cache":  # (on the cpu, caught every time since the refilled-inputs check)
        assert r["status"] == "incorrect" or any(f.startswith("refilled-inputs:") for f in r["flags"]), r


@pytest.mark.slow
def test_the_table_and_the_summary(bench: dict[str, Any]):
    s = bench["summary"]
    assert s["cases"] == len(CASES) and s["hacks"] == len(HACKS) and s["honest"] == len(HONEST)
    table = verdicts_table(bench)
    assert table.splitlines()[0].startswith("| case | kind | class | status |")
    assert "hacks caught:" in table and "honest rejected:" in table
    assert s["errored"] == [], "every case's file builds and runs"


def test_the_summary_passes_only_with_no_honest_rejected_and_no_hack_correct():
    honest = {"case": "h", "kind": "honest", "result": "PASS", "mark_ok": None, "status": "correct"}
    hack = {"case": "x", "kind": "hack", "result": "PASS", "mark_ok": None, "status": "flagged"}
    assert summarize([honest, hack])["passed"]
    s = summarize([{**honest, "result": "FAIL"}, hack])
    assert not s["passed"] and s["honest_rejected"] == 1 and s["false_reject_rate"] == 1.0
    s = summarize([honest, {**hack, "result": "FAIL"}])
    assert not s["passed"] and s["hacks_caught"] == 0 and s["recall"] == 0.0
    s = summarize([{**honest, "mark_ok": False}, hack])
    assert s["passed"] and s["marks_missing"] == ["h"]
    s = summarize([honest, {**hack, "status": "compile_error"}])
    assert s["passed"] and s["errored"] == ["x"]


def test_a_bad_manifest_or_an_unknown_case_is_one_line(tmp_path: Path):
    with pytest.raises(CorpusError, match="no case nope"):
        select(CASES, ["nope"])
    assert [c.name for c in select(CASES, [HACKS[0], HONEST[0]])] == [HACKS[0], HONEST[0]]
    (tmp_path / "cases.toml").write_text('[[case]]\nname = "a"\nproblem = "softmax"\nkind = "odd"\n'
                                         'class = "c"\ncpu = "a.py"\ngpu = "a.py"\nlanguage = "cuda"\n')
    with pytest.raises(CorpusError, match="case a: kind must be"):
        load_cases(tmp_path)


def test_an_unknown_case_is_a_usage_error():
    proc = run_ktree("bench", "verdicts", "--backend", "cpu", "--case", "nope", timeout=120)
    assert proc.returncode == 2 and "no case nope" in proc.stderr, proc.stderr
