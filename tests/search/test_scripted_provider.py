import asyncio

import pytest

from engine import prompts
from engine.llm.base import LLMError, Message
from engine.llm.scripted import STAND_IN_MARK, ScriptedProvider, load_ideas, scripted_problems, unstamped
from engine.scripted_library import answered


def ask(provider: ScriptedProvider, text: str) -> str:
    return asyncio.run(provider.complete([Message("user", text)])).text


SEEDS = ["softmax", "layernorm", "matmul", "conv2d", "conv_relu_maxpool"]


@pytest.mark.parametrize("problem", SEEDS)
@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_scripted_library_has_three_ideas_with_two_variants(problem: str, backend: str):
    ideas = load_ideas(problem, backend)
    assert len(ideas) >= 3
    assert all(len(i.variants) >= 2 for i in ideas)
    assert len({i.title for i in ideas}) == len(ideas)
    sources = [v.read_text() for i in ideas for v in i.variants]
    assert len(set(sources)) == len(sources)  # genuinely different files
    assert all("ModelNew" in s and "load_inline" in s for s in sources)
    if backend == "cpu":
        assert not any("cuda_sources" in s for s in sources)


def test_ideas_answer_respects_k_and_skips_tried():
    provider = ScriptedProvider("softmax", "cpu", seed=1)
    titles = [i.title for i in provider.ideas]
    prompt = prompts.idea_prompt("src", "parent", "v", [titles[0]], 2, "cpu")
    ideas = prompts.parse_ideas(ask(provider, prompt))
    assert len(ideas) == 2
    assert titles[0] not in [i.title for i in ideas]
    assert {i.title for i in ideas} <= set(titles)


def test_with_every_idea_tried_the_reply_is_empty_and_says_why_and_the_node_shows_it():
    """Issue 46, item 7: an expand (or a late round) on a branch that tried every scripted idea gets
    none, and the node, the headless line and the LLM tab say why."""
    import io

    from engine.commands._headless import HeadlessPrinter
    from engine.domain import Node
    from engine.record.events import NodeUpdated
    from tui.widgets.llm import llm_request

    provider = ScriptedProvider("softmax", "cpu", seed=1)
    titles = [i.title for i in provider.ideas]
    reply = ask(provider, prompts.idea_prompt("src", "parent", "v", titles, 2, "cpu"))
    with pytest.raises(prompts.NoIdeas) as err:
        prompts.parse_ideas(reply)
    why = str(err.value)
    assert why.startswith("the LLM returned an empty list of ideas ([]), saying: All"), why
    tried = f"all {len(titles)} scripted ideas for softmax on cpu are already tried on this branch"
    assert tried in why.lower(), why
    # the node's title says why (issue 56, item 10: the tree and `show` said only "no ideas returned")
    assert err.value.title == f"(no ideas: {tried})"
    node = Node(id=7, session_id=1, parent_id=3, kind="idea", round=4, title=err.value.title, text=why,
                source="", status="failed", origin="llm", speedup=None, time_ms=None)
    out = io.StringIO()
    HeadlessPrinter(out=out)(NodeUpdated(node))  # and its headless line
    assert f"node 7 failed: (no ideas: {tried}): the LLM returned an empty list" in out.getvalue()
    # and the LLM tab reads the call recorded on the node itself
    parent = Node(id=3, session_id=1, parent_id=1, kind="variant", round=3, title="t", text="", source="s",
                  status="correct", origin="llm", speedup=1.0, time_ms=1.0)
    ids, purpose, _ = llm_request(node, {3: parent, 7: node})
    assert 7 in ids and purpose == "idea"


