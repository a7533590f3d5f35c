"""The search methods as policy, one object per method, registered by the names in
engine.domain.STRATEGIES.

A strategy answers the questions on which the methods differ — how many rounds, whom the first
round grows from, how many ideas one call asks for, how many variants an idea gets, whom the next
round grows from, and whether the idea prompt hears how the last attempt went — from plain data
alone (the shape and the tree's nodes): no store, no LLM, no evaluator. The orchestrator asks and
never checks which method it runs, so a new method is a new class here and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from engine.domain import STRATEGIES, Node, excluded, rank_key, ranked


@dataclass(frozen=True)
class Strategy:
    """The shape every method is given (R rounds, K ideas, M variants, top T), and the parts
    they share: pinned nodes are always kept as parents, pruned ones (and what is under them)
    never chosen, nor library-marked ones when the search excludes library ops (`library_ops`)."""

    name: ClassVar[str]
    # Whether the idea prompt also gets the verdict of the last variant evaluated (a revision
    # loop's feedback), besides the parent's own.
    feedback: ClassVar[bool] = False

    rounds: int
    ideas: int
    variants: int
    top: int
    library_ops: str = "allow"  # engine.domain.LIBRARY_OPS

    def total_rounds(self) -> int:
        return self.rounds

    def first_parents(self, root: int) -> list[int]:
        """Round 1's parents (node ids; one idea call each, so an id may repeat)."""
        return [root]

    def ideas_per_call(self) -> int:
        return 1

    def variants_per_idea(self) -> int:
        return 1

    def parents_per_round(self) -> int:
        """How many parents a round after the first grows from when all goes well (pinned
        nodes aside): what an estimate of the calls assumes."""
        return self.top

    def idea_calls(self) -> int:
        """Idea calls of a whole search of this shape (no prunes, pins or expansions)."""
        return len(self.first_parents(0)) + (self.total_rounds() - 1) * self.parents_per_round()

    def next_parents(self, nodes: Mapping[int, Node], round: int, parents: Sequence[int]) -> list[int]:
        """The next round's parents, given every node, the round just done and its parents:
        the pinned nodes first, then the method's choice."""
        pinned = pinned_nodes(nodes)
        correct = [n for n in nodes.values() if ranked(n, nodes, self.library_ops) and n.id not in pinned]
        return list(dict.fromkeys(pinned + self._choose(nodes, correct, round, parents, pinned)))

    def _choose(self, nodes: Mapping[int, Node], correct: list[Node], round: int,
                parents: Sequence[int], pinned: list[int]) -> list[int]:
        """This round's correct variants, fastest first (the undisturbed before those whose
        reference time was disturbed: engine.domain.rank_key), top T of them; when none was
        correct, the same parents again (for another try)."""
        this_round = sorted((n for n in correct if n.round == round), key=rank_key, reverse=True)
        return [n.id for n in this_round[: self.top]] or again(nodes, parents, pinned)


class Tree(Strategy):
    """The idea tree: K ideas per parent, M variants per idea, the top T correct variants of
    each round (and every pinned node) grow the next, for R rounds."""

    name = "tree"

    def ideas_per_call(self) -> int:
        return self.ideas

    def variants_per_idea(self) -> int:
        return self.variants


class Sequential(Strategy):
    """One chain: each step asks for one idea from the best variant so far, with the last
    attempt's verdict as feedback, and implements it once."""

    name = "sequential"
    feedback = True

    def parents_per_round(self) -> int:
        return 1

    def _choose(self, nodes: Mapping[int, Node], correct: list[Node], round: int,
                parents: Sequence[int], pinned: list[int]) -> list[int]:
        best = max(correct, key=rank_key, default=None)
        return [best.id] if best else again(nodes, parents, pinned)[:1]


class BestOfN(Strategy):
    """N = K x M independent samples from the reference (one idea, one variant each), in one
    round, whatever R says."""

    name = "best-of-n"

    def total_rounds(self) -> int:
        return 1

    def first_parents(self, root: int) -> list[int]:
        return [root] * (self.ideas * self.variants)


REGISTRY: dict[str, type[Strategy]] = {cls.name: cls for cls in (Tree, Sequential, BestOfN)}
assert tuple(REGISTRY) == STRATEGIES, "every strategy engine.domain names has a class here"


def strategy_for(name: str, *, rounds: int, ideas: int, variants: int, top: int,
                 library_ops: str = "allow") -> Strategy:
    """The named method at this shape; ValueError for a name not in engine.domain.STRATEGIES."""
    cls = REGISTRY.get(name)
    if cls is None:
        raise ValueError(f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})")
    return cls(rounds=rounds, ideas=ideas, variants=variants, top=top, library_ops=library_ops)


def pinned_nodes(nodes: Mapping[int, Node]) -> list[int]:
    """Pinned nodes that can be parents (the reference or a variant), unless pruned."""
    return [n.id for n in nodes.values()
            if n.pinned and n.kind in ("root", "variant") and not excluded(n, nodes)]


def again(nodes: Mapping[int, Node], parents: Sequence[int], pinned: list[int]) -> list[int]:
    """This round's parents once more (nothing better came of them), less the pinned (kept
    anyway) and the pruned."""
    return [p for p in dict.fromkeys(parents) if p not in pinned and not excluded(nodes[p], nodes)]


def ties_within_noise(chosen: Sequence[int], nodes: Mapping[int, Node], round: int,
                      intervals: Mapping[int, tuple[float, float]], library_ops: str = "allow") -> list[str]:
    """What the choice of parents cannot claim: for each correct variant of the round that was
    passed over while its speedup's interval (the verdict's speedup_lo..speedup_hi) overlaps a
    chosen one's, a line saying the choice between them is a tie within noise. Empty when every
    choice is clear (or no intervals are known). A variant kept out by `library_ops` was not
    passed over for its speed, so it makes no tie."""
    picked = [nodes[i] for i in chosen if i in nodes and nodes[i].kind == "variant" and i in intervals]
    passed = [n for n in nodes.values()
              if ranked(n, nodes, library_ops) and n.round == round and n.id not in chosen
              and n.id in intervals]
    lines = []
    for other in sorted(passed, key=lambda n: n.speedup or 0.0, reverse=True):
        ties = [p for p in picked if _overlap(intervals[p.id], intervals[other.id])]
        if ties:
            kept = ", ".join(f"#{p.id} {_x(p, intervals)}" for p in ties)
            lines.append(f"tie within noise: kept {kept} over #{other.id} {_x(other, intervals)}")
    return lines


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _x(node: Node, intervals: Mapping[int, tuple[float, float]]) -> str:
    lo, hi = intervals[node.id]
    return f"{node.speedup or 0:.2f}x [{lo:.2f}-{hi:.2f}]"
