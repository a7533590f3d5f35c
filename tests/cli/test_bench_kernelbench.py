"""`ktree bench kernelbench PATH` (engine.bench.kernelbench, issue 44 item 3) on the cpu backend, on a
tiny checkout of KernelBench's shape made here (KernelBench's own files are never in this repository):
a ReLU 4 × 8, a matmul 8 × 8 and a problem importing a package no machine has. One run for the module
(the wrapped reference builds nothing: its evaluations are Python alone), then the rows, the JSONL
written row by row, a rerun that skips what is done, the selection and the one-line usage errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.bench.kernelbench import (
    ROWS_FILE,
    GiB,
    KBProblem,
    KernelBenchError,
    find_problems,
    held_seconds,
    kernelbench_bench,
    kernelbench_table,
    load_failure,
    parse_levels,
    parse_numbers,
    read_rows,
    solution_for,
    summarize,
    verdict_row,
    wrapped_reference,
    write_outputs,
)
from engine.cli import main
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.problems import ProblemError
from tests.conftest import run_ktree

RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4
dim = 8


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
'''

MATMUL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 8


def get_inputs():
    A = torch.rand(N, N)
    B = torch.rand(N, N)
    return [A, B]


def get_init_inputs():
    return []
'''

MISSING = '''import torch
import some_missing_package


class Model(torch.nn.Module):
    def forward(self, x):
        return some_missing_package.f(x)


def get_inputs():
    return [torch.rand(4)]


def get_init_inputs():
    return []
'''


def make_checkout(root: Path) -> Path:
    """A folder shaped like a KernelBench checkout: KernelBench/level1 (3 problems), level2 (1)."""
    level1 = root / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    (level1 / "19_ReLU.py").write_text(RELU)
    (level1 / "2_Standard_matrix_multiplication_.py").write_text(MATMUL)
    (level1 / "7_Missing_package.py").write_text(MISSING)
    (level1 / "notes.py").write_text("# not a problem: no number\n")
    level2 = root / "KernelBench" / "level2"
    level2.mkdir()
    (level2 / "1_ReLU_again.py").write_text(RELU)
    return root


class _Log:
    """A progress stream: each line said is kept with the rows the JSONL held at that moment."""

    def __init__(self, rows_file: Path):
        self.rows_file, self.lines = rows_file, []

    def write(self, text: str) -> None:
        if text.strip():
            held = len(self.rows_file.read_text().splitlines()) if self.rows_file.exists() else 0
            self.lines.append((text.strip(), held))

    def flush(self) -> None:
        pass


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The checkout's level 1 with the wrapped reference (written to out/), then with a folder of
    solutions holding only the ReLU's, through one evaluator."""
    root = make_checkout(tmp_path_factory.mktemp("kb"))
    out, out_solutions = root / "out", root / "out-solutions"
    solutions = root / "solutions" / "level1"
    solutions.mkdir(parents=True)
    (solutions / "19_ReLU.py").write_text(wrapped_reference(RELU))
    log = _Log(out / ROWS_FILE)

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        evaluator = LocalEvaluator("cpu", compile_baseline=False)
        try:
            first = await kernelbench_bench(find_problems(root), "cpu", out=out, log=log, evaluator=evaluator)
            second = await kernelbench_bench(find_problems(root, numbers={2, 19}), "cpu", out=out_solutions,
                                             solutions=root / "solutions", log=False, evaluator=evaluator)
            return first, second
        finally:
            await evaluator.close()

    result, with_solutions = asyncio.run(go())
    write_outputs(out, result)
    return {"root": root, "out": out, "result": result, "log": log.lines, "solutions": with_solutions}


def row(result: dict[str, Any], number: int) -> dict[str, Any]:
    return next(r for r in result["rows"] if r["number"] == number)


def test_the_wrapped_reference_is_flagged_with_its_seconds(bench: dict[str, Any]):
    rows = bench["result"]["rows"]
    assert [(r["level"], r["number"], r["name"]) for r in rows] == [
        (1, 2, "Standard_matrix_multiplication_"), (1, 7, "Missing_package"), (1, 19, "ReLU")]
    for number in (2, 19):
        r = row(bench["result"], number)
        assert r["status"] == "flagged", r
        assert "torch-ops" in r["flags"] and r["candidate"] == "reference"
        assert r["held_s"] > 0 and r["wall_s"] >= r["held_s"] and r["why"] == ""
        assert r["fits"] in (None, True)  # the memory columns: what verdict.memory reports, if it does


def test_a_missing_package_says_so_in_its_row(bench: dict[str, Any]):
    r = row(bench["result"], 7)
    assert r["status"] == "no-package"
    assert "some_missing_package" in r["why"] and "lacks" in r["why"]
    s = bench["result"]["summary"]
    assert s["verdicts"] == 2 and s["problems"] == 3 and s["passed"]  # no package: said, not a failure
    assert s["counts"] == {"flagged": 2, "no-package": 1}