def test_cpu_ideas_speak_of_cpu_work_and_their_kernels_are_found_from_any_dir():
    """Issue 46, item 18: the cpu backend's scripted ideas spoke of float4 loads, warps and blocks.
    They are worded as their cpu kernels do them, and an idea proposed in those words still finds
    its own kernels (not a stand-in) in another language's dir."""
    import re

    from engine.scripted_library import available

    gpu = re.compile(r"float4|warps?\b|shared[- ]memory|thread blocks?|\bblocks? per\b|coalesc|\bGPU|CUDA"
                     r"|tensor[- ]core|\bSMs?\b", re.I)
    for problem in available("cpu"):
        for idea in ScriptedProvider(problem, "cpu").ideas:
            assert not gpu.findall(f"{idea.title} {idea.description}"), (problem, idea.title)
    provider = ScriptedProvider("softmax", "cpu", seed=0)
    cpu_title = next(i.title for i in provider.ideas if i.key == "rowblock")
    assert cpu_title != next(i.title for i in load_ideas("softmax", "cuda") if i.key == "rowblock")
    triton = prompts.implement_prompt("src", "parent", prompts.IdeaText(cpu_title, "d"), "cpu", 0.01,
                                      language="triton")
    reply = ask(provider, triton)
    assert STAND_IN_MARK not in reply and "rowblock_" in reply, reply[:300]


def test_cpu_kernels_as_answered_speak_of_cpu_work_and_carry_no_test_notes():
    """Issue 56, item 3: the cpu kernels' docstrings said "One thread per row", "One block per row
    with a tree reduction (CPU)", and every answer carried the library's "Intended outcome: compile
    error: ..." line into the code pane and `ktree export`. The answers (implementations and fixes)
    keep the kernel's description and drop that line; the cpu ones speak of cores and lanes."""
    import ast
    import re

    from engine.scripted_library import available

    gpu = re.compile(r"thread per|blocks? per|\(CPU\)|many blocks|block statistics|float4|warps?\b|\bGPU",
                     re.I)
    answers = 0
    for problem in available("cpu"):
        provider = ScriptedProvider(problem, "cpu")
        for idea in provider.ideas:
            prompt = prompts.implement_prompt("src", "parent", prompts.IdeaText(idea.title, "d"), "cpu", 0.01)
            for _ in idea.variants:
                code = prompts.extract_code(ask(provider, prompt))
                doc = ast.get_docstring(ast.parse(code)) or ""
                assert doc and "Intended outcome" not in code, (problem, idea.key)
                assert not gpu.findall(doc), (problem, idea.key, doc.splitlines()[0])
                answers += 1
            for path in idea.variants:
                fixed = path.parent / "fixes" / path.name
                if fixed.exists():
                    reply = ask(provider, prompts.fix_prompt("src", answered(path), "x", "error", "cpu", 0.01))
                    doc = ast.get_docstring(ast.parse(prompts.extract_code(reply))) or ""
                    assert doc and "Intended outcome" not in reply and not gpu.findall(doc), fixed
    assert answers >= 30
    library = (next(load_ideas("softmax", "cpu")[0].variants[0].parent.glob("*_1.py"))).read_text()
    assert "Intended outcome:" in library  # the library's own files keep it, for its tests and benches


def test_implementation_answer_is_a_variant_of_that_idea_and_cycles():
    provider = ScriptedProvider("softmax", "cuda", seed=0)
    idea = provider.ideas[1]
    prompt = prompts.implement_prompt("src", "parent", prompts.IdeaText(idea.title, "d"), "cuda", 0.01)
    first, second = (prompts.extract_code(ask(provider, prompt)) for _ in range(2))
    files = {answered(v).strip() for v in idea.variants}
    assert first.strip() in files and second.strip() in files
    assert first != second


def test_same_seed_same_answers():
    prompt = prompts.idea_prompt("src", "parent", "v", [], 3, "cpu")
    a = ask(ScriptedProvider("layernorm", "cpu", seed=7), prompt)
    b = ask(ScriptedProvider("layernorm", "cpu", seed=7), prompt)
    assert a == b


