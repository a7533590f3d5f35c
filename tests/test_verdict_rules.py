"""Issue 25 on the cpu backend: torch ops judged by their share of the work (an epilogue is a note, a
fallback is flagged), degenerate problems and input-independent variants, and harness clocks a
candidate cannot reach. The compiled kernel is the scripted conv_relu_maxpool library's fused one
(a ctypes build: seconds, shared with test_scripted_cpu_verdicts through the build cache)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from engine.evaluate import integrity
from engine.evaluate.evaluator import LocalEvaluator, bounded_seconds
from engine.evaluate.jobs import torch_ops_share_from_env
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import kernel_flags

SCRIPTED = Path(__file__).resolve().parents[1] / "engine" / "scripted_library"
FUSED = (SCRIPTED / "conv_relu_maxpool" / "cpu" / "fused_1.py").read_text()  # intended: correct

# The published Conv2D+ReLU+MaxPool kernel's one cleanup line (issue 25), after the kernel.
EPILOGUE = FUSED + textwrap.dedent("""

    _Kernel = ModelNew


    class ModelNew(_Kernel):
        def forward(self, x):
            out = super().forward(x)
            out.masked_fill_(out == -torch.finfo(out.dtype).max, 0.0)
            return out
    """)

# The kernel runs, then F.conv2d computes the answer that is returned.
FALLBACK = FUSED + textwrap.dedent("""

    import torch.nn.functional as F

    _Kernel = ModelNew


    class ModelNew(_Kernel):
        def forward(self, x):
            super().forward(x)
            y = F.conv2d(x, self.conv.weight, self.conv.bias, self.conv.stride, self.conv.padding)
            return F.max_pool2d(F.relu(y), self.pool_kernel, self.pool_stride)
    """)


def evaluate(problem_spec: str, source: str, **job: object) -> Verdict:
    problem = load_problem(problem_spec)
    cost = problem.cost("cpu")

    async def go() -> Verdict:
        evaluator = LocalEvaluator("cpu")
        try:
            return await evaluator.evaluate(evaluator.job(problem.path, source, problem.sizes_for("cpu"),
                                                          flops=cost.flops, bytes=cost.bytes, **job))
        finally:
            await evaluator.close()

    return asyncio.run(go())


def test_a_kernel_with_a_one_line_masked_fill_epilogue_is_correct_with_a_note():
    v = evaluate("conv_relu_maxpool", EPILOGUE)
    assert v.status == "correct", f"{v.flags}\n{v.log}"
    assert kernel_flags(v.flags) == []
    [note] = [n for n in v.notes if n.startswith("torch-ops")]
    assert "aten.masked_fill_" in note and "aten.eq" in note and "% of ModelNew.forward's time" in note
    share = float(note.split("torch-ops: ")[1].split(" %")[0])
    assert 0 <= share < 10


def test_a_kernel_whose_answer_comes_from_f_conv2d_is_flagged():
    v = evaluate("conv_relu_maxpool", FALLBACK)
    assert v.status == "flagged", v.log
    [flag] = [f for f in v.flags if f.startswith("torch-ops")]
    assert "main work" in flag and "aten.convolution" in flag
    assert not v.notes or not any(n.startswith("torch-ops") for n in v.notes)


def test_an_epilogue_over_the_configured_share_is_flagged():
    """The threshold is the job's (KTREE_TORCH_OPS_SHARE where the job is made): at 0 any torch
    compute op is over it."""
    v = evaluate("conv_relu_maxpool", EPILOGUE, torch_ops_share=0.0)
    assert v.status == "flagged", v.log
    assert any(f.startswith("torch-ops") and "over the 0 % allowed" in f for f in v.flags), v.flags


def test_judging_torch_ops_by_share_and_by_the_reference_main_ops():
    ops = integrity.OpProfile({"eq": 1, "masked_fill_": 1}, {"eq": 0.002, "masked_fill_": 0.003}, 0.1)
    ref = integrity.OpProfile({"convolution": 1, "relu": 1}, {"convolution": 0.9, "relu": 0.05}, 1.0)
    main = ref.main_ops()
    assert main == frozenset({"convolution"})
    flags, notes = integrity.judge_torch_ops(ops, main, 0.10)
    assert flags == [] and notes and "5.0 %" in notes[0]
    flags, notes = integrity.judge_torch_ops(ops, main, 0.04)
    assert flags and notes == []
    fallback = integrity.OpProfile({"convolution": 1}, {"convolution": 0.001}, 1.0)  # tiny share, main op
    flags, _ = integrity.judge_torch_ops(fallback, main, 0.10)
    assert flags and "main work" in flags[0]
    assert integrity.judge_torch_ops(integrity.OpProfile({}, {}, 1.0), main) == ([], [])


def test_torch_ops_share_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    for raw, want in (("0.2", 0.2), ("15", 0.15), ("5%", 0.05), ("x", None), ("", None)):
        monkeypatch.setenv("KTREE_TORCH_OPS_SHARE", raw)
        assert torch_ops_share_from_env() == want
    monkeypatch.setenv("KTREE_TORCH_OPS_SHARE", "25")
    problem = load_problem("softmax")
    job = LocalEvaluator("cpu").job(problem.path, "", problem.sizes_for("cpu"), flops=None, bytes=None)
    assert job.torch_ops_share == 0.25


# Max over a dim, minus its own mean, GELU: zero for every input (a KernelBench level-2 problem before
# its fix). And one whose output moves, but by far less than the tolerance.
DEGENERATE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        x = torch.max(x, dim=1, keepdim=True).values
        x = x - x.mean(dim=1, keepdim=True)
        return torch.nn.functional.gelu(x)

batch_size = 16
features = 64

def get_inputs():
    return [torch.randn(batch_size, features)]

def get_init_inputs():
    return []
'''
NEARLY_CONSTANT = DEGENERATE.replace(
    "        x = torch.max(x, dim=1, keepdim=True).values\n        x = x - x.mean(dim=1, keepdim=True)\n"
    "        return torch.nn.functional.gelu(x)", "        return 1.0 + 1e-6 * torch.tanh(x)")
CACHED = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    cached = None
    def __init__(self):
        super().__init__()
    def forward(self, x):
        if ModelNew.cached is None:
            ModelNew.cached = torch.full((x.shape[0], SHAPE), VALUE)
        return ModelNew.cached.clone()
'''


def test_a_degenerate_problem_is_noted_on_the_verdict(tmp_path: Path):
    path = tmp_path / "max_mean_gelu.py"
    path.write_text(DEGENERATE)
    v = evaluate(str(path), CACHED.replace("SHAPE", "1").replace("VALUE", "0.0"))
    assert v.status == "correct", f"{v.flags}\n{v.log}"
    assert any(n.startswith("degenerate problem") for n in v.notes), v.notes


def test_a_variant_whose_output_ignores_its_inputs_is_flagged(tmp_path: Path):
    path = tmp_path / "nearly_constant.py"
    path.write_text(NEARLY_CONSTANT)
    v = evaluate(str(path), CACHED.replace("SHAPE", "64").replace("VALUE", "1.0"))
    assert v.status == "flagged", v.log
    assert any(f.startswith("input-independent") for f in v.flags), v.flags
    assert any(n.startswith("degenerate problem") for n in v.notes)  # within tolerance, a constant passes


def test_a_candidate_that_rebinds_the_clocks_gets_flagged_and_no_negative_duration():
    """The issue's timer hack: the clocks rebound at import. The verdict is flagged, and every
    duration it reports comes from clocks bound before the candidate ran."""
    source = textwrap.dedent('''
        import time
        import torch
        import torch.nn as nn

        _real = time.perf_counter
        time.perf_counter = lambda: _real() - 400.0 - 1000.0 * (_real() % 1)
        time.monotonic = time.perf_counter

        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.softmax(x, dim=1)
        ''')
    v = evaluate("softmax", source)
    assert v.status == "flagged"
    assert any(f.startswith("harness") and "perf_counter" in f for f in v.flags), v.flags
    for name in ("compile_s", "eval_s", "time_ms", "ref_eager_ms", "time_p10_ms", "ref_p10_ms"):
        value = getattr(v, name)
        assert value is not None and 0 <= value < 120 * (1000 if name.endswith("ms") else 1), (name, value)
    assert v.ref_eager_ms > 0.005  # the reference's real time, not a patched clock's
    assert all(s >= 0 for s in v.timing["phases_s"].values()), v.timing["phases_s"]


def test_reported_durations_are_bounded_by_the_engine_clock():
    assert bounded_seconds(-368.0, 2.5) == 2.5
    assert bounded_seconds(1.2, 2.5) == 1.2
    assert bounded_seconds(500.0, 2.5) == 2.5
    assert bounded_seconds(None, 2.5) is None


def test_a_degenerate_problem_is_seen_where_problems_are_listed(tmp_path: Path):
    from engine.problems import DEGENERATE_LINE, reference_varies
    from tests.conftest import run_ktree

    path = tmp_path / "max_mean_gelu.py"
    path.write_text(DEGENERATE)
    assert reference_varies(load_problem(str(path))) is False
    assert load_problem(str(path)).degenerate and not load_problem("softmax").degenerate
    nearly = tmp_path / "nearly_constant.py"
    nearly.write_text(NEARLY_CONSTANT)
    assert load_problem(str(nearly)).degenerate  # moves, but less than the tolerance
    out = run_ktree("problems", str(path), "--db", str(tmp_path / "k.db"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "| max_mean_gelu (degenerate) |" in out.stdout and DEGENERATE_LINE in out.stdout
    assert "| softmax |" in out.stdout


def test_notes_are_shown_by_show_export_and_the_prompt():
    from engine.prompts import describe_verdict
    from engine.report import format_verdict, suite_markdown

    note = "torch-ops: 0.8 % of ModelNew.forward's time in torch ops (aten.eq 0.5 %)"
    v = Verdict(status="correct", notes=(note,), time_ms=1.0)
    assert f"note: {note}" in format_verdict(v)
    assert f"- note: {note}" in describe_verdict(v)
    assert Verdict.from_dict(v.to_dict()).notes == (note,)
    row = {"session_id": 1, "problem": "p", "status": "finished", "reason": None, "correct": True,
           "speedup_eager": 2.0, "speedup_compile": 1.0, "variants": 1, "cost_usd": 0.0, "tokens": 0,
           "degenerate": True}
    scores = {"problems": 1, "correct": 1, "fast_p_eager": {1.0: 1.0}, "fast_p_compile": {1.0: 1.0},
              "geomean_speedup_eager": 2.0, "geomean_speedup_compile": 1.0, "correctness_rate": 1.0,
              "tokens": 0, "cost_usd": 0.0}
    text = suite_markdown({"suite": {"id": 1, "name": "s", "status": "finished"}, "problems": [row],
                           "scores": scores})
    assert "| p (degenerate) |" in text and "does not depend on its inputs" in text


@pytest.mark.gpu
def test_on_cuda_an_epilogue_is_a_note_and_f_conv2d_is_flagged():
    """The same two cases on the GPU (ops timed by CUDA events): the scripted CUDA fused kernel
    with the masked_fill epilogue, then with F.conv2d computing the answer. Not in
    scripts/gpu-prebuild's set: two CUDA builds on a first run."""
    kernel = (SCRIPTED / "conv_relu_maxpool" / "cuda" / "fused_1.py").read_text()
    problem = load_problem("conv_relu_maxpool")
    cost = problem.cost("cuda")
    sources = [EPILOGUE.replace(FUSED, kernel), FALLBACK.replace(FUSED, kernel)]

    async def go() -> list[Verdict]:
        evaluator = LocalEvaluator("cuda")
        try:
            sizes = problem.sizes_for("cuda")
            jobs = [evaluator.job(problem.path, s, sizes, flops=cost.flops, bytes=cost.bytes) for s in sources]
            return [await evaluator.evaluate(job) for job in jobs]
        finally:
            await evaluator.close()

    epilogue, fallback = asyncio.run(go())
    assert epilogue.status == "correct", f"{epilogue.flags}\n{epilogue.log}"
    assert any(n.startswith("torch-ops") and "aten.masked_fill_" in n for n in epilogue.notes), epilogue.notes
    assert fallback.status == "flagged" and any("aten.convolution" in f for f in fallback.flags), fallback.flags
