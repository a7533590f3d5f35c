"""Issue 25 on the cpu backend: torch ops judged by their share of the work (an epilogue is a note, a
fallback is flagged), degenerate problems and input-independent variants, and harness clocks a
candidate cannot reach. The compiled kernel is the scripted conv_relu_maxpool library's fused one
(a ctypes build: seconds, shared with test_scripted_cpu_verdicts through the build cache)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from engine.evaluate.harness import integrity
from engine.evaluate.host.evaluator import LocalEvaluator, bounded_seconds
from engine.evaluate.verdict import Verdict
from engine.problems import load_problem
from tests.conftest import kernel_flags

SCRIPTED = Path(__file__).resolve().parents[2] / "engine" / "scripted_library"
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


# The library's convolution, then its own ReLU + max-pool: written in numpy, which the dispatcher sees
# no more than a compiled kernel (it writes into the memory torch allocated for it).
LIBRARY_CONV = FUSED + textwrap.dedent("""

    import torch.nn.functional as F
    from numpy.lib.stride_tricks import sliding_window_view


    class ModelNew(ModelNew):
        def forward(self, x):
            y = F.conv2d(x, self.conv.weight, self.conv.bias, self.conv.stride, self.conv.padding).contiguous()
            k = self.pool_kernel
            windows = sliding_window_view(y.numpy().clip(min=0), (k, k), axis=(2, 3))
            windows = windows[:, :, ::self.pool_stride, ::self.pool_stride]
            out = torch.empty(windows.shape[:4])
            out.numpy()[:] = windows.max(axis=(4, 5))
            return out
    """)


def test_a_kernel_with_a_one_line_masked_fill_epilogue_is_correct_with_a_note():
    v = evaluate("conv_relu_maxpool", EPILOGUE)
    assert v.status == "correct", f"{v.flags}\n{v.log}"
    assert kernel_flags(v.flags) == []
    [note] = [n for n in v.notes if n.startswith("torch-ops")]
    assert "aten.masked_fill_" in note and "aten.eq" in note and "0.0 % of the reference's time" in note
    assert v.library == {}


def test_a_kernel_whose_answer_comes_from_f_conv2d_is_flagged():
    v = evaluate("conv_relu_maxpool", FALLBACK)
    assert v.status == "flagged", v.log
    [flag] = [f for f in v.flags if f.startswith("torch-ops")]
    assert "torch's work alone" in flag and "aten.convolution" in flag
    assert not v.notes or not any(n.startswith("torch-ops") for n in v.notes)


def test_judging_torch_ops_by_the_reference_work_they_do():
    """Judged by the reference's time shares of the candidate's op families, never by their share of
    the candidate's own time: a mask costing most of a fast kernel's time is still a note."""
    ref = integrity.OpProfile({"convolution": 1, "relu": 1, "max_pool2d_with_indices": 1},
                              {"convolution": 0.86, "relu": 0.05, "max_pool2d_with_indices": 0.09}, 1.0)
    assert ref.main_families() == frozenset({"convolution"})
    epilogue = integrity.OpProfile({"eq": 1, "masked_fill_": 1}, {"eq": 0.5, "masked_fill_": 0.4}, 1.0)
    flags, notes, mark = integrity.judge_torch_ops(epilogue, ref)
    assert flags == [] and mark == {} and "0.0 % of the reference's time" in notes[0]
    # cuDNN's convolution (as addressed by another name), the kernel doing ReLU + pool: library.
    library = integrity.OpProfile({"cudnn_convolution": 1}, {"cudnn_convolution": 0.9}, 1.0)
    flags, notes, mark = integrity.judge_torch_ops(library, ref)
    assert flags == [] and mark == {"ops": ["aten.cudnn_convolution"], "share": 0.86}
    assert notes[0].startswith("library: aten.cudnn_convolution") and "(14 %)" in notes[0]
    # Every reference op by torch (relu in place: the same family): all of its work, flagged.
    everything = integrity.OpProfile({"convolution": 1, "relu_": 1, "max_pool2d": 1}, {}, 1.0)
    flags, notes, mark = integrity.judge_torch_ops(everything, ref)
    assert flags and "all of the reference's work" in flags[0] and notes == [] and mark == {}
    # Output torch's work alone (the lineage), with ops the reference does not run: flagged.
    formula = integrity.OpProfile({"mul": 3, "tanh": 1}, {}, 1.0, torch_alone=True)
    flags, _, _ = integrity.judge_torch_ops(formula, ref)
    assert flags and "torch's work alone" in flags[0]
    # Heavy work the reference does with other ops (an im2col convolution by torch.mm): library.
    flags, notes, mark = integrity.judge_torch_ops(integrity.OpProfile({"mm": 1, "im2col": 1}, {}, 1.0), ref)
    assert flags == [] and mark["ops"] == ["aten.mm"] and mark["share"] == 0.0
    assert integrity.judge_torch_ops(integrity.OpProfile({}, {}, 1.0), ref) == ([], [], {})


def test_the_lineage_tells_own_work_from_torch_work():
    """Where each output's contents come from, followed through the dispatcher: work it cannot see
    (here numpy writing into torch's memory, as a compiled kernel does) makes an output the
    candidate's own, whatever torch ops run after it."""
    import torch

    x = torch.randn(8, 16)

    def own(t):
        out = torch.empty_like(t)
        out.numpy()[:] = t.numpy() * 2
        return out

    def invisible_edit(t):
        y = t * 2
        y.numpy()[:] = 0.5
        return y

    cases = {
        "own kernel": (lambda: own(x), False),
        "own kernel + mask": (lambda: own(x).masked_fill_(own(x) == 0, 1.0), False),
        "own kernel + final mean": (lambda: own(x).mean(), False),
        "a torch output edited by a kernel": (lambda: invisible_edit(x), False),
        "torch copied into a fresh buffer": (lambda: torch.empty_like(x).copy_(torch.softmax(x, 1)), True),
        "torch into out=": (lambda: torch.mm(x, x.t(), out=torch.empty(8, 8)), True),
        "the kernel's result unused": (lambda: (own(x), torch.softmax(x, 1))[1], True),
        "gelu by its formula": (lambda: 0.5 * x * (1 + torch.tanh(0.8 * (x + 0.04 * x**3))), True),
    }
    for name, (call, alone) in cases.items():
        assert integrity.profile_ops(call, lineage=True).torch_alone is alone, name


@pytest.mark.slow
def test_the_library_convolution_with_the_kernel_s_own_epilogue_is_correct_with_a_library_mark():
    v = evaluate("conv_relu_maxpool", LIBRARY_CONV)
    assert v.status == "correct", f"{v.flags}\n{v.log}"
    assert v.library["ops"] == ["aten.convolution"] and 0.2 <= v.library["share"] < 1, v.library
    assert any(n.startswith("library: aten.convolution") for n in v.notes), v.notes


def test_an_fp32_problem_computed_in_16_bit_is_flagged_precision():
    """The kernel's answer rounded through bf16: within the method's 1e-2 tolerance, not fp32 work."""
    rounded = "        return out.to(torch.bfloat16).to(torch.float32)\n"
    downgraded = EPILOGUE.replace("        return out\n", rounded)
    assert downgraded != EPILOGUE
    v = evaluate("conv_relu_maxpool", downgraded)
    assert v.status == "flagged", f"{v.status} {v.log}"
    assert any(f.startswith("precision: an fp32 problem") for f in v.flags), v.flags


@pytest.mark.parametrize("wrong", ["out * 1.005", "out + 0.004"])
def test_a_scaled_or_shifted_answer_inside_the_tolerance_is_incorrect_not_precision(wrong):
    """A systematic error (the answer x 1.005, or + 0.004) passes the 1e-2 tolerance and errs more than
    16-bit rounding: a wrong answer, not a precision downgrade (issue 46, item 14)."""
    scaled = EPILOGUE.replace("        return out\n", f"        return {wrong}\n")
    assert scaled != EPILOGUE
    v = evaluate("conv_relu_maxpool", scaled)
    assert v.status == "incorrect", f"{v.status} {v.flags} {v.log}"
    assert "a systematic error, not rounding: it is the answer" in v.log, v.log
    assert not any(f.startswith("precision:") for f in v.flags), v.flags


def test_a_model_overriding_call_gets_a_harness_flag_not_a_crash():
    overriding = FUSED + textwrap.dedent("""

        _Kernel = ModelNew


        class ModelNew(_Kernel):
            forward = None

            def __call__(self, x):
                return _Kernel.forward(self, x)
        """)
    v = evaluate("conv_relu_maxpool", overriding)
    assert v.status == "flagged", f"{v.status} {v.log}"
    assert any(f.startswith("harness: ModelNew overrides nn.Module.__call__") for f in v.flags), v.flags


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
    from engine.record.report import format_verdict, suite_markdown

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