def test_an_idea_it_has_no_kernel_for_gets_the_closest_library_kernel_and_says_so():
    """A human's injected idea: the scripted model never fails it, it answers with its closest
    idea's kernel, and the reply and the code's first line say it is a stand-in."""
    provider = ScriptedProvider("softmax", "cpu")
    prompt = prompts.implement_prompt("src", "parent", prompts.IdeaText("My own one-pass online trick", ""),
                                      "cpu", 0.01)
    reply = ask(provider, prompt)
    code = prompts.extract_code(reply)
    online = next(i for i in provider.ideas if i.key == "online")  # shares "online", "pass"
    assert code.startswith(STAND_IN_MARK) and "'My own one-pass online trick'" in code.splitlines()[0]
    assert unstamped(code).strip() in {answered(v).strip() for v in online.variants}
    assert "no implementation of 'My own one-pass online trick'" in reply
    # With nothing in common it still answers (the first idea), never with no code.
    other = prompts.implement_prompt("src", "parent", prompts.IdeaText("Use tensor cores", ""), "cpu", 0.01)
    assert prompts.extract_code(ask(provider, other)).startswith(STAND_IN_MARK)


def test_a_stand_in_that_fails_to_compile_still_gets_its_fix():
    provider = ScriptedProvider("softmax", "cpu")
    broken = next(v for i in provider.ideas for v in i.variants if (v.parent / "fixes" / v.name).exists())
    stand_in = f"{STAND_IN_MARK}no kernel was written for the idea 'x'\n{answered(broken)}"
    prompt = prompts.fix_prompt("src", stand_in, "x", "error: invalid conversion", "cpu", 0.01)
    fixed = prompts.extract_code(ask(provider, prompt))
    assert fixed.strip() == answered(broken.parent / "fixes" / broken.name).strip()


def test_the_docs_name_every_problem_the_library_answers_for():
    """docs/scripted.md's table is what `ktree problems` shows (issue 36 item 24)."""
    from pathlib import Path

    from engine.llm.scripted import scripted_backends
    from engine.problems import builtin_problems

    text = (Path(__file__).parents[2] / "docs" / "scripted.md").read_text()
    table = dict(line.strip("| ").split(" | ") for line in text.splitlines()
                 if line.startswith("| ") and not line.startswith(("| problem", "| ---")))
    backends = {name: scripted_backends(name) for name in builtin_problems()}
    shipped = {name: ", ".join(kinds) for name, kinds in backends.items() if kinds}
    assert table == shipped
    words = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
    assert f"It answers for {words[len(shipped)]} problems" in text


def test_problem_without_scripted_answers_is_refused():
    assert set(SEEDS) <= set(scripted_problems())
    provider = ScriptedProvider("gemm", "cpu")  # made (a suite records the problem as failed) ...
    assert provider.missing is not None and "no cpu answers for 'gemm'" in provider.missing
    assert provider.unanswered(["cuda"]) == provider.missing
    with pytest.raises(LLMError, match="no cpu answers for 'gemm'"):  # ... but never answers
        asyncio.run(provider.complete([Message("user", "Propose exactly 3 ideas")]))
    assert ScriptedProvider("softmax", "cpu").unanswered(["cuda", "triton"]) is None
    assert "no cpu answers for 'matmul_fp16'" in ScriptedProvider("matmul_fp16", "cpu").unanswered(["cuda"])


def test_fix_answer_corrects_a_library_variant_that_fails_to_compile():
    provider = ScriptedProvider("softmax", "cpu")
    broken = next(v for i in provider.ideas for v in i.variants if (v.parent / "fixes" / v.name).exists())
    prompt = prompts.fix_prompt("src", answered(broken), "idea", "error: invalid conversion", "cpu", 0.01)
    fixed = prompts.extract_code(ask(provider, prompt))
    assert fixed.strip() == answered(broken.parent / "fixes" / broken.name).strip()
    assert fixed != answered(broken)
    # A source recorded before the answers lost their "Intended outcome" line is still fixed.
    prompt = prompts.fix_prompt("src", broken.read_text(), "idea", "error: invalid conversion", "cpu", 0.01)
    assert prompts.extract_code(ask(provider, prompt)) == fixed
    # A source the library does not know gets no code back.
    unknown = prompts.fix_prompt("src", "class ModelNew: pass", "idea", "error", "cpu", 0.01)
    with pytest.raises(prompts.ReplyError):
        prompts.extract_code(ask(provider, unknown))


