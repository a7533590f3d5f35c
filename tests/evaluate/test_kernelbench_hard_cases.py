"""KernelBench at its sizes, every verdict right (issue 55), on the cpu backend with torch-only
candidates (no build): an output that is noise around zero is judged on the reference's own scale
(allclose), and the reference's own forward is never `incorrect` on it; a model whose state lives in
plain tensor attributes gets answers (fp64, its state converted; native where fp64 fails), never a
runtime error blamed on the reference."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from engine.evaluate.child.check import compare
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.evaluate.verdict import Verdict

# KernelBench level 2 #23's shape of output (Conv3d, GroupNorm, mean), small: the mean of
# group-normalised values is zero but for rounding (~1e-8 in fp32, ~1e-17 in fp64).
NOISE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        return self.norm(x).mean(dim=[1, 2, 3])

batch_size = 8
channels = 8
groups = 2
height = width = 16

def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 3.0 + 1.0]

def get_init_inputs():
    return [channels, groups]
'''

# The reference's own forward as the candidate (torch doing all of its work: flagged, never incorrect).
OWN_FORWARD = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        return self.norm(x).mean(dim=[1, 2, 3])
'''

# An honest kernel the dispatcher does not see (numpy, fp32, its own order of summation): correct.
NUMPY_KERNEL = '''
import numpy as np
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        n, c = x.shape[0], x.shape[1]
        g = self.norm.num_groups
        a = x.detach().numpy().reshape(n, g, -1)
        mean = a.mean(axis=2, keepdims=True, dtype=np.float32)
        var = ((a - mean) ** 2).mean(axis=2, keepdims=True, dtype=np.float32)
        y = ((a - mean) / np.sqrt(var + np.float32(self.norm.eps))).reshape(n, c, -1)
        w = self.norm.weight.detach().numpy().reshape(1, c, 1)
        b = self.norm.bias.detach().numpy().reshape(1, c, 1)
        out = torch.empty(n, dtype=x.dtype)
        out.numpy()[:] = (y * w + b).reshape(n, -1).mean(axis=1, dtype=np.float32)
        return out
'''

# The published constant-output "solution": zeros, whatever the input.
CONSTANT = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()

    def forward(self, x):
        return torch.zeros(x.shape[0], dtype=x.dtype)
'''

# KernelBench level 3 #35's shape of model: an LSTM whose initial state is plain tensor attributes.
LSTM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size):
        super().__init__()
        self.h0 = torch.randn((num_layers, batch_size, hidden_size))
        self.c0 = torch.randn((num_layers, batch_size, hidden_size))
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        out, _ = self.lstm(x, (self.h0, self.c0))
        return self.fc(out[:, -1, :])

batch_size = 4
sequence_length = 6
input_size = 8
hidden_size = 16
num_layers = 2
output_size = 3

def get_inputs():
    return [torch.randn(batch_size, sequence_length, input_size)]

def get_init_inputs():
    return [input_size, hidden_size, num_layers, output_size]
'''
LSTM_OWN = LSTM.split("batch_size = 4")[0].replace("class Model(", "class ModelNew(") + "\nbatch_size = 4\n"

# A reference that works in its own precision and fails in fp64: state made in forward, in fp32.
FP64_FAILS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mm(x, torch.linspace(-1.0, 1.0, x.shape[1] * 4).reshape(x.shape[1], 4))

def get_inputs():
    return [torch.randn(16, 32)]

def get_init_inputs():
    return []
'''
FP64_FAILS_OWN = FP64_FAILS.split("def get_inputs")[0].replace("class Model(", "class ModelNew(")

CASES = {
    "noise-own": ("noise", NOISE, OWN_FORWARD),
    "noise-numpy": ("noise", NOISE, NUMPY_KERNEL),
    "noise-constant": ("noise", NOISE, CONSTANT),
    "lstm-own": ("lstm", LSTM, LSTM_OWN),
    "fp64-fails-own": ("fp64_fails", FP64_FAILS, FP64_FAILS_OWN),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Verdict]:
    folder = tmp_path_factory.mktemp("hard")
    paths = {}
    for name, problem, _ in CASES.values():
        paths[name] = folder / f"{name}.py"
        paths[name].write_text(problem)

    async def go() -> dict[str, Verdict]:
        evaluator = LocalEvaluator("cpu")
        try:
            got = {}
            for case, (name, _, source) in CASES.items():
                got[case] = await evaluator.evaluate(evaluator.job(str(paths[name]), source, {}, flops=None,
                                                                   bytes=None, time_budget_s=0.2, trials=3))
            return got
        finally:
            await evaluator.close()

    return asyncio.run(go())


def test_the_reference_s_own_forward_on_an_output_of_noise_is_never_incorrect(verdicts):
    v = verdicts["noise-own"]
    assert v.status == "flagged", f"{v.status}: {v.log}"  # torch does all of the reference's work
    assert any(n.startswith("noise around zero: output 0") for n in v.notes), v.notes
    assert any(n.startswith("degenerate problem") for n in v.notes), v.notes


def test_an_honest_kernel_on_an_output_of_noise_is_correct(verdicts):
    v = verdicts["noise-numpy"]
    assert v.status == "correct", f"{v.status}: {v.flags} {v.log}"
    assert any(n.startswith("noise around zero") for n in v.notes), v.notes


def test_a_constant_on_an_output_of_noise_passes_allclose_but_is_flagged_input_independent(verdicts):
    """allclose(atol=1e-2) says a constant zero is within the tolerance of noise of 1e-8 (as KernelBench
    says); the reference's outputs change from draw to draw, a constant's do not: flagged, not correct."""
    v = verdicts["noise-constant"]
    assert v.status == "flagged", f"{v.status}: {v.log}"
    assert any(f.startswith("input-independent") for f in v.flags), v.flags


def test_state_in_plain_tensor_attributes_is_converted_to_fp64(verdicts):
    v = verdicts["lstm-own"]
    assert v.status == "flagged", f"{v.status}: {v.log}"  # (the reference's own forward)
    assert v.memory["answers"] == "fp64", v.memory
    assert v.max_abs_err < 1e-5, v.max_abs_err


def test_a_reference_that_fails_in_fp64_is_answered_natively_and_says_so(verdicts):
    v = verdicts["fp64-fails-own"]
    assert v.status == "flagged", f"{v.status}: {v.log}"
    assert v.memory["answers"] == "native", v.memory
    assert "fails in fp64" in v.memory.get("answers_why", ""), v.memory
    assert any(n.startswith("answers: the reference fails in fp64") for n in v.notes), v.notes


def test_noise_is_told_from_a_small_output_by_the_reference_s_own_error():
    from engine.evaluate.child.check import noise_outputs

    class Checks:
        native_rel_l2 = [6e8, 3e-7, 0.004]

    assert noise_outputs(Checks(), 1e-2) == frozenset({0, 2})
    ref = torch.full((100,), 1e-17, dtype=torch.float64)
    out = torch.randn(100) * 1e-8
    assert not compare(out, ref, 1e-2, 1e-2)[0]  # the relative L2 error of rounding: 1e9
    ok, errs, _ = compare(out, ref, 1e-2, 1e-2, noise={0})
    assert ok and errs["rel_l2_err"] == 0.0
    assert not compare(out + 0.5, ref, 1e-2, 1e-2, noise={0})[0]  # allclose still speaks


def test_docs_state_the_rules():
    text = (Path(__file__).resolve().parents[2] / "docs" / "verdicts.md").read_text()
    assert "noise around zero" in text and "fails in fp64" in text


# A weight-heavy model at cpu (KernelBench level 2 #59's shape, at a quarter of its width): 1 GiB of
# weights and little else. The bound: the reference's own peak + 2 x (inputs + outputs) + 2 GiB.
HEAVY = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features, bias=False)

    def forward(self, x):
        return self.linear(x) * 0.5

features = 16384

def get_inputs():
    return [torch.randn(4, features)]

def get_init_inputs():
    return [features]
'''
HEAVY_OWN = HEAVY.split("features = 16384")[0].replace("class Model(", "class ModelNew(")
PLAN_FACTOR = 2.0  # the plan's estimate within this factor of the measured peak (as test_memory_plan's)


@pytest.fixture(scope="module")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> Verdict:
    path = tmp_path_factory.mktemp("heavy") / "linear_1gib.py"
    path.write_text(HEAVY)

    async def go() -> Verdict:
        evaluator = LocalEvaluator("cpu")
        try:
            return await evaluator.evaluate(evaluator.job(str(path), HEAVY_OWN, {}, flops=None, bytes=None,
                                                          time_budget_s=0.2, trials=2))
        finally:
            await evaluator.close()

    return asyncio.run(go())


@pytest.mark.slow
def test_a_weight_heavy_model_stays_within_the_bound(heavy):
    v = heavy
    m = v.memory
    assert v.status == "flagged", f"{v.status}: {v.log}"  # (the reference's own forward)
    assert m["weights_bytes"] == 2**30 and m["reference_peak_bytes"] >= 2**30, m
    assert m["answers"] == "native", m  # its fp64 copy (2 GiB) beside two models does not fit the margin
    assert m["host_peak_bytes"] <= m["bound_bytes"], m
    measured = m["host_peak_bytes"] - m["host_start_bytes"]
    assert m["plan_bytes"] / PLAN_FACTOR <= measured <= m["plan_bytes"] * PLAN_FACTOR, m


def test_the_plan_counts_the_models_it_holds():
    """With 1 GiB of weights the fp64 copy (2 GiB) beside the reference and the candidate leaves no
    room in the 2 GiB margin: native answers, and an estimate that counts both models."""
    from engine.evaluate.harness import memory

    gib, mib = 2**30, 2**20
    heavy = memory.make_plan(inputs=mib // 4, outputs=mib // 4, inputs64=mib // 2, outputs64=mib // 2,
                             reference_peak=gib + mib, trials=3, weights=gib, weights64=2 * gib)
    assert heavy.answers == "native" and heavy.estimate <= heavy.bound
    assert heavy.estimate >= 2 * gib  # the reference's weights and the candidate's
    light = memory.make_plan(inputs=mib // 4, outputs=mib // 4, inputs64=mib // 2, outputs64=mib // 2,
                             reference_peak=64 * mib + mib, trials=3, weights=64 * mib, weights64=128 * mib)
    assert light.answers == "fp64" and light.estimate >= 4 * 64 * mib  # (+ its fp64 copy)
    assert light.record()["weights_bytes"] == 64 * mib


def test_an_output_of_noise_is_named_degenerate_where_problems_are_listed(tmp_path: Path):
    from engine.problems import load_problem

    path = tmp_path / "groupnorm_mean.py"
    path.write_text(NOISE)
    assert load_problem(str(path)).degenerate
    lstm = tmp_path / "lstm.py"
    lstm.write_text(LSTM)
    assert not load_problem(str(lstm)).degenerate


def test_a_precision_cast_casts_plain_tensor_attributes_too():
    from engine.evaluate.languages.common import model_to

    namespace: dict = {}
    exec(LSTM, namespace)
    model = model_to(namespace["Model"](8, 16, 2, 3), "cpu", torch.float64)
    assert model.h0.dtype == model.c0.dtype == model.lstm.weight_ih_l0.dtype == torch.float64
    out = model(torch.randn(4, 6, 8, dtype=torch.float64))
    assert out.dtype == torch.float64
