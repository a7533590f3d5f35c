"""Triton as a second kernel language, with no GPU: language detection, the Triton contract and
fix prompt, the scripted provider's Triton answers, `--language`, and (where triton is installed)
Triton solutions run end to end on the cpu backend under Triton's interpreter: the library's
intended verdicts, the integrity checks on Triton twins of the CUDA hacks, a mixed search, and
export → eval. tests/evaluate/test_triton_gpu.py runs the same on a GPU."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest

from engine import prompts
from engine.evaluate.languages import kernel_language
from engine.evaluate.verdict import Verdict
from engine.launch import RunRequest
from engine.llm.scripted import ScriptedProvider, has_scripted
from engine.problems import load_problem
from engine.scripted_library import answered
from engine.search.config import SearchConfig
from tests.conftest import kernel_flags, query, run_ktree
from tests.evaluate.triton_cases import SCRIPTED, TRITON_HACKS, TRITON_KERNEL, intended_status, library

HAVE_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")


# --- language detection, prompts, parsing, the scripted provider -----------------------------------

def test_language_is_told_from_the_source():
    for path in library("softmax") + library("layernorm") + [SCRIPTED / "matmul_fp16/triton/tiled_1.py"]:
        assert kernel_language(path.read_text()) == "triton", path
    for path in (SCRIPTED / "softmax" / "cuda").glob("*.py"):
        assert kernel_language(path.read_text()) == "cuda", path
    assert kernel_language("import torch\nclass ModelNew: pass\n") == "cuda"
    assert kernel_language("from triton import language as tl\n") == "triton"
    assert kernel_language("import torch\n@triton.jit\ndef k(): pass\n") == "triton"
    # A word in a docstring or comment is not an import.
    assert kernel_language('"""Faster than a Triton kernel: import triton is not needed."""\n') == "cuda"


def test_the_triton_contract_replaces_the_cuda_one_by_language():
    idea = prompts.IdeaText("Online softmax", "one pass")
    triton = prompts.implement_prompt("src", "parent", idea, "cuda", 0.01, language="triton")
    cuda = prompts.implement_prompt("src", "parent", idea, "cuda", 0.01)
    assert "@triton.jit" in triton and "torch.utils.cpp_extension" not in triton
    assert "current stream" in triton and "host syncs" in triton and "no torch compute" in triton
    assert "load_inline" in cuda and "@triton.jit" not in cuda
    cpu_triton = prompts.implement_prompt("src", "parent", idea, "cpu", 0.01, language="triton")
    assert "@triton.jit" in cpu_triton  # on the cpu backend Triton runs under its interpreter
    fix = prompts.fix_prompt("src", "import triton\n", "idea", "CompilationError: at 3:4", "cuda", 0.01,
                             language="triton")
    assert "Triton's JIT compiler rejected" in fix and "## Triton JIT error (tail)" in fix
    assert "CompilationError: at 3:4" in fix and "@triton.jit" in fix
    assert "## Compiler output (tail)" in prompts.fix_prompt("s", "x", "i", "log", "cuda", 0.01)


def test_a_triton_reply_is_parsed_like_any_other():
    source = (SCRIPTED / "softmax/triton/online_1.py").read_text()
    reply = f"Here it is.\n\n```python\n{source}```\nDone."
    code = prompts.extract_code(reply)
    assert code.strip() == source.strip() and kernel_language(code) == "triton"


def test_the_scripted_provider_answers_in_the_language_the_contract_asks_for():
    provider = ScriptedProvider("softmax", "cuda", seed=0)
    idea = next(i for i in provider.ideas if i.key == "online")
    for language in ("triton", "cuda"):
        prompt = prompts.implement_prompt("src", "parent", prompts.IdeaText(idea.title, ""), "cuda", 0.01,
                                          language=language)
        code = prompts.extract_code(provider.answer(prompt))
        assert kernel_language(code) == language
    # The fix prompt of the library's non-compiling Triton kernel gets its corrected file.
    broken = SCRIPTED / "softmax/triton/rowblock_2.py"
    fix = prompts.fix_prompt("src", broken.read_text(), "idea", "error", "cuda", 0.01, language="triton")
    fixed = prompts.extract_code(provider.answer(fix))
    assert fixed.strip() == answered(broken.parent / "fixes" / broken.name).strip()  # (less its test note)
    # matmul_fp16 has Triton kernels only.
    assert has_scripted("matmul_fp16", "cuda", "triton") and not has_scripted("matmul_fp16", "cuda", "cuda")


def test_every_triton_library_file_declares_its_outcome_and_the_set_is_complete():
    for problem in ("softmax", "layernorm"):
        outcomes = [intended_status(f.read_text()) for f in library(problem)]
        assert {"correct", "incorrect", "compile_error"} <= set(outcomes), problem


@pytest.mark.slow
def test_language_flag_usage_errors_are_one_line(tmp_path: Path):
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--backend", "cpu", "--language", "rust",
                     "--headless", "--db", str(tmp_path / "k.db"))
    assert proc.returncode == 2 and "--language: invalid choice: 'rust'" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    # matmul_fp16's library is Triton only: the default language has nothing to answer with.
    proc = run_ktree("run", "matmul_fp16", "--provider", "scripted", "--backend", "cpu",
                     "--headless", "--db", str(tmp_path / "k.db"))
    assert proc.returncode == 2 and "no cpu answers for 'matmul_fp16'" in proc.stderr, proc.stderr


def test_variants_of_each_idea_are_spread_over_the_languages():
    from engine.search.orchestrator import Search

    class Fake:
        config = SearchConfig.of(languages=("cuda", "triton"))
        _spread = 0

    fake = Fake()
    first, second = Search.languages_for(fake, 2), Search.languages_for(fake, 1)
    third = Search.languages_for(fake, 1)
    assert sorted(first) == ["cuda", "triton"]
    assert {second[0], third[0]} == {"cuda", "triton"}  # one variant per idea: ideas alternate


# --- end to end under Triton's interpreter (cpu backend) -------------------------------------------

def one_per_outcome(files: list[Path]) -> list[Path]:
    """A file for each intended outcome, naive kernels last in the choice (they interpret slowest)."""
    chosen: dict[str, Path] = {}
    for f in sorted(files, key=lambda p: (p.name.startswith("naive"), p.name)):
        chosen.setdefault(intended_status(f.read_text()), f)
    return sorted(chosen.values())


def evaluate_cpu(problem_name: str, sources: list[str]) -> list[Verdict]:
    from engine.evaluate.host.evaluator import LocalEvaluator

    problem = load_problem(problem_name)

    async def go() -> list[Verdict]:
        evaluator = LocalEvaluator("cpu")
        cost = problem.cost("cpu")
        try:
            return [await evaluator.evaluate(evaluator.job(problem.path, s, problem.sizes_for("cpu"),
                                                           flops=cost.flops, bytes=cost.bytes))
                    for s in sources]
        finally:
            await evaluator.close()

    return asyncio.run(go())


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize("problem", ["softmax", "layernorm"])
def test_interpreted_triton_library_gets_its_intended_verdicts(problem: str):
    """One file per intended outcome under the interpreter (a naive kernel interpreted takes
    minutes on a 2-core host; the whole set runs on a GPU in tests/evaluate/test_triton_gpu.py)."""
    files = one_per_outcome(library(problem))
    verdicts = evaluate_cpu(problem, [f.read_text() for f in files])
    for path, v in zip(files, verdicts, strict=True):
        want = intended_status(path.read_text())
        assert v.status == want, f"{path.name}: {v.status} {v.flags}\n{v.log[-1500:]}"
        assert v.language == "triton", path.name
        if want == "correct":
            assert kernel_flags(v.flags) == [], (path.name, v.flags)
            assert v.jit["interpreted"] is True and v.jit["jit_s"] >= 0 and v.time_ms > 0
            assert v.compile_s >= v.jit["jit_s"]
        if want == "compile_error":
            assert "power of 2" in v.log


@pytest.mark.slow
@needs_triton
def test_a_worker_that_imported_triton_for_another_variant_still_interprets_triton_kernels():
    """The worker outlives a variant: one that imports triton as a plain module (torch itself may)
    must not leave triton's language helpers compiled-mode for the next, interpreted, variant."""
    plain = ("import torch\nimport torch.nn as nn\n__import__('triton')\n"
             "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.zeros_like(x)\n")
    assert kernel_language(plain) == "cuda"
    first, second = evaluate_cpu("softmax", [plain, TRITON_KERNEL])
    assert first.status == "incorrect"  # the worker is kept after an incorrect verdict
    assert second.status == "correct", second.log[-1500:]