def test_bench_options_fill_every_idea_call_and_stamp_every_source():
    """fill: K ideas a call even when the library has fewer untried ones; stamp: every
    implementation a distinct source (so it builds for real), fix answers included."""
    from engine.llm.scripted import STAMP_MARK, unstamped

    provider = ScriptedProvider("softmax", "cpu", seed=3, fill=True, stamp="run7")
    titles = [i.title for i in provider.ideas]
    ideas = prompts.parse_ideas(ask(provider, prompts.idea_prompt("src", "parent", "v", titles[:1], 5, "cpu")))
    assert len(ideas) == 5
    picked = [i.title for i in ideas]
    assert set(picked[: len(titles) - 1]) == set(titles[1:])  # the untried ones come first
    assert len(set(picked[: len(titles)])) == len(titles)  # then tried ones, each once before any twice
    plain = ScriptedProvider("softmax", "cpu", seed=3)
    short = prompts.parse_ideas(ask(plain, prompts.idea_prompt("src", "parent", "v", titles[:1], 5, "cpu")))
    assert len(short) == len(titles) - 1  # without fill, the library runs out

    idea = provider.ideas[0]
    prompt = prompts.implement_prompt("src", "parent", prompts.IdeaText(idea.title, "d"), "cpu", 0.01)
    codes = [prompts.extract_code(ask(provider, prompt)) for _ in range(2 * len(idea.variants))]
    assert len(set(codes)) == len(codes)  # the same library file twice is still two sources
    assert codes[0].startswith(STAMP_MARK) and "run7-1" in codes[0].splitlines()[0]
    files = {answered(v).strip() for v in idea.variants}
    assert {unstamped(c).strip() for c in codes} == files

    broken = next(v for i in provider.ideas for v in i.variants if (v.parent / "fixes" / v.name).exists())
    stamped_broken = f"{STAMP_MARK}run7-99\n{broken.read_text()}"
    fix = prompts.fix_prompt("src", stamped_broken, "idea", "error: invalid conversion", "cpu", 0.01)
    fixed = prompts.extract_code(ask(provider, fix))
    assert unstamped(fixed).strip() == answered(broken.parent / "fixes" / broken.name).strip()
    assert fixed.startswith(STAMP_MARK)


@pytest.mark.slow
async def test_an_injected_idea_under_the_scripted_provider_is_implemented(tmp_path):
    """The newcomer's case: an idea typed by hand (`i`) under the scripted provider yields a
    variant with code and a verdict, its code saying which library kernel stands in."""
    from engine.record import control
    from engine.record.events import NodeAdded
    from tests.conftest import query
    from tests.search.helpers import Steered

    async def hook(event, s) -> None:
        if isinstance(event, NodeAdded) and event.node.kind == "root":
            await s.command(control.InjectIdea(event.node.id, "Cache rows in registers, my way"))

    s = Steered(tmp_path / "k.db", hook)
    assert (await s.run())["status"] == "finished"
    [(idea,)] = query(s.db, "SELECT id FROM nodes WHERE kind = 'idea' AND origin = 'human'")
    [(variant, status, source)] = query(s.db, "SELECT id, status, source FROM nodes WHERE parent_id = ?", idea)
    assert source.startswith(STAND_IN_MARK) and "'Cache rows in registers, my way'" in source
    assert status not in ("failed", "generating")
    assert query(s.db, "SELECT status FROM evaluations WHERE node_id = ?", variant) == [(status,)]
