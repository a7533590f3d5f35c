"""`ktree run ... --estimate`: what a search of this shape will ask of the LLMs, before it runs.

Calls follow from the shape; input tokens from the real prompts (built for this problem, 4
characters a token); output tokens from stated assumptions (a JSON list of ideas; a full
solution file with some prose). Reasoning tokens are not counted: with a reasoning model they
are billed as output and can be several times the visible reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine import prompts
from engine.llm.prices import Prices
from engine.llm.registry import DEFAULT_MODELS
from engine.search.strategies import strategy_for

IDEA_OUT_TOKENS = 160  # per idea: a title and a paragraph
CODE_OUT_FACTOR = 3.0  # a solution file is about 3x the reference (kernel source + wrapper)
CODE_OUT_MIN = 1200
LOG_TOKENS = 1000  # compiler log in a fix prompt (the prompt keeps its last 4000 characters)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def estimate(problem: Any, config: Any, models: list[tuple[str, str]], backend: str,
             price_overrides: Mapping[str, Mapping] | None = None) -> dict[str, Any]:
    """Calls, tokens and dollars: `expected` assumes every variant compiles, `most` that every
    one needs all its fix attempts."""
    k, m, r, t = config.ideas, config.variants, config.rounds, config.top
    strategy = strategy_for(config.strategy, rounds=r, ideas=k, variants=m, top=t)
    idea_calls, per_call_ideas = strategy.idea_calls(), strategy.ideas_per_call()
    impl = idea_calls * per_call_ideas * strategy.variants_per_idea()
    fixes = impl * config.fixes

    ref_tokens = _tokens(problem.source)
    code_out = max(CODE_OUT_MIN, int(ref_tokens * CODE_OUT_FACTOR))
    sample = "x" * (code_out * 4)  # a later round's parent is a variant of about this size
    idea = prompts.IdeaText("An optimization idea", "y" * 4 * IDEA_OUT_TOKENS)
    idea_in_first = _tokens(prompts.idea_prompt(problem.source, problem.source, "-", [], per_call_ideas,
                                                backend))
    idea_in_later = _tokens(prompts.idea_prompt(problem.source, sample, "-" * 400, ["t"] * 3,
                                                per_call_ideas, backend))
    impl_in = _tokens(prompts.implement_prompt(problem.source, sample, idea, backend, config.rtol))
    fix_in = _tokens(prompts.fix_prompt(problem.source, sample, idea.title, "z" * 4 * LOG_TOKENS,
                                        backend, config.rtol))
    first_calls = len(strategy.first_parents(0))  # the rest see a variant
    idea_in = first_calls * idea_in_first + (idea_calls - first_calls) * idea_in_later
    idea_out = idea_calls * per_call_ideas * IDEA_OUT_TOKENS
    expected = {"calls": idea_calls + impl, "input_tokens": idea_in + impl * impl_in,
                "output_tokens": idea_out + impl * code_out}
    most = {"calls": expected["calls"] + fixes,
            "input_tokens": expected["input_tokens"] + fixes * fix_in,
            "output_tokens": expected["output_tokens"] + fixes * code_out}

    prices = Prices.load(price_overrides)
    named = [(p, mdl or DEFAULT_MODELS.get(p, "")) for p, mdl in models]
    unpriced = sorted({mdl for p, mdl in named if p != "scripted" and not prices.known(mdl)})
    per_model = [prices.get(mdl) for _, mdl in named]

    def dollars(row: dict[str, int]) -> float:
        # Calls go round-robin over the models: each takes an equal share.
        share = 1 / len(per_model)
        return sum(share * (row["input_tokens"] * p.input_per_mtok + row["output_tokens"] * p.output_per_mtok)
                   / 1e6 for p in per_model if p is not None)

    return {
        "strategy": config.strategy, "shape": {"rounds": r, "ideas": k, "variants": m, "top": t,
                                               "fixes": config.fixes},
        "models": [f"{p}:{mdl}" for p, mdl in named], "unpriced_models": unpriced,
        "calls": {"idea": idea_calls, "implement": impl, "fix_at_most": fixes},
        "expected": {**expected, "cost_usd": round(dollars(expected), 4)},
        "at_most": {**most, "cost_usd": round(dollars(most), 4)},
        "assumptions": (f"input tokens from the prompts built for {problem.name} (4 characters a token);"
                        f" output {IDEA_OUT_TOKENS} tokens an idea, {code_out} a solution file;"
                        " reasoning tokens not included (billed as output)"),
    }


def format_estimate(e: dict[str, Any]) -> str:
    s, c = e["shape"], e["calls"]
    lines = [
        f"Estimate for a {e['strategy']} search: {s['rounds']} rounds x {s['ideas']} ideas x"
        f" {s['variants']} variants, top {s['top']}, {s['fixes']} fix(es); models {', '.join(e['models'])}",
        f"  LLM calls: {c['idea']} idea + {c['implement']} implement (+ up to {c['fix_at_most']} fix)",
    ]
    for label, key in (("expected (every variant builds)", "expected"),
                       ("at most (every fix used)", "at_most")):
        row = e[key]
        lines.append(f"  {label}: {row['calls']} calls, {row['input_tokens']:,} in / {row['output_tokens']:,}"
                     f" out tokens, ${row['cost_usd']:.4f}")
    if e["unpriced_models"]:
        lines.append(f"  no price known for {', '.join(e['unpriced_models'])}: counted as $0"
                     " (add [prices.\"MODEL\"] to the config)")
    lines.append(f"  assumptions: {e['assumptions']}")
    return "\n".join(lines)
