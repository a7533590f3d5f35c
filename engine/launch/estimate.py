"""`ktree run ... --estimate`: what a search of this shape will ask of the LLMs, before it runs.

Calls follow from the shape; input tokens from the real prompts (built for this problem, 4
characters a token); output tokens from stated assumptions (a JSON list of ideas; a full
solution file with some prose). Reasoning tokens (billed as output, often several times the
visible reply) are estimated per model as a range: from the session history in the DB where that
model has answered calls (10th, mean and 90th percentile of its reasoning tokens per call), else
from `REASONING_DEFAULTS`, reasoning tokens per visible output token by model family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine import prompts
from engine.domain import counted
from engine.llm import providers
from engine.llm.prices import Prices
from engine.search.strategies import strategy_for

IDEA_OUT_TOKENS = 160  # per idea: a title and a paragraph
CODE_OUT_FACTOR = 3.0  # a solution file is about 3x the reference (kernel source + wrapper)
CODE_OUT_MIN = 1200
LOG_TOKENS = 1000  # compiler log in a fix prompt (the prompt keeps its last 4000 characters)

# Reasoning tokens per visible output token (low, expected, high), by model-name prefix: the
# documented defaults where the DB has no history for the model. Reasoning models ("o1/o3/o4",
# "gpt-5", Gemini 2.5 thinking, DeepSeek R1) think for a few times their reply (the method's
# published runs: about 3 M input and 4 M output tokens, most of the output reasoning); other
# models none.
REASONING_DEFAULTS: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("o1", (1.0, 3.0, 6.0)), ("o3", (1.0, 3.0, 6.0)), ("o4", (1.0, 3.0, 6.0)),
    ("gpt-5", (1.0, 3.0, 6.0)), ("gemini-2.5", (0.5, 2.0, 4.0)), ("gemini-3", (0.5, 2.0, 4.0)),
    ("deepseek-r1", (1.0, 3.0, 6.0)), ("deepseek-reasoner", (1.0, 3.0, 6.0)),
)


def reasoning_rate(model: str, history: Mapping[str, Sequence[int]] | None, output_per_call: float
                   ) -> tuple[tuple[float, float, float], str]:
    """(low, expected, high) reasoning tokens per call for `model`, and where they come from."""
    calls = sorted((history or {}).get(model) or [])
    if calls:
        n = len(calls)
        return ((calls[int(0.1 * (n - 1))], sum(calls) / n, calls[int(0.9 * (n - 1))]),
                f"history: {n} calls in the DB")
    name = model.split("/")[-1].lower()
    for prefix, ratios in REASONING_DEFAULTS:
        if name.startswith(prefix):
            lo, mid, hi = ratios
            return ((lo * output_per_call, mid * output_per_call, hi * output_per_call),
                    f"default for {prefix}*: {lo:g}-{hi:g}x the visible output")
    return (0.0, 0.0, 0.0), "no reasoning (not a reasoning model family)"


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def estimate(problem: Any, config: Any, models: list[tuple[str, str]], backend: str,
             price_overrides: Mapping[str, Mapping] | None = None,
             reasoning_history: Mapping[str, Sequence[int]] | None = None) -> dict[str, Any]:
    """Calls, tokens and dollars: `expected` assumes every variant compiles, `most` that every
    one needs all its fix attempts."""
    k, m, r, t = config.shape.ideas, config.shape.variants, config.shape.rounds, config.shape.top
    strategy = strategy_for(config.shape.strategy, rounds=r, ideas=k, variants=m, top=t)
    idea_calls, per_call_ideas = strategy.idea_calls(), strategy.ideas_per_call()
    impl = idea_calls * per_call_ideas * strategy.variants_per_idea()
    fixes = impl * config.shape.fixes

    ref_tokens = _tokens(problem.source)
    code_out = max(CODE_OUT_MIN, int(ref_tokens * CODE_OUT_FACTOR))
    sample = "x" * (code_out * 4)  # a later round's parent is a variant of about this size
    idea = prompts.IdeaText("An optimization idea", "y" * 4 * IDEA_OUT_TOKENS)
    idea_in_first = _tokens(prompts.idea_prompt(problem.source, problem.source, "-", [], per_call_ideas,
                                                backend))
    idea_in_later = _tokens(prompts.idea_prompt(problem.source, sample, "-" * 400, ["t"] * 3,
                                                per_call_ideas, backend))
    impl_in = _tokens(prompts.implement_prompt(problem.source, sample, idea, backend, config.checks.rtol))
    fix_in = _tokens(prompts.fix_prompt(problem.source, sample, idea.title, "z" * 4 * LOG_TOKENS,
                                        backend, config.checks.rtol))
    first_calls = len(strategy.first_parents(0))  # the rest see a variant
    idea_in = first_calls * idea_in_first + (idea_calls - first_calls) * idea_in_later
    idea_out = idea_calls * per_call_ideas * IDEA_OUT_TOKENS
    expected = {"calls": idea_calls + impl, "input_tokens": idea_in + impl * impl_in,
                "output_tokens": idea_out + impl * code_out}
    most = {"calls": expected["calls"] + fixes,
            "input_tokens": expected["input_tokens"] + fixes * fix_in,
            "output_tokens": expected["output_tokens"] + fixes * code_out}

    prices = Prices.load(price_overrides)
    named = [(p, mdl or providers.default_model(p)) for p, mdl in models]
    unpriced = sorted({mdl for p, mdl in named if providers.priced(p) and not prices.known(mdl)})
    per_model = [prices.get(mdl) for _, mdl in named]

    def dollars(row: dict[str, int]) -> float:
        # Calls go round-robin over the models: each takes an equal share.
        share = 1 / len(per_model)
        return sum(share * (row["input_tokens"] * p.input_per_mtok + row["output_tokens"] * p.output_per_mtok)
                   / 1e6 for p in per_model if p is not None)

    # Reasoning: the expected calls, shared round-robin by the models, each at its own rate.
    calls = expected["calls"]
    out_per_call = expected["output_tokens"] / max(1, calls)
    reasoning = {"per_model": {}, "tokens": [0.0, 0.0, 0.0], "cost_usd": [0.0, 0.0, 0.0]}
    for (prov, mdl), price in zip(named, per_model, strict=True):
        rates, source = reasoning_rate(mdl, reasoning_history, out_per_call) if prov != "scripted" else (
            (0.0, 0.0, 0.0), "scripted: none")
        share = calls / len(named)
        reasoning["per_model"][f"{prov}:{mdl}"] = {"per_call": [round(r) for r in rates], "source": source}
        for i, rate in enumerate(rates):
            reasoning["tokens"][i] += share * rate
            if price is not None:
                reasoning["cost_usd"][i] += share * rate * price.output_per_mtok / 1e6
    reasoning["tokens"] = [round(t) for t in reasoning["tokens"]]
    reasoning["cost_usd"] = [round(c, 4) for c in reasoning["cost_usd"]]
    base = dollars(expected)
    return {
        "reasoning": reasoning,
        "with_reasoning_usd": [round(base + c, 4) for c in reasoning["cost_usd"]],
        "strategy": config.shape.strategy, "shape": {"rounds": r, "ideas": k, "variants": m, "top": t,
                                               "fixes": config.shape.fixes},
        "models": [f"{p}:{mdl}" for p, mdl in named], "unpriced_models": unpriced,
        "calls": {"idea": idea_calls, "implement": impl, "fix_at_most": fixes},
        "expected": {**expected, "cost_usd": round(dollars(expected), 4)},
        "at_most": {**most, "cost_usd": round(dollars(most), 4)},
        "assumptions": assumptions(f"the prompts built for {problem.name}", str(code_out)),
        "solution_tokens": code_out,
    }


def assumptions(prompts_of: str, solution_tokens: str) -> str:
    """What an estimate assumes, in words (a suite's: each problem's own prompts)."""
    return (f"input tokens from {prompts_of} (4 characters a token); output {IDEA_OUT_TOKENS} tokens an"
            f" idea, {solution_tokens} a solution file; reasoning tokens (billed as output) counted apart,"
            " as a range per model")


def format_estimate(e: dict[str, Any]) -> str:
    s, c = e["shape"], e["calls"]
    lines = [
        f"Estimate for a {e['strategy']} search: {counted(s['rounds'], 'round')} x"
        f" {counted(s['ideas'], 'idea')} x {counted(s['variants'], 'variant')}, top {s['top']},"
        f" {counted(s['fixes'], 'fix', 'fixes')};"
        f" models {', '.join(e['models'])}",
        f"  LLM calls: {c['idea']} idea + {c['implement']} implement (+ up to {c['fix_at_most']} fix)",
    ]
    for label, key in (("expected (every variant builds)", "expected"),
                       ("at most (every fix used)", "at_most")):
        row = e[key]
        lines.append(f"  {label}: {row['calls']} calls, {row['input_tokens']:,} in / {row['output_tokens']:,}"
                     f" out tokens, ${row['cost_usd']:.4f}")
    r = e.get("reasoning")
    if r:
        lo, mid, hi = r["tokens"]
        cl, cm, ch = e["with_reasoning_usd"]
        lines.append(f"  reasoning tokens: {lo:,} - {hi:,} (expected {mid:,}); with them the expected run"
                     f" costs ${cl:.4f} - ${ch:.4f} (expected ${cm:.4f})")
        for model, m in r["per_model"].items():
            lines.append(f"    {model}: {m['per_call'][0]:,}-{m['per_call'][2]:,} a call ({m['source']})")
    if e["unpriced_models"]:
        lines.append(f"  no price known for {', '.join(e['unpriced_models'])}: counted as $0"
                     " (add [prices.\"MODEL\"] to the config)")
    lines.append(f"  assumptions: {e['assumptions']}")
    return "\n".join(lines)
