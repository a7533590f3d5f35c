"""A kernel language is one module (engine/evaluate/languages; issue 37 item 2): a toy language,
written here in one file and named in KTREE_LANGUAGES, is told from its source, gets its own
contract, label, tree mark and time-limit floor, and runs end to end through `ktree eval` on the
cpu, where its evaluation process loads the same module."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from engine import domain, options, prompts
from engine.evaluate import languages
from engine.launch import UsageError, parse_languages
from tests.conftest import run_ktree

TOY = textwrap.dedent('''
    """Toy: a solution whose forward computes in numpy, under a `# ktree-language: toy` line."""
    from engine.evaluate.languages.common import EvalFailure, format_exc
    from engine.evaluate.languages.base import Language
    from engine.evaluate.loading import load_module_from_source


    class Toy(Language):
        name = "toy"
        title = "Toy"
        mark = "[toy]"
        python_only = True
        contract_mark = "Write it as a toy"
        eval_floor_s = 77.0

        def detects(self, source):
            return "# ktree-language: toy" in source

        def contract_text(self, backend):
            return "Write it as a toy: numpy in forward, tolerance $tol."

        def load(self, job, key, build_dir):
            try:
                module = load_module_from_source(job.solution_source, f"toy_{key}")
            except Exception as exc:
                raise EvalFailure("runtime_error", format_exc(exc)) from exc
            if not isinstance(getattr(module, "ModelNew", None), type):
                raise EvalFailure("runtime_error", "the solution defines no class ModelNew")
            return module


    LANGUAGE = Toy()
''')

SOLUTION = textwrap.dedent('''
    # ktree-language: toy
    import numpy as np
    import torch
    import torch.nn as nn


    class ModelNew(nn.Module):
        def forward(self, x):  # the toy's "kernel": numpy on the host
            a = x.detach().cpu().numpy()
            e = np.exp(a - a.max(axis=1, keepdims=True))
            return torch.from_numpy(e / e.sum(axis=1, keepdims=True)).to(x.device)
''')


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "toy.py"
    path.write_text(TOY)
    monkeypatch.setenv("KTREE_LANGUAGES", str(path))
    return path


def test_the_toy_language_is_asked_like_the_built_in_ones(toy: Path):
    assert languages.names() == ("cuda", "triton", "toy")
    assert languages.kernel_language(SOLUTION) == "toy"
    assert languages.kernel_language("import torch\n") == "cuda"  # the default keeps every other source
    assert parse_languages("cuda,toy") == ("cuda", "toy")
    assert prompts.contract("cpu", "toy", 0.01) == "Write it as a toy: numpy in forward, tolerance 0.01."
    assert domain.language_label("toy", "cpu") == "Toy" and domain.language_mark("toy") == "[toy]"
    assert domain.python_only(SOLUTION)
    form = {ff.name: ff for ff in options.form_fields()}  # the form and the flag offer it, no other edit
    assert form["languages"].choices == ("cuda", "triton", "toy", "cuda,triton,toy")
    assert options.language_metavar() == "cuda|triton|toy|cuda,triton,toy"
    with pytest.raises(UsageError, match="choose from cuda, triton, toy"):
        parse_languages("rust")


@pytest.mark.slow
def test_a_toy_solution_is_evaluated_end_to_end_on_the_cpu(toy: Path, tmp_path: Path):
    solution = tmp_path / "toy_softmax.py"
    solution.write_text(SOLUTION)
    proc = run_ktree("eval", "softmax", str(solution), "--backend", "cpu", "--isolation", "basic", "--json",
                     env={"KTREE_LANGUAGES": str(toy)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict = json.loads(proc.stdout)
    assert verdict["status"] == "correct" and verdict["language"] == "toy", verdict
    limit = verdict["timing"]["eval_limit"]
    assert limit["s"] >= 77.0 or limit["source"] == "unknown", limit  # its own floor, where the limit is auto
