"""The search screen's model without a Textual app: every engine event, a past session's rows, a
followed session's polls, the ★ that follows engine.domain.best_variant and nothing else, a round's
bar, a search whose model gave no ideas, and the first cold build's precompiled-header note."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from engine.domain import Node, best_variant
from engine.evaluate.host.evaluator import LocalEvaluator
from engine.llm.base import Completion, Message, Usage
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.record import control
from engine.record.events import (
    BudgetReached,
    CommandApplied,
    EventBus,
    LLMCallDone,
    NodeAdded,
    NodeUpdated,
    Progress,
    RoundDone,
    SessionDone,
    SessionStarted,
    VerdictReady,
)
from engine.record.store import Store
from engine.search import Search, SearchConfig
from tests.fake_session import write_fake_session
from tests.tui.helpers import node, verdict
from tui.model import (
    PCH_DONE,
    PCH_NOTE,
    CommandRecorded,
    Note,
    ScreenModel,
    SessionRows,
    Steered,
    pch_cold,
    read_rows,
)
from tui.widgets.progress import progress_text, round_bar
from tui.widgets.tree import node_label

NOW = 1_000.0


def started(resumed: bool = False) -> SessionStarted:
    return SessionStarted(session_id=7, problem="softmax", backend="cpu", provider="scripted", scripted=True,
                          sizes={"dim": 4096}, config={"rounds": 2, "variants": 2}, resumed=resumed)


def live_tree() -> ScreenModel:
    """A live model with a root, two ideas and three evaluated variants (#4 fastest)."""
    model = ScreenModel(live=True, clock=lambda: NOW)
    model.apply(started())
    model.apply(NodeAdded(node(1, None, "root", "reference")))
    model.apply(NodeAdded(node(2, 1, "idea", "ok")))
    model.apply(NodeAdded(node(3, 1, "idea", "ok")))
    for nid, parent, speed in ((4, 2, 3.0), (5, 2, 2.0), (6, 3, 1.5)):
        model.apply(NodeAdded(node(nid, parent)))
        model.apply(VerdictReady(node(nid, parent, status="correct", speedup=speed), verdict(speed)))
    return model


def test_session_started_sets_the_header():
    model = ScreenModel(live=True, clock=lambda: NOW)
    assert model.status == "starting" and model.mode == "live"
    changes = model.apply(started())
    assert model.session_id == 7 and model.status == "running" and model.status_line == "running"
    assert model.info["problem"] == "softmax" and model.info["scripted"] is True
    assert model.info["sizes"] == {"dim": 4096} and model.info["created_at"] == NOW
    assert {"header", "status", "progress"} <= changes.panes and not changes.reload
    assert model.apply(started(resumed=True)).reload  # the tree so far is in the DB: read it


def test_node_added_then_updated():
    model = ScreenModel(live=True)
    model.apply(started())
    changes = model.apply(NodeAdded(node(1, None, "root", "reference")))
    assert changes.added == [1] and model.kids[None] == [1]
    changes = model.apply(NodeAdded(node(2, 1, "idea", "generating")))
    assert changes.added == [2] and model.kids[1] == [2] and not changes.relabel

    changes = model.apply(NodeUpdated(node(2, 1, "idea", "ok")))
    assert changes.added == [] and changes.relabel == {2} and changes.updated == {2}
    assert model.nodes[2].status == "ok" and not changes.sources

    model.apply(NodeAdded(node(3, 2)))
    changes = model.apply(NodeUpdated(node(3, 2, status="queued", source="class ModelNew: ...")))
    assert changes.sources == {3}  # the cached highlighting of #3 is stale
    assert changes.rows == []  # not evaluated: no timings row

    # The same node announced twice (a resumed session's first read, then its event): no duplicate.
    changes = model.apply(NodeAdded(node(3, 2, status="compiling", source="class ModelNew: ...")))
    assert changes.added == [] and changes.updated == {3} and model.kids[2] == [3]


def test_verdict_ready_fills_rows_best_and_plot():
    model = live_tree()
    assert model.verdicts[4].speedup_eager == 3.0 and model.best_id == 4
    assert model.best_by_round == {1: 3.0}
    changes = model.apply(NodeAdded(node(8, 3, rnd=2)))
    changes = model.apply(VerdictReady(node(8, 3, status="correct", speedup=5.0, rnd=2), verdict(5.0)))
    assert changes.rows == [8] and model.best_id == 8
    assert {4, 8} <= changes.relabel  # the ★ moves: both labels redraw
    assert "plot" in changes.panes and model.best_by_round == {1: 3.0, 2: 5.0}
    changes = model.apply(VerdictReady(node(9, 3, status="incorrect", rnd=2), verdict(None, "incorrect")))
    assert model.best_id == 8 and changes.rows == [9] and "plot" not in changes.panes


def test_llm_call_done_counts_every_token():
    model = live_tree()
    call = LLMCallDone(call_id=1, node_id=4, purpose="implement", model="m", input_tokens=100,
                       output_tokens=50, cost_usd=0.25, latency_s=1.0, status="ok", reasoning_tokens=25)
    changes = model.apply(call)
    assert model.tokens == call.tokens == 175 and model.cost_usd == 0.25
    assert changes.llm == {4} and "progress" in changes.panes
    model.apply(replace(call, call_id=2, node_id=None))
    assert model.tokens == 350 and model.cost_usd == 0.5


def test_a_failed_call_says_why_on_the_status_line():
    model = live_tree()
    reason = "openai-compatible: cannot reach http://127.0.0.1:9/v1 (connection refused; 5 attempts)"
    changes = model.apply(LLMCallDone(call_id=3, node_id=2, purpose="idea", model="m", input_tokens=0,
                                      output_tokens=0, cost_usd=0.0, latency_s=7.6, status="error",
                                      error=reason, attempts=5))
    assert "status" in changes.panes
    assert model.status_line == f"LLM idea call for #2 failed after 7.6 s (5 attempts): {reason}"


def test_round_done_budget_and_session_done_say_so():
    model = live_tree()
    assert "status" in model.apply(RoundDone(1, (4, 5), 3.0)).panes
    assert model.status_line == "round 1 done, best 3.00x"
    model.apply(RoundDone(2, (), None))
    assert model.status_line == "round 2 done, best -"
    model.apply(BudgetReached("dollars"))
    assert model.status_line == "budget reached: dollars; in-flight work finishes"
    model.clock = lambda: NOW + 60
    model.apply(SessionDone(7, "stopped", {}))
    assert model.status == "stopped" and model.info["finished_at"] == NOW + 60
    assert model.status_line == "stopped"  # the status bar says "session 7 · stopped"


def test_progress_event_sets_progress_and_paused():
    model = live_tree()
    for nid, status in ((7, "queued"), (8, "queued"), (9, "queued"), (10, "waiting")):
        model.apply(NodeAdded(node(nid, 2, status=status)))
    event = Progress(round=1, rounds=2, llm_running=2, tokens=12_000,
                     cost_usd=0.5, budget_usd=1.0, budget_tokens=None, elapsed_s=65.0, paused=True,
                     devices=({"name": "gpu0", "busy": True, "jobs": 4, "busy_s": 30.0, "queue": 0,
                               "alive": True},))
    changes = model.apply(event)
    assert model.paused and model.progress["devices"][0]["name"] == "gpu0"
    assert changes.panes == {"progress"}
    text, lines = progress_text(model, now=NOW)
    shown = text.plain
    assert "round 1/2 · paused · 1m05s" in shown
    assert "compile queue 3 · timing queue 1 · LLM calls 0 (2 running)" in shown
    assert "tokens 12.0k · $0.500/$1" in shown and "gpu0 busy   4 jobs" in shown and lines == 1
    # paused in the last round: the work in flight ends the search, which then is finished, not paused
    model.apply(SessionDone(7, "finished", {}))
    shown = progress_text(model, now=NOW)[0].plain
    assert "· finished ·" in shown and "paused" not in shown


def test_steering_marks_then_command_applied_clears_them():
    model = live_tree()
    changes = model.apply(Steered(5, "prune"))
    assert model.node_pending == {5: "prune"} and changes.relabel == {5}
    assert "⧗prune…" in node_label(model.nodes[5], model).plain
    model.apply(CommandRecorded(11, "prune", 5, "prune"))
    assert model.pending == {11: ("prune", 5)}
    assert model.status_line == "prune #5: recorded as command 11, waiting for the engine"
    model.apply(CommandRecorded(12, "pause", None, "pause"))
    model.apply(CommandRecorded(13, "stop", None, "stop"))

    changes = model.apply(CommandApplied(11, "prune", (5,)))
    assert model.pending == {12: ("pause", None), 13: ("stop", None)} and not model.node_pending
    assert changes.relabel == {5} and model.status_line == "prune #5: applied"
    model.apply(CommandApplied(12, "pause"))
    assert model.paused and model.status_line == "pause: applied"
    model.apply(CommandApplied(13, "stop"))
    assert model.info["stopping"] and not model.pending
    changes = model.apply(CommandApplied(99, "prune"))  # not one of ours: only the progress redraws
    assert changes.panes == {"progress"} and not changes.relabel and model.status_line == "stop: applied"
    model.apply(CommandRecorded(14, "prune", 5, "unprune"))  # u: a prune command that takes one back
    model.apply(CommandApplied(14, "prune", (5,)))
    assert model.status_line == "unprune #5: applied"

    model.apply(Note("timings sorted by round"))
    assert model.status_line == "timings sorted by round"


def test_a_pin_or_prune_landing_clears_the_pending_mark():
    model = live_tree()
    model.apply(Steered(6, "pin"))
    model.apply(NodeUpdated(replace(model.nodes[6], pinned=True)))
    assert 6 not in model.node_pending


def test_the_best_follows_best_variant_a_pruned_faster_variant_is_not_best():
    model = live_tree()
    assert model.best_id == best_variant(model.nodes).id == 4
    # #4 (3.0x) pruned: the best is now the next one not pruned.
    changes = model.apply(NodeUpdated(replace(model.nodes[4], pruned=True)))
    assert model.best_id == best_variant(model.nodes).id == 5 and {4, 5} <= changes.relabel
    assert "★" not in node_label(model.nodes[4], model).plain
    assert "★ best" in node_label(model.nodes[5], model).plain
    # A faster variant under a pruned idea is not best either.
    model.apply(NodeUpdated(replace(model.nodes[3], pruned=True)))
    model.apply(NodeAdded(node(10, 3)))
    model.apply(VerdictReady(node(10, 3, status="correct", speedup=9.0), verdict(9.0)))
    assert model.best_id == best_variant(model.nodes).id == 5
    # Pruning the idea above the best moves the star: #6 was under idea 3 (pruned), #4 pruned: none left.
    model.apply(NodeUpdated(replace(model.nodes[2], pruned=True)))
    assert model.best_id is None is best_variant(model.nodes)
    # The earlier one on a tie, as best_variant says.
    model.apply(NodeUpdated(replace(model.nodes[2], pruned=False)))
    model.apply(NodeUpdated(replace(model.nodes[4], pruned=False)))
    model.apply(NodeAdded(node(11, 2)))
    model.apply(VerdictReady(node(11, 2, status="correct", speedup=3.0), verdict(3.0)))
    assert model.best_id == best_variant(model.nodes).id == 4


def test_an_unknown_event_changes_nothing():
    model = live_tree()
    assert not model.apply(object())  # type: ignore[arg-type]


async def test_a_past_session_from_its_rows(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    try:
        sid = await write_fake_session(store, 40)
        model = ScreenModel(session_id=sid)
        rows = await read_rows(store, sid, model, first=True)
        changes = model.apply(rows)
        nodes = await store.nodes.of(sid)
        evaluations = await store.evaluations.of(sid)
        session = await store.sessions.get(sid)
        totals = await store.calls.totals(sid)
    finally:
        await store.close()
    assert model.mode == "read-only" and changes.bulk
    assert list(model.nodes) == [n.id for n in nodes] == changes.added  # parents first
    assert model.verdicts == {e["node_id"]: e["verdict"] for e in evaluations}
    assert changes.rows == [n.id for n in nodes if n.kind == "variant" and n.id in model.verdicts]
    assert model.best_id == best_variant(nodes).id == session["best_node_id"]
    assert model.tokens == totals["tokens"] == 2000 * totals["calls"] > 0  # input + output + reasoning
    assert model.cost_usd == totals["cost_usd"]
    assert model.status == "finished" and model.status_line == "finished" and model.info["scripted"]
    assert model.info["problem"] == "softmax" and model.info["config"]["rounds"] >= 1
    assert {"header", "status", "progress", "plot"} <= changes.panes
    assert model.seen_eval == max(e["id"] for e in evaluations) and model.seen_ts > 0
    assert max(model.best_by_round.values()) == session["best_speedup"]
    text, _ = progress_text(model)
    assert f"round {max(n.round for n in nodes)}/{model.info['config']['rounds']} · finished" in text.plain


async def test_a_followed_session_from_its_polls(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    try:
        sid = await write_fake_session(store, 20, status="running")
        idea = next(n for n in await store.nodes.of(sid) if n.kind == "idea")
        before = await store.commands.add(sid, *control.encode(control.Prune(idea.id)))
        model = ScreenModel(session_id=sid, follow=True)
        model.apply(await read_rows(store, sid, model, first=True))
        assert model.mode == "following" and model.status == "running"
        assert model.pending == {before: ("prune", idea.id)} and model.node_pending == {idea.id: "prune"}
        old_best = model.best_id

        # Another process adds a variant, evaluates it, applies the prune, ends the session.
        new = await store.nodes.add(session_id=sid, parent_id=idea.id, kind="variant", round=idea.round,
                                   status="compiling", title=idea.title, source="class ModelNew: pass\n")
        changes = model.apply(await read_rows(store, sid, model))
        assert changes.added == [new.id] and model.nodes[new.id].status == "compiling"
        assert new.id not in changes.rows and model.pending  # not evaluated, prune not applied

        await store.evaluations.add(node_id=new.id, session_id=sid, verdict=verdict(50.0))
        await store.nodes.update(new.id, status="correct", speedup=50.0, time_ms=0.04)
        await store.commands.mark_applied(before)
        await store.sessions.update(sid, status="finished", finished_at=1.0, stop_reason="budget")
        changes = model.apply(await read_rows(store, sid, model))
    finally:
        await store.close()
    assert new.id in changes.updated and changes.rows[-1] == new.id
    assert model.verdicts[new.id].speedup_eager == 50
    assert model.best_id == new.id != old_best and {new.id, old_best} <= changes.relabel
    assert not model.pending and not model.node_pending and idea.id in changes.relabel
    assert model.status == "finished" and model.info["stop_reason"] == "budget"
    assert model.status_line == "finished (budget)" and "status" in changes.panes


async def test_a_verdict_whose_node_row_did_not_change_still_redraws(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    try:
        sid = await write_fake_session(store, 20, status="running")
        idea = next(n for n in await store.nodes.of(sid) if n.kind == "idea")
        new = await store.nodes.add(session_id=sid, parent_id=idea.id, kind="variant", round=idea.round,
                                   status="checking", title=idea.title, source="x = 1\n")
        model = ScreenModel(session_id=sid, follow=True)
        model.apply(await read_rows(store, sid, model, first=True))
        model.seen_ts += 1e6  # the node's row is older than the cursor: only its evaluation is new
        await store.evaluations.add(node_id=new.id, session_id=sid, verdict=verdict(None, "incorrect"))
        changes = model.apply(await read_rows(store, sid, model))
    finally:
        await store.close()
    assert changes.rows == [new.id] and new.id in changes.updated


async def test_the_live_view_and_a_follower_say_the_same_queues(tmp_path: Path):
    """Issue 56, item 14d: `show --follow` said `timing 5` while the running process said `timing
    queue 0` at the same moment: the follower counted the nodes' statuses, the live view the
    evaluator's own counters (which leave out a variant waiting at the pause gate or for quiet cores).
    Both views count the nodes now, the one record both have."""
    from types import SimpleNamespace

    from engine.search.lifecycle import SessionRecord

    store = await Store.open(tmp_path / "k.db")
    try:
        sid = await write_fake_session(store, 20, status="running")
        idea = next(n for n in await store.nodes.of(sid) if n.kind == "idea")
        for status in ("queued", "compiling", "waiting", "waiting", "timing"):
            await store.nodes.add(session_id=sid, parent_id=idea.id, kind="variant", round=idea.round,
                                 status=status, title=idea.title, source="x = 1\n")
        follower = ScreenModel(session_id=sid, follow=True, clock=lambda: NOW)
        follower.apply(await read_rows(store, sid, follower, first=True))
        live = ScreenModel(live=True, clock=lambda: NOW)
        live.apply(SessionStarted(session_id=sid, problem="softmax", backend="cpu", provider="scripted",
                                  scripted=True, sizes={"dim": 4096}, config={"rounds": 2}))
        for n in await store.nodes.of(sid):
            live.apply(NodeAdded(n))
    finally:
        await store.close()
    published: list[Progress] = []

    async def publish(event: Progress) -> None:
        published.append(event)

    engine = SimpleNamespace(  # the engine's side at that moment: its evaluator counts nobody waiting
        config=SimpleNamespace(budgets=SimpleNamespace(budget_usd=None, budget_tokens=None)),
        evaluator=SimpleNamespace(waiting={"compile": 0, "device": 0}, device_states=lambda: []),
        strategy=SimpleNamespace(total_rounds=lambda: 2), budget=SimpleNamespace(spent_tokens=0, spent_usd=0.0),
        sched=SimpleNamespace(llm_running=0, paused=False), round=1)
    record = SessionRecord(engine, None, SimpleNamespace(publish=publish))  # type: ignore[arg-type]
    await record.publish_progress(force=True)
    live.apply(published[0])

    def queues(model: ScreenModel) -> str:  # (the LLM calls: the live one saw none of the old ones)
        return progress_text(model, now=NOW)[0].plain.splitlines()[1].split(" · LLM")[0]

    assert queues(live) == queues(follower) == "compile queue 1 · timing queue 2"
    assert live.queues() == follower.queues() == (1, 2)


def test_a_missing_session_changes_nothing():
    model = ScreenModel(session_id=3)
    assert not model.apply(SessionRows(None, first=True)) and model.status == "starting"


def test_a_resumed_live_session_keeps_its_header_and_events_after_rows():
    model = ScreenModel(live=True, clock=lambda: NOW)
    assert model.apply(started(resumed=True)).reload
    row = {"id": 7, "problem": "other", "provider": "openai", "backend": "cuda", "sizes": {},
           "status": "interrupted", "config": {}, "created_at": 0.0, "finished_at": None}
    changes = model.apply(SessionRows(row, [], [(node(1, None, "root", "reference"), 5.0)],
                                      {"tokens": 10, "cost_usd": 0.1}, [], first=True))
    assert model.info["problem"] == "softmax" and model.status == "running"  # the event's header stays
    assert changes.added == [1] and model.tokens == 10
    assert model.apply(NodeAdded(node(1, None, "root", "reference"))).added == []  # no duplicate


def test_labels_show_the_compile_speedup_when_wide():
    model = live_tree()
    assert "(2.40x compile)" in node_label(model.nodes[4], model, wide=True).plain
    assert "compile" not in node_label(model.nodes[4], model, wide=False).plain
    assert node_label(model.nodes[1], model).plain == "◆ reference softmax"


class NoIdeasProvider(ScriptedProvider):
    """Every idea call is answered with an empty JSON list."""

    async def complete(self, messages: list[Message], model: str = "scripted", max_output_tokens: int = 0,
                       reasoning: str | None = None) -> Completion:
        return Completion("```json\n[]\n```", Usage(input=100, output=2), 0.0, 0.0, model)


async def test_no_ideas_returned_is_said_and_the_ended_sessions_bar_is_full(tmp_path: Path):
    store = await Store.open(tmp_path / "k.db")
    evaluator = LocalEvaluator("cpu")
    search = Search(store, EventBus(), [(NoIdeasProvider("softmax", "cpu", seed=0), "scripted")], evaluator,
                    load_problem("softmax"), SearchConfig.of(rounds=1, ideas=2, variants=2))
    try:
        summary = await asyncio.wait_for(search.run(), timeout=120)
        # the model answered, with nothing usable: the run failed, and says it was not the call
        assert summary["status"] == "failed", summary
        assert summary["stop_reason"].startswith("no LLM reply was usable"), summary
        model = ScreenModel(session_id=search.session_id)
        model.apply(await read_rows(store, search.session_id, model, first=True))  # type: ignore[arg-type]
    finally:
        await evaluator.close()
        await store.close()
    [idea] = [n for n in model.nodes.values() if n.kind == "idea"]
    label = node_label(idea, model).plain
    assert "no ideas returned" in label and "unparseable" not in label, label
    assert "empty list of ideas" in idea.text
    assert not any(n.kind == "variant" for n in model.nodes.values())
    total, done = round_bar(model)
    assert total == done > 0  # the last round made nothing, and is over


def test_the_bar_of_a_running_round_counts_what_is_in_flight():
    def node(id: int, kind: str, rnd: int, status: str) -> Node:
        return Node(id, 1, id - 1 or None, kind, rnd, "", "", "", status, "llm", None, None)

    model = ScreenModel(session_id=1)
    model.info.update(status="running", config={"variants": 2})
    nodes = [node(1, "root", 0, "reference"), node(2, "idea", 1, "ok"), node(3, "variant", 1, "correct"),
             node(4, "variant", 1, "compiling")]
    model.nodes = {n.id: n for n in nodes}
    assert round_bar(model) == (2, 1)
    model.info["status"] = "interrupted"  # resumes: the round is not over
    assert round_bar(model) == (2, 1)
    model.info["status"] = "stopped"
    assert round_bar(model) == (2, 2)


def _variant(status: str, nid: int = 2) -> Node:
    return Node(nid, 1, 1, "variant", 1, "fuse", "", "class ModelNew: ...", status, "llm", None, None)


def _started() -> SessionStarted:
    return SessionStarted(session_id=1, problem="softmax", backend="cpu", provider="scripted", scripted=True,
                          sizes={"dim": 4}, config={"rounds": 1, "ideas": 1, "variants": 2})


def test_the_first_build_on_a_cold_cache_says_it_builds_the_precompiled_header():
    model = ScreenModel(live=True, cold_cache=lambda: True)
    model.apply(_started())
    model.apply(NodeAdded(Node(1, 1, None, "root", 0, "", "", "ref", "reference", "llm", None, None)))
    model.apply(NodeAdded(_variant("queued")))
    model.apply(NodeAdded(_variant("queued", 3)))
    changes = model.apply(NodeUpdated(_variant("compiling")))
    assert "status" in changes.panes and model.status_line == PCH_NOTE
    model.apply(NodeUpdated(_variant("compiling", 3)))
    for nid in (2, 3):
        label = node_label(model.nodes[nid], model).plain
        assert "building the precompiled header (first build, ~1 min)" in label
        assert "precompiled torch header" in (model.wait_reason(nid) or "")
    changes = model.apply(NodeUpdated(_variant("waiting")))  # the first build is over
    assert 3 in changes.relabel and "precompiled" not in node_label(model.nodes[3], model).plain
    assert model.wait_reason(3) is None and model.status_line == PCH_DONE


def test_on_a_gpu_the_first_builds_go_on_while_the_header_is_made_beside_them():
    from dataclasses import replace

    from tui.model import PCH_AHEAD_NOTE

    model = ScreenModel(live=True, cold_cache=lambda: True)
    model.apply(replace(_started(), backend="cuda"))
    model.apply(NodeAdded(_variant("queued")))
    model.apply(NodeUpdated(_variant("compiling")))
    assert model.status_line == PCH_AHEAD_NOTE and not model.first_build
    assert "precompiled" not in node_label(model.nodes[2], model).plain and model.wait_reason(2) is None


def test_a_warm_cache_or_a_past_session_says_nothing_of_it():
    warm = ScreenModel(live=True, cold_cache=lambda: False)
    past = ScreenModel(cold_cache=lambda: True)  # read from the DB, not running: no build runs
    for model in (warm, past):
        if model.live:
            model.apply(_started())
        model.apply(NodeAdded(_variant("queued")))
        model.apply(NodeUpdated(_variant("compiling")))
        assert "precompiled" not in node_label(model.nodes[2], model).plain
        assert "precompiled" not in model.status_line


def test_pch_cold_reads_the_build_cache(tmp_path: Path):
    assert pch_cold(tmp_path)
    gch = tmp_path / "pch" / "0123abcd" / "torch" / "extension.h.gch"
    gch.parent.mkdir(parents=True)
    assert pch_cold(tmp_path)  # the lock and the forward header come first: not built yet
    gch.write_bytes(b"x")
    assert not pch_cold(tmp_path)
    gch.unlink()
    (gch.parent.parent / "failed.txt").write_text("no PCH for this compiler")
    assert not pch_cold(tmp_path)  # builds go on without one


def test_the_llm_tab_finds_an_idea_call_where_the_engine_records_it():
    """The engine records a round's idea call on the first idea node of the batch it fills: the root
    and a variant show the idea calls made from them, each idea its batch's call (and a call recorded
    on the parent, as older sessions did, still counts)."""
    from tui.widgets.llm import llm_request

    def node(nid: int, parent: int | None, kind: str) -> Node:
        return Node(nid, 1, parent, kind, 1, "", "", "", "ok", "llm", None, None)

    nodes = {n.id: n for n in (node(1, None, "root"), node(2, 1, "idea"), node(3, 1, "idea"),
                               node(4, 2, "variant"), node(5, 4, "idea"))}
    ids, purpose, _ = llm_request(nodes[1], nodes)
    assert 2 in ids and purpose == "idea"  # round 1's call, recorded on idea #2
    ids, purpose, _ = llm_request(nodes[3], nodes)
    assert {1, 2} <= ids and purpose == "idea"  # its batch's call (on #2), or its parent's
    ids, purpose, _ = llm_request(nodes[4], nodes)
    assert {4, 5} <= ids and purpose is None  # its own implement and fix calls, and round 2's idea call