def test_each_row_is_in_the_jsonl_when_it_is_said(bench: dict[str, Any]):
    said = [(line, held) for line, held in bench["log"] if line.startswith("[")]
    assert [held for _, held in said] == [1, 2, 3]  # each line said after its row was written
    rows = read_rows(bench["out"])
    assert sorted(r["number"] for r in rows) == [2, 7, 19]


def test_the_table_and_the_files(bench: dict[str, Any]):
    table = kernelbench_table(bench["result"])
    assert table.startswith("| level | # | name | status | inputs | outputs | peak GPU | ref peak |")
    assert "| 1 | 19 | ReLU | flagged |" in table
    assert "verdicts: 2 / 3 (flagged 2, no-package 1)" in table
    assert "out of memory: 0; crashed: 0; timeout: 0; host-memory kills: 0; over the memory bound: 0" in table
    assert (bench["out"] / "kernelbench.md").read_text().strip() == table
    assert json.loads((bench["out"] / "kernelbench.json").read_text())["summary"]["verdicts"] == 2


def test_a_folder_of_solutions_skips_a_problem_without_one(bench: dict[str, Any]):
    result = bench["solutions"]
    assert row(result, 19)["status"] == "flagged" and row(result, 19)["candidate"] == "level1/19_ReLU.py"
    skipped = row(result, 2)
    assert skipped["status"] == "skipped" and "no solution" in skipped["why"]
    assert result["summary"]["passed"]


