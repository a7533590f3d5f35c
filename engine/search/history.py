"""What an idea prompt is told of the search so far: the ideas tried on the way to a parent and
what each came to, and the parent's verdict in words."""

from __future__ import annotations

from engine import prompts
from engine.domain import Node, library_ops_text
from engine.evaluate import Verdict


def tried(nodes: dict[int, Node], verdicts: dict[int, Verdict], parent: Node) -> list[str]:
    """Idea titles on the path from the root to `parent`, and those already under it, each
    with its outcome (the best speedup of its variants, or why they failed)."""
    ideas: list[Node] = []
    node: Node | None = parent
    while node is not None:
        if node.kind == "idea":
            ideas.append(node)
        node = nodes.get(node.parent_id) if node.parent_id is not None else None
    ideas.reverse()
    ideas += [n for n in nodes.values()
              if n.parent_id == parent.id and n.kind == "idea" and n.status == "ok"]
    seen: dict[str, str] = {}
    for idea in ideas:
        if idea.title not in seen:
            seen[idea.title] = outcome(nodes, verdicts, idea)
    return [f"{title} → {result}" if result else title for title, result in seen.items()]


def outcome(nodes: dict[int, Node], verdicts: dict[int, Verdict], idea: Node) -> str:
    """What an idea's variants (and their fixes) came to, in a few words."""
    variants: list[Node] = []
    frontier = [idea.id]
    while frontier:
        pid = frontier.pop()
        for n in nodes.values():
            if n.parent_id == pid and n.kind == "variant":
                variants.append(n)
                frontier.append(n.id)
    done = [v for v in variants if v.id in verdicts]
    if not done:
        return "not evaluated yet" if variants else ""
    correct = [verdicts[v.id] for v in done if verdicts[v.id].ok]
    if correct:
        best = max(correct, key=lambda v: v.speedup_eager or 0.0)
        text = f"best {best.speedup_eager:.2f}x vs eager" if best.speedup_eager else "correct"
        if best.bound:
            text += f" ({best.bound}-bound)"
        if best.library:  # the main op left to a library: not the idea's own kernel doing it
            text += f" with {library_ops_text(best.library)} left to a library"
        return text
    reasons: dict[str, int] = {}
    for v in done:
        verdict = verdicts[v.id]
        line = next((ln.strip() for ln in verdict.log.splitlines() if ln.strip()), "")
        why = verdict.status + (f": {line[:80]}" if line and verdict.status != "compile_error" else "")
        reasons[why] = reasons.get(why, 0) + 1
    return "failed: " + "; ".join(f"{why} (x{n})" if n > 1 else why for why, n in reasons.items())


def describe(nodes: dict[int, Node], verdicts: dict[int, Verdict], parent: Node, feedback: bool) -> str:
    """The parent's verdict in words, and (`feedback`: the strategy shows it) the last attempt's."""
    ref_ms = next((v.ref_eager_ms for v in verdicts.values() if v.ref_eager_ms), None)
    text = prompts.describe_verdict(verdicts.get(parent.id), ref_ms)
    if feedback:  # the last attempt's verdict
        last = max((n for n in nodes.values() if n.kind == "variant" and n.id in verdicts),
                   key=lambda n: n.id, default=None)
        if last is not None and last.id != parent.id:
            text += (f"\n\nThe last attempt (\"{last.title}\") was evaluated as follows:\n"
                     + prompts.describe_verdict(verdicts[last.id], ref_ms))
    return text
