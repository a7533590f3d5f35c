
import pytest

from engine import prompts
from engine.evaluate.verdict import Verdict
from engine.prompts import IdeaText, NoIdeas, ReplyError, extract_code, parse_ideas


def test_ideas_from_json_wrapped_in_prose_and_fences():
    reply = 'Here you go:\n```json\n[{"title": "Tile it", "description": "Use smem."},' \
            ' {"title": "Fuse", "description": "One pass."}]\n```\nGood luck.'
    assert parse_ideas(reply) == [IdeaText("Tile it", "Use smem."), IdeaText("Fuse", "One pass.")]


def test_ideas_from_numbered_list():
    reply = ("Ideas:\n1. **Vectorize loads** - use float4 so each thread moves 16 bytes\n"
             "   per access.\n2) Warp shuffles: replace the shared-memory tree.\n")
    ideas = parse_ideas(reply)
    assert [i.title for i in ideas] == ["Vectorize loads", "Warp shuffles"]
    assert ideas[0].description == "use float4 so each thread moves 16 bytes per access."
    assert ideas[1].description == "replace the shared-memory tree."


@pytest.mark.parametrize("reply", ["", "I cannot help with that.", '[{"name": "x"}]'])
def test_unparseable_ideas_raise(reply: str):
    with pytest.raises(ReplyError):
        parse_ideas(reply)


def test_extract_code_takes_the_last_block_defining_modelnew():
    reply = ("First try:\n```python\nclass ModelNew: v = 1\n```\nBetter:\n"
             "```python\nclass ModelNew: v = 2\n```\n```bash\nls\n```\n")
    assert extract_code(reply) == "class ModelNew: v = 2\n"


def test_extract_code_failures_say_why():
    with pytest.raises(ReplyError, match="no fenced code block"):
        extract_code("just prose")
    with pytest.raises(ReplyError, match="define no ModelNew"):
        extract_code("```python\nprint(1)\n```")


def test_idea_prompt_carries_the_method_inputs():
    text = prompts.idea_prompt(
        "class Model: ...", "class ModelNew: ...",
        prompts.describe_verdict(Verdict(status="correct", time_ms=1.5, ref_eager_ms=3.0,
                                         speedup_eager=2.0, max_abs_err=1e-6)),
        ["Tile it"], 4, "cuda",
    )
    assert "Propose exactly 4 distinct" in text
    assert "- Tile it" in text
    assert "speedup vs eager: 2x" in text
    assert "class ModelNew: ..." in text


def test_implement_prompt_names_the_idea_and_contract():
    text = prompts.implement_prompt("class Model: ...", "parent", IdeaText("Fuse", "One pass."),
                                    "cpu", 1e-2)
    assert f"{prompts.IMPLEMENT_HEADER}\nFuse\nOne pass." in text
    assert "cpp_sources" in text and "atol=rtol=0.01" in text


def test_an_empty_json_list_is_no_ideas_not_unparseable():
    for reply in ("[]", "```json\n[]\n```", "Nothing to add: []"):
        try:
            parse_ideas(reply)
        except NoIdeas as exc:
            assert "empty list of ideas" in str(exc)
        else:
            raise AssertionError(f"{reply!r} parsed")
    try:
        parse_ideas("I cannot help with that.")
    except NoIdeas:
        raise AssertionError("prose is unparseable, not an empty list") from None
    except ReplyError:
        pass


def test_cpu_prompts_speak_of_the_cpu_and_give_the_run_s_sizes():
    """Issue 56, item 4: every prompt opened "You are an expert GPU performance engineer" on the cpu
    backend, and showed the file's GPU sizes (batch_size = 4096, dim = 65536) while the run timed
    the cpu ones: a real model would tune for the wrong machine and size."""
    from engine.problems import load_problem

    problem = load_problem("softmax")
    cpu, gpu = problem.sizes_for("cpu"), problem.sizes_for("cuda")
    assert cpu != gpu
    idea = IdeaText("Fuse", "One pass.")
    made = {
        "idea": lambda backend, sizes: prompts.idea_prompt(problem.source, problem.source, "-", [], 3, backend,
                                                           sizes=sizes),
        "implement": lambda backend, sizes: prompts.implement_prompt(problem.source, problem.source, idea,
                                                                     backend, 1e-2, sizes=sizes),
        "fix": lambda backend, sizes: prompts.fix_prompt(problem.source, "class ModelNew: ...", "Fuse", "error",
                                                         backend, 1e-2, sizes=sizes),
    }
    for name, make in made.items():
        text = make("cpu", cpu)
        assert text.startswith("You are an expert CPU performance engineer.") and "GPU performance" not in text
        for key, value in cpu.items():  # the reference (and a parent that is it) at the run's sizes
            assert f"\n{key} = {value}  # this run's size (the file's own, {gpu[key]}, is for the GPU)" in text
            assert f"\n{key} = {gpu[key]}\n" not in text, name
        assert f"This run times it at batch_size = {cpu['batch_size']}, dim = {cpu['dim']}" in text
        gpu_text = make("cuda", gpu)  # a GPU run: the file as it is
        assert gpu_text.startswith("You are an expert GPU performance engineer.")
        assert problem.source.strip() in gpu_text and "this run's size" not in gpu_text


def test_an_empty_list_s_title_says_why_only_where_the_reply_does():
    """Issue 56, item 10: the node of an empty idea list is titled with the reply's reason; a bare
    (or fenced) `[]` says no more than that none came."""
    for reply, title in (("```json\n[]\n```", "(no ideas returned)"), ("[]", "(no ideas returned)"),
                         ("All 3 ideas are tried here: none left.\n```json\n[]\n```",
                          "(no ideas: all 3 ideas are tried here)")):
        try:
            parse_ideas(reply)
        except NoIdeas as exc:
            assert exc.title == title, reply
        else:
            raise AssertionError(f"{reply!r} parsed")
