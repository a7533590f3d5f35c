"""The search's policy parts without a run: each strategy's answers from plain nodes, and the
budget's accounting. No subprocess, no store, no LLM."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.domain import STRATEGIES, Node
from engine.llm.base import Usage
from engine.search.budget import Budget
from engine.search.strategies import REGISTRY, BestOfN, Sequential, Tree, strategy_for

SHAPE = {"rounds": 3, "ideas": 4, "variants": 2, "top": 2}
ROOT = 1


def node(id: int, kind: str = "variant", parent: int | None = None, round: int = 1,
         status: str = "correct", speedup: float | None = None, **extra: object) -> Node:
    return Node(id, 1, parent, kind, round, f"n{id}", "", "", status, "llm", speedup, None, **extra)


def tree_of(*nodes: Node) -> dict[int, Node]:
    return {n.id: n for n in (node(ROOT, "root", round=0, status="reference"), *nodes)}


def round_one(**changes: dict) -> dict[int, Node]:
    """The reference, one idea (2) from it, and four variants of it (3-6) in round 1: 3 (1.5x),
    4 (3x), 5 (2x), 6 (incorrect). `changes`: fields to replace per node, as n3={...}."""
    nodes = tree_of(node(2, "idea", ROOT, status="ok"), node(3, parent=2, speedup=1.5),
                    node(4, parent=2, speedup=3.0), node(5, parent=2, speedup=2.0),
                    node(6, parent=2, status="incorrect"))
    for key, fields in changes.items():
        at = int(key[1:])
        nodes[at] = replace(nodes[at], **fields)
    return nodes


def test_every_named_strategy_has_a_class_and_an_unknown_name_is_refused():
    assert tuple(REGISTRY) == STRATEGIES
    for name in STRATEGIES:
        assert strategy_for(name, **SHAPE).name == name
    with pytest.raises(ValueError, match="unknown strategy 'beam' \\(known: tree, sequential, best-of-n\\)"):
        strategy_for("beam", **SHAPE)


def test_the_shape_each_strategy_gives_a_round():
    tree, seq, bon = Tree(**SHAPE), Sequential(**SHAPE), BestOfN(**SHAPE)
    assert (tree.total_rounds(), tree.first_parents(ROOT), tree.ideas_per_call(), tree.variants_per_idea()) == (
        3, [ROOT], 4, 2)
    assert (seq.total_rounds(), seq.first_parents(ROOT), seq.ideas_per_call(), seq.variants_per_idea()) == (
        3, [ROOT], 1, 1)
    # Best-of-n: N = K x M independent idea calls from the reference, one idea and one variant
    # each, in one round whatever R says.
    assert (bon.total_rounds(), bon.first_parents(ROOT), bon.ideas_per_call(), bon.variants_per_idea()) == (
        1, [ROOT] * 8, 1, 1)
    # Only the revision loop tells the idea prompt how the last attempt went.
    assert (tree.feedback, seq.feedback, bon.feedback) == (False, True, False)


def test_tree_keeps_the_top_t_of_this_round_by_speedup():
    nodes = round_one()
    assert Tree(**SHAPE).next_parents(nodes, 1, [ROOT]) == [4, 5]
    assert Tree(**{**SHAPE, "top": 1}).next_parents(nodes, 1, [ROOT]) == [4]
    # Only this round's: round 2's parents come from round 2, however fast round 1's were.
    nodes[7] = node(7, parent=4, round=2, speedup=1.1)
    assert Tree(**SHAPE).next_parents(nodes, 2, [4, 5]) == [7]


def test_tree_keeps_pinned_nodes_first_and_never_a_pruned_one():
    nodes = round_one(n1={"pinned": True}, n4={"pruned": True})
    assert Tree(**SHAPE).next_parents(nodes, 1, [ROOT]) == [ROOT, 5, 3]
    # A pinned node under a pruned one is not kept; a pinned variant is not counted twice.
    nodes = round_one(n2={"pruned": True}, n5={"pinned": True})
    assert Tree(**SHAPE).next_parents(nodes, 1, [ROOT]) == [ROOT]
    nodes = round_one(n5={"pinned": True})
    assert Tree(**SHAPE).next_parents(nodes, 1, [ROOT]) == [5, 4, 3]


def test_tree_tries_the_same_parents_again_when_nothing_was_correct():
    nodes = round_one(n3={"status": "incorrect"}, n4={"status": "compile_error"}, n5={"status": "failed"})
    assert Tree(**SHAPE).next_parents(nodes, 1, [ROOT]) == [ROOT]
    # Two parents, one of them since pruned and one pinned (kept anyway, not repeated).
    nodes[7] = node(7, parent=2, round=1, status="incorrect", pruned=True)
    nodes[8] = node(8, parent=2, round=1, status="incorrect", pinned=True)
    nodes[9] = node(9, "idea", 7, round=2, status="ok")
    nodes[10] = node(10, parent=9, round=2, status="incorrect")
    assert Tree(**SHAPE).next_parents(nodes, 2, [7, 8, 8]) == [8]


def test_sequential_grows_from_the_best_so_far_of_any_round():
    nodes = round_one()
    seq = Sequential(**SHAPE)
    assert seq.next_parents(nodes, 1, [ROOT]) == [4]
    nodes[7] = node(7, parent=4, round=2, speedup=1.1)  # worse than round 1's best
    assert seq.next_parents(nodes, 2, [4]) == [4]
    nodes[8] = node(8, parent=4, round=2, speedup=5.0)
    assert seq.next_parents(nodes, 2, [4]) == [8]
    # The best pruned: the next best; pinned ones kept as well.
    nodes[8] = replace(nodes[8], pruned=True)
    nodes[3] = replace(nodes[3], pinned=True)
    assert seq.next_parents(nodes, 2, [4]) == [3, 4]


def test_sequential_falls_back_to_its_one_parent_when_nothing_was_correct():
    nodes = round_one(n3={"status": "incorrect"}, n4={"status": "incorrect"}, n5={"status": "incorrect"})
    assert Sequential(**SHAPE).next_parents(nodes, 1, [ROOT]) == [ROOT]
    assert Sequential(**SHAPE).next_parents(nodes, 1, [ROOT, ROOT]) == [ROOT]


def test_best_of_n_selects_like_the_tree_for_its_one_round():
    nodes = round_one()
    assert BestOfN(**SHAPE).next_parents(nodes, 1, [ROOT] * 8) == [4, 5]
    nodes = round_one(n3={"status": "incorrect"}, n4={"status": "incorrect"}, n5={"status": "incorrect"})
    assert BestOfN(**SHAPE).next_parents(nodes, 1, [ROOT] * 8) == [ROOT]


def test_library_ops_exclude_keeps_a_library_marked_variant_out_of_parents_ties_and_the_best():
    """Issue 33: the fastest variant (4, 3x) leaves the reference's convolution to cuDNN. Allowed,
    it is ranked like any other; excluded, it is neither a parent nor the best (nor a tie), and
    stays correct; pinned, it is kept (a person's choice)."""
    from engine.domain import best_variant, library_excluded
    from engine.search.strategies import ties_within_noise

    nodes = round_one(n4={"library": "aten.convolution"})
    assert Tree(**SHAPE).next_parents(nodes, 1, [ROOT]) == [4, 5]
    assert best_variant(nodes).id == 4 and best_variant(nodes, "allow").id == 4
    assert strategy_for("tree", **SHAPE, library_ops="exclude").next_parents(nodes, 1, [ROOT]) == [5, 3]
    assert Sequential(**SHAPE, library_ops="exclude").next_parents(nodes, 1, [ROOT]) == [5]
    assert best_variant(nodes, "exclude").id == 5
    assert nodes[4].status == "correct" and library_excluded(nodes[4], "exclude")
    assert not library_excluded(nodes[4], "allow") and not library_excluded(nodes[5], "exclude")
    intervals = {3: (1.4, 1.6), 4: (1.5, 3.5), 5: (1.5, 2.5)}
    assert ties_within_noise([5], nodes, 1, intervals, "exclude") == [
        "tie within noise: kept #5 2.00x [1.50-2.50] over #3 1.50x [1.40-1.60]"]
    assert any("#4" in line for line in ties_within_noise([5], nodes, 1, intervals))
    nodes = round_one(n4={"library": "aten.convolution", "pinned": True})
    assert Tree(**SHAPE, library_ops="exclude").next_parents(nodes, 1, [ROOT]) == [4, 5, 3]
    # Only library-marked variants correct: the same parents again, and no best.
    nodes = round_one(n3={"status": "incorrect"}, n5={"status": "incorrect"}, n4={"library": "aten.mm"})
    assert Tree(**SHAPE, library_ops="exclude").next_parents(nodes, 1, [ROOT]) == [ROOT]
    assert best_variant(nodes, "exclude") is None


# -- budget ---------------------------------------------------------------------------------


def test_no_budget_never_stops():
    b = Budget()
    b.charge(1e6, Usage(10**9, 10**9, 10**9))
    for _ in range(1000):
        b.count_variant()
    assert b.exceeded(elapsed_s=1e9) is None and b.variant_limit() is None


def test_dollar_budget():
    b = Budget(usd=0.5)
    b.charge(0.3, Usage(100, 100))
    assert b.exceeded(0.0) is None
    b.charge(0.25, Usage(100, 100))
    assert b.exceeded(0.0) == "budget reached: $0.5500 of $0.5"


def test_token_budget_counts_input_output_and_reasoning():
    b = Budget(tokens=1000)
    b.charge(0.0, Usage(input=400, output=300))
    assert b.spent_tokens == 700 and b.exceeded(0.0) is None
    b.charge(0.0, Usage(input=0, output=0, reasoning=300))  # reasoning alone tips it over
    assert b.spent_tokens == 1000
    assert b.exceeded(0.0) == "budget reached: 1000 of 1000 tokens"


def test_time_limit():
    b = Budget(time_limit_s=2.5)
    assert b.exceeded(elapsed_s=2.49) is None
    assert b.exceeded(elapsed_s=2.5) == "time limit reached: 2.5 s"


def test_max_variants():
    b = Budget(variants=2)
    b.count_variant()
    assert b.variant_limit() is None
    b.count_variant()
    assert b.variant_limit() == "max variants reached: 2"
    assert b.exceeded(0.0) is None  # the other budgets are untouched


def test_dollars_are_reported_before_tokens_and_time():
    b = Budget(usd=0.1, tokens=10, time_limit_s=1.0)
    b.charge(1.0, Usage(100))
    assert b.exceeded(5.0).startswith("budget reached: $")


def test_a_resumed_budget_starts_from_the_recorded_totals():
    b = Budget(tokens=5000, variants=3)
    b.restore({"cost_usd": 0.25, "tokens": 5000, "input_tokens": 1000, "output_tokens": 1000,
               "reasoning_tokens": 3000, "calls": 4}, variants_generated=3)
    assert (b.spent_usd, b.spent_tokens, b.variants_generated) == (0.25, 5000, 3)
    assert b.exceeded(0.0) == "budget reached: 5000 of 5000 tokens"
    assert b.variant_limit() == "max variants reached: 3"


@pytest.mark.parametrize("name, calls, implements", [
    ("tree", 1 + (3 - 1) * 2, (1 + (3 - 1) * 2) * 4 * 2),  # R=3 rounds, top T=2, K=4 ideas, M=2
    ("sequential", 3, 3),  # one idea and one variant a round
    ("best-of-n", 4 * 2, 4 * 2),  # K x M samples, one round
])
def test_each_strategy_counts_the_calls_of_a_whole_search(name: str, calls: int, implements: int) -> None:
    s = strategy_for(name, rounds=3, ideas=4, variants=2, top=2)
    assert s.idea_calls() == calls
    assert s.idea_calls() * s.ideas_per_call() * s.variants_per_idea() == implements