@pytest.mark.slow
@needs_triton
def test_autotune_happens_before_timing_and_is_recorded():
    [v] = evaluate_cpu("softmax", [(SCRIPTED / "softmax/triton/online_1.py").read_text()])
    assert v.status == "correct", v.log
    [tuned] = v.jit["autotune"]
    assert tuned["kernel"] == "softmax_online" and tuned["configs"] == 4 and tuned["tried"] == 4
    assert "BLOCK: " in tuned["chosen"]


@pytest.mark.slow
@needs_triton
def test_integrity_checks_flag_triton_twins_of_the_cuda_hacks_and_pass_honest_kernels():
    sources = [s for s, _ in TRITON_HACKS] + [TRITON_KERNEL]
    verdicts = evaluate_cpu("softmax", sources)
    for (_, flag), v in zip(TRITON_HACKS, verdicts[:-1], strict=True):
        assert v.status == "flagged" and any(f.startswith(flag) for f in v.flags), (flag, v.status, v.flags,
                                                                                    v.log[-800:])
    honest = verdicts[-1]
    assert honest.status == "correct" and honest.language == "triton", (honest.flags, honest.log)


@pytest.mark.slow
@needs_triton
def test_a_mixed_search_records_both_languages_and_exports_a_triton_file_eval_judges_the_same(
        tmp_path: Path):
    db = tmp_path / "k.db"
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--backend", "cpu", "--language",
                     "cuda,triton", "--rounds", "1", "--ideas", "2", "--variants", "1", "--fixes", "0",
                     "--headless", "--json", "--db", str(db))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = query(db, "SELECT id, language, source, status FROM nodes WHERE kind = 'variant'")
    assert {r[1] for r in rows} == {"cuda", "triton"}
    for _, language, source, _ in rows:
        assert kernel_language(source) == language
    triton_rows = [r for r in rows if r[1] == "triton"]
    node_id, _, _, status = triton_rows[0]
    out = tmp_path / "exported.py"
    proc = run_ktree("export", "1", "--node", str(node_id), "--out", str(out), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "kernel language: Triton" in out.read_text()
    proc = run_ktree("eval", "softmax", str(out), "--backend", "cpu", "--json")
    verdict = json.loads(proc.stdout)
    assert proc.returncode == (0 if verdict["status"] == "correct" else 1), proc.stderr[-2000:]
    assert verdict["language"] == "triton" and verdict["status"] == status


def test_the_new_search_form_asks_for_the_languages():
    from engine.launch import UsageError, estimate_run
    from tests.cli.helpers import FORM
    from tui.screens.new_search import form_request

    request = form_request({**FORM, "provider": "scripted", "languages": "cuda,triton"})
    assert request.shape.languages == ("cuda", "triton")
    assert estimate_run(request, backend="cpu")  # the scripted library has both for softmax
    with pytest.raises(ValueError, match="language: invalid choice: 'cute'"):  # said on the form
        form_request({**FORM, "provider": "scripted", "languages": "cute"})
    with pytest.raises(UsageError, match="--language: invalid choice"):  # a request built elsewhere
        estimate_run(RunRequest.of("softmax", provider="scripted", languages=("cute",)), backend="cpu")


def test_the_screens_mark_triton_variants_and_highlight_them_as_python():
    from engine.domain import Node
    from tui.model import ScreenModel
    from tui.widgets.code import embedded_cxx
    from tui.widgets.timings import row_cells
    from tui.widgets.tree import node_label

    triton_src = (SCRIPTED / "softmax/triton/online_1.py").read_text()
    cuda_src = (SCRIPTED / "softmax/cuda/online_1.py").read_text()
    tri = Node(5, 1, 2, "variant", 1, "idea", "", triton_src, "correct", "llm", 1.5, 1.0, language="triton")
    cu = Node(6, 1, 2, "variant", 1, "idea", "", cuda_src, "correct", "llm", 1.2, 1.0, language="cuda")
    model = ScreenModel()
    assert "[triton]" in node_label(tri, model).plain and "[triton]" not in node_label(cu, model).plain
    assert row_cells(tri, None)["language"] == "triton" and row_cells(cu, None)["language"] == "cuda"
    assert embedded_cxx(triton_src) == [] and embedded_cxx(cuda_src) != []


def test_a_recorded_config_keeps_its_languages():
    from engine.search.config import SearchConfig

    config = SearchConfig.of(languages=("cuda", "triton"))
    recorded = json.loads(json.dumps(config.record()))  # as sessions.config holds it
    assert SearchConfig.from_dict(recorded).shape.languages == ("cuda", "triton")
    assert SearchConfig().shape.languages == ("cuda",)
