
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
