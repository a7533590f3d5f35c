"""Problem metadata in use: formulas, estimates for undeclared files, tolerances, the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.problems import ProblemError, eval_formula, load_problem
from tests.conftest import run_ktree

MATMUL = """
import torch
class Model(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(k, k))
    def forward(self, a):
        return a @ self.w
M = 512
K = 256
def get_inputs(): return [torch.randn(M, K)]
def get_init_inputs(): return [K]
"""


def test_formulas_are_arithmetic_over_sizes_only():
    assert eval_formula("2 * M * N * K", {"M": 4, "N": 5, "K": 6}) == 240
    assert eval_formula("(a + 1) ** 2 // 3", {"a": 2}) == 3
    with pytest.raises(ProblemError, match="unknown size 'Q'"):
        eval_formula("2 * Q", {"M": 1})
    with pytest.raises(ProblemError, match="only arithmetic"):
        eval_formula("__import__('os').getpid()", {})


def test_declared_cost_follows_the_backend_sizes():
    softmax = load_problem("softmax")
    full, cpu = softmax.cost("cuda"), softmax.cost("cpu")
    assert (full.flops, full.bytes, full.estimated) == (5 * 4096 * 65536, 8 * 4096 * 65536, False)
    assert (cpu.flops, cpu.bytes) == (5 * 128 * 4096, 8 * 128 * 4096)


def test_undeclared_cost_is_counted_and_labelled_estimated(tmp_path: Path):
    path = tmp_path / "mm.py"
    path.write_text(MATMUL)
    cost = load_problem(str(path)).cost("cuda")
    assert cost.estimated
    assert cost.flops == 2 * 512 * 256 * 256
    assert cost.bytes == 4 * (512 * 256 + 256 * 256 + 512 * 256)  # input + weight + output
    assert "(estimated)" in cost.describe()


def test_problem_tolerance_is_the_default_and_cpu_preset_names_are_checked(tmp_path: Path):
    path = tmp_path / "loose.py"
    path.write_text(MATMUL + "METADATA = {'atol': 0.05, 'rtol': 0.02, 'cpu_sizes': {'M': 8}}\n")
    assert load_problem(str(path)).tolerance == (0.05, 0.02)
    assert load_problem("softmax").tolerance == (1e-2, 1e-2)
    bad = tmp_path / "bad.py"
    bad.write_text(MATMUL + "METADATA = {'cpu_sizes': {'rows': 8}}\n")
    with pytest.raises(ProblemError, match="cpu_sizes names unknown size constants: rows"):
        load_problem(str(bad))


# A plain KernelBench file writes its sizes as arithmetic (issue 36 item 23).
KB_MATMUL = MATMUL.replace("M = 512\nK = 256", "N = 2048 * 2\nM = N // 16 + 0\nK = 1 << 8\nflag = True")


def test_sizes_written_as_arithmetic_are_sizes():
    from engine.evaluate.loading import size_constants

    assert size_constants(KB_MATMUL) == {"N": 4096, "M": 256, "K": 256}  # a bool is no size
    assert size_constants("a = 2 ** 100000\nb = 1 / 2\nc = x * 2\nd = -3 * 2\ne = 5 // 0\n") == {"d": -6}


def test_problems_table_lists_builtins_and_given_files(tmp_path: Path):
    path = tmp_path / "mm.py"
    path.write_text(MATMUL)
    kb = tmp_path / "kb_matmul.py"
    kb.write_text(KB_MATMUL)
    proc = run_ktree("--db", str(tmp_path / "none.db"), "problems", str(path), str(kb))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    softmax = next(line for line in lines if line.startswith("| softmax |"))
    assert "batch_size=128, dim=4096" in softmax  # no GPU here: the CPU preset
    mm = next(line for line in lines if line.startswith("| mm |"))
    assert f"{2 * 512 * 256 * 256:.3g} (est.)" in mm
    # Which problems the offline scripted provider answers for, said up front.
    assert softmax.endswith("| cpu, cuda, triton |") and mm.endswith("| - |")
    kb_row = next(line for line in lines if line.startswith("| kb_matmul |"))
    assert "N=4096, M=256, K=256" in kb_row, kb_row
    fp16 = next(line for line in lines if line.startswith("| matmul_fp16 |"))
    assert fp16.endswith("| triton |")  # Triton kernels only: none for a C++ search on either backend


def test_the_problems_table_shows_the_eager_time_a_search_measured(tmp_path: Path):
    """Issue 46, item 10: softmax's eager time is `-` after two searches measured it. The latest search on
    this device, at the table's sizes and from the same source, fills it in; one at other sizes does not."""
    import asyncio

    from engine.evaluate.harness.timing import device_name
    from engine.evaluate.verdict import Verdict
    from engine.problems import load_problem
    from engine.record.store import Store

    softmax = load_problem("softmax")
    sizes = softmax.sizes_for("cpu")

    async def record(store: Store, sizes: dict, ref_ms: float) -> None:
        sid = await store.sessions.create(problem="softmax", problem_path=str(softmax.path), backend="cpu",
                                         strategy="tree", provider="scripted", models=["scripted"], config={},
                                         sizes=sizes)
        root = await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0, status="ok",
                                    source=softmax.source)
        v = Verdict(status="correct", time_ms=ref_ms / 2, ref_eager_ms=ref_ms, speedup_eager=2.0,
                    backend="cpu", device=device_name("cpu"), sizes=sizes)
        await store.evaluations.add(node_id=root.id, session_id=sid, verdict=v)
        await store.sessions.update(sid, ref_ms=ref_ms)

    async def fill() -> None:
        store = await Store.open(tmp_path / "k.db")
        await record(store, sizes, 1.234)
        await record(store, {k: v * 2 for k, v in sizes.items()}, 9.876)  # other sizes: not this row's
        await store.close()

    asyncio.run(fill())
    table = run_ktree("--db", str(tmp_path / "k.db"), "problems").stdout
    row = next(x for x in table.splitlines() if x.startswith("| softmax |"))
    assert "| 1.234 |" in row and "9.876" not in row, row
    assert "| - | - |" in next(x for x in table.splitlines() if x.startswith("| layernorm |"))


@pytest.mark.slow
def test_bench_timing_fills_the_problems_table(tmp_path: Path):
    db = tmp_path / "k.db"
    proc = run_ktree("--db", str(db), "bench", "timing", "layernorm", "--backend", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    [row] = json.loads(proc.stdout)
    assert row["name"] == "layernorm" and row["eager_ms"] > 0 and row["compile_ms"] > 0
    table = run_ktree("--db", str(db), "problems").stdout
    line = next(x for x in table.splitlines() if x.startswith("| layernorm |"))
    assert f"{row['eager_ms']:.4g}" in line and f"{row['compile_ms']:.4g}" in line