def test_a_rerun_skips_the_problems_done_and_compares(bench: dict[str, Any]):
    out = bench["out"]
    before = len((out / ROWS_FILE).read_text().splitlines())
    proc = run_ktree("bench", "kernelbench", str(bench["root"]), "--backend", "cpu", "--out", str(out),
                     "--compare-with", str(out / ROWS_FILE), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"resuming: 2 of 3 problems already have a verdict in {out / ROWS_FILE}; skipped" in proc.stderr
    assert "| 1 | 19 | ReLU | flagged |" in proc.stdout and "| alone |" in proc.stdout
    assert "statuses differing from the earlier run: 0" in proc.stdout
    # Only the problem without a verdict was tried again.
    assert len((out / ROWS_FILE).read_text().splitlines()) == before + 1


def test_a_status_differing_from_the_alone_run_fails():
    rows = [{"level": 1, "number": 1, "problem": "level1/1_A", "status": "flagged", "alone": "flagged"},
            {"level": 1, "number": 2, "problem": "level1/2_B", "status": "crashed", "alone": "flagged"}]
    s = summarize(rows, compared=True)
    assert s["differing"] == ["level1/2_B"] and s["crashed"] == ["level1/2_B"] and not s["passed"]
    assert summarize(rows[:1], compared=True)["passed"]


def _verdict(status: str, log: str = "", memory: dict | None = None) -> Any:
    return SimpleNamespace(status=status, log=log, flags=(), compile_s=0.1, eval_s=1.0, device="x",
                           timing={"held_s": {"worker": 1.0, "after": 0.5, "total": 1.6}}, memory=memory)


def test_a_row_reads_the_verdicts_memory_and_its_bound():
    problem = KBProblem(1, 19, "ReLU", Path("/x/level1/19_ReLU.py"))
    memory = {"peak_gpu_bytes": 9 * GiB, "inputs_bytes": GiB, "outputs_bytes": GiB,
              "reference_peak_bytes": 2 * GiB, "host_peak_bytes": GiB, "answers": "native"}
    fits = verdict_row(problem, "reference", _verdict("flagged", memory=memory), 3.0)
    assert fits["bound_bytes"] == 8 * GiB and fits["fits"] is False and "over the bound" in fits["why"]
    assert fits["held_s"] == 1.6 and fits["answers"] == "native"
    memory["peak_gpu_bytes"] = 8 * GiB
    assert verdict_row(problem, "reference", _verdict("flagged", memory=memory), 3.0)["fits"] is True
    oom = "ktree out of memory while checking\n..."
    bare = verdict_row(problem, "reference", _verdict("crashed", oom), 1.0)
    assert bare["fits"] is None and bare["peak_gpu_bytes"] is None and bare["oom"]
    assert bare["why"] == "ktree out of memory while checking"
    kill = "memory limit: resident 32.18 GiB > 31.47 GiB"
    killed = verdict_row(problem, "reference", _verdict("crashed", kill), 1.0)
    assert killed["host_kill"] and not killed["oom"]
    s = summarize([fits, bare, killed])
    assert s["over_bound"] and s["oom"] and s["host_kills"] and not s["passed"]
    assert held_seconds(SimpleNamespace(timing={"held_s": {"a": 1.0, "b": 2.0}})) == 3.0
    assert held_seconds(SimpleNamespace(timing={})) is None


def test_problems_and_levels_are_parsed():
    assert parse_numbers("1-3,19, 23") == {1, 2, 3, 19, 23} and parse_numbers(None) is None
    for bad in ("", "x", "3-1", "0", "1-", "1,,2"):
        with pytest.raises(KernelBenchError):
            parse_numbers(bad)
    assert parse_levels("2,1") == [1, 2] and parse_levels(None) is None
    with pytest.raises(KernelBenchError):
        parse_levels("one")


def test_a_checkout_its_kernelbench_folder_or_a_level_folder(tmp_path: Path):
    root = make_checkout(tmp_path)
    level1 = [(1, 2), (1, 7), (1, 19)]
    for path in (root, root / "KernelBench", root / "KernelBench" / "level1"):
        assert [(p.level, p.number) for p in find_problems(path)] == level1
    assert [(p.level, p.number) for p in find_problems(root / "KernelBench" / "level2")] == [(2, 1)]
    assert [(p.level, p.number) for p in find_problems(root, [1, 2], {1, 19})] == [(1, 19), (2, 1)]
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    (solutions / "19_ReLU.py").write_text("x")
    relu = find_problems(root, numbers={19})[0]
    assert solution_for(solutions, relu) == solutions / "19_ReLU.py"
    assert solution_for(solutions, find_problems(root, numbers={2})[0]) is None


def test_a_load_failure_names_the_package():
    try:
        try:
            import some_missing_package  # noqa: F401
        except ImportError as exc:
            raise ProblemError("x.py: fails to import") from exc
    except ProblemError as exc:
        assert load_failure(exc) == ("no-package", "needs the package 'some_missing_package', which this"
                                                   " machine lacks (ModuleNotFoundError)")
    syntax = "x.py: syntax error on line 3"
    assert load_failure(ProblemError(syntax)) == ("load-error", syntax)


@pytest.mark.parametrize("args, needle", [
    (["{nowhere}"], "no such path"),
    (["{empty}"], "no KernelBench level folders"),
    (["{root}", "--problems", "5-2"], "--problems '5-2'"),
    (["{root}", "--problems", "40"], "none of the problems --problems asks for"),
    (["{root}", "--levels", "3"], "no level3 folder (levels there: 1, 2)"),
    (["{root}", "--solutions", "{nowhere}"], "--solutions"),
    (["{root}", "--compare-with", "{nowhere}"], "cannot read"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str],
                                          needle: str):
    root = make_checkout(tmp_path / "ck")
    (tmp_path / "empty").mkdir()
    names = {"root": root, "empty": tmp_path / "empty", "nowhere": tmp_path / "nowhere"}
    assert main(["bench", "kernelbench", *(a.format(**names) for a in args), "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_solutions_get_the_figures_papers_compare(bench: dict[str, Any]):
    """A run with solutions ends with the fraction correct, fast_p over eager and torch.compile, the
    geometric mean of speedups and how each was aggregated (issue 55)."""
    result = bench["solutions"]
    fig = result["figures"]
    assert fig["n"] == 2 and fig["correct"] == 0 and fig["fraction_correct"] == 0.0  # flagged, skipped
    table = kernelbench_table(result)
    assert "KernelBench figures over n = 2 problems: fraction correct 0.000 (0 / 2)" in table
    assert "| baseline | fast_1 | fast_1.5 | fast_2 | geomean speedup (correct, timed) |" in table
    assert "how each figure was aggregated:" in table
    assert "figures" not in bench["result"]  # (the wrapped reference: no solution to score)


def test_the_figures_aggregate_as_kernelbench_does():
    from engine.bench.kernelbench import figures

    def r(status: str, eager: float | None = None, compiled: float | None = None) -> dict[str, Any]:
        return {"status": status, "speedup_eager": eager, "speedup_compile": compiled}

    rows = [r("correct", 2.5, 1.2), r("correct", 1.2, 0.8), r("correct", 0.5, 0.4), r("flagged", 9.0, 9.0),
            r("incorrect"), r("skipped"), r("no-package")]
    fig = figures(rows, "cuda")
    assert fig["n"] == 6 and fig["correct"] == 3 and fig["fraction_correct"] == 0.5
    assert fig["eager"]["fast_p"] == {"1": 2 / 6, "1.5": 1 / 6, "2": 1 / 6}  # the flagged 9x counts for nothing
    assert fig["compile"]["fast_p"] == {"1": 1 / 6, "1.5": 0.0, "2": 0.0}
    assert fig["eager"]["geomean"] == pytest.approx((2.5 * 1.2 * 0.5) ** (1 / 3))
    assert fig["eager"]["timed"] == 3
    cpu = figures([r("correct", 2.0, None)], "cpu")
    assert cpu["compile"]["fast_p"] is None and "cuda backend only" in cpu["compile"]["why"]
    assert cpu["eager"]["fast_p"] == {"1": 1.0, "1.5": 1.0, "2": 0.0}  # (2.0 is not over 2)
    assert any(line.startswith("fast_p: the problems that are correct AND") for line in fig["aggregation"])
