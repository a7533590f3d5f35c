"""Profiles of what is read (engine.search.profile_requests): a search profiles its parents (before their
children's idea prompts) and its final best, nothing else by itself; anything else on demand —
a steering command to a running engine, or `ktree show N --profile NODE` on a session no engine
runs. Counted per round from the DB.

The search's policy is checked on a 2x4x4 scripted search with an evaluator that compiles nothing
(instant verdicts, profiles counted); the real path on the recorded scripted CPU search.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from engine.evaluate.host.make_job import make_job
from engine.evaluate.verdict import Verdict
from engine.llm.scripted import ScriptedProvider
from engine.problems import load_problem
from engine.record import control
from engine.record.events import CommandApplied, Event, EventBus, ProfileTaken, RoundDone, VerdictReady
from engine.record.store import Store
from engine.search import Search, SearchConfig
from tests.conftest import query, run_ktree


class CountingEvaluator:
    """Instant verdicts (the time from the source's hash, so variants differ) and profiles that
    say whose they are; every profile asked for is counted."""

    backend = "cpu"
    gpus = None
    session = None
    waiting = {"compile": 0, "device": 0}
    compile_workers = 1

    def __init__(self) -> None:
        self.profiled: list[str] = []  # the sources profiled, in order

    def device_states(self) -> list[dict]:
        return []

    def job(self, problem_path, source, sizes, *, flops, bytes, **options):
        return make_job(problem_path, source, sizes, backend="cpu", cache_dir="", flops=flops, bytes=bytes,
                        **options)

    async def evaluate(self, job, on_phase=None, gate=None) -> Verdict:
        ms = 0.5 + int(hashlib.sha256(job.solution_source.encode()).hexdigest()[:4], 16) / 65536
        return Verdict(status="correct", backend="cpu", time_ms=ms, ref_eager_ms=2.0, speedup_eager=2.0 / ms,
                       trials=3)

    async def profile(self, job, verdict, on_phase=None) -> Verdict:
        if not verdict.ok:
            return verdict
        self.profiled.append(job.solution_source)
        evidence = f"fake evidence {hashlib.sha256(job.solution_source.encode()).hexdigest()[:12]}"
        profile = {"tool": "cpu", "kernels": [], "diagnosis": {"bound": "memory", "evidence": evidence,
                                                               "numbers": {}}}
        return replace(verdict, profile=profile)

    async def close(self) -> None:
        pass


async def _search(db: Path, evaluator: CountingEvaluator, hook=None, resume: int | None = None,
                  **shape: int) -> tuple[dict, list[Event]]:
    events: list[Event] = []

    async def receive(event: Event) -> None:
        events.append(event)
        if hook is not None:
            await hook(event, store, search)

    store = await Store.open(db)
    bus = EventBus()
    bus.subscribe(receive)
    search = Search(store, bus, [(ScriptedProvider("softmax", "cpu", seed=0), "scripted")], evaluator,
                    load_problem("softmax"), SearchConfig.of(**{"rounds": 2, "ideas": 4, "variants": 4,
                                                                "top": 2, **shape}), resume=resume)
    try:
        return await search.run(), events
    finally:
        await store.close()


async def test_a_search_profiles_its_parents_and_its_best_only(tmp_path: Path):
    """Acceptance: a 2x4x4 search profiles at most T parents a round plus the final best, counted
    from the DB; the round-2 idea prompts hold their parents' diagnoses; every other correct
    variant has no profile; each round's log line counts the round's profiles."""
    db, evaluator = tmp_path / "k.db", CountingEvaluator()
    summary, events = await _search(db, evaluator)
    assert summary["status"] == "finished"
    correct = query(db, "SELECT COUNT(*) FROM evaluations WHERE status = 'correct'")[0][0]
    assert correct >= 16  # many more correct variants than profiles
    rows = query(db, "SELECT node_id, round, reason, tool FROM profiles ORDER BY id")
    assert len(rows) == len(evaluator.profiled) <= 2 + 1
    parents = json.loads(query(db, "SELECT parent_ids FROM rounds WHERE round = 2")[0][0])
    assert [(n, r, why) for n, r, why, _ in rows if why == "parent"] == [(p, 2, "parent") for p in parents]
    best = summary["best"]["node_id"]
    assert {n for n, *_ in rows} == set(parents) | {best}
    assert ("best" in [why for *_, why, _ in rows]) == (best not in parents)

    verdicts = {n: Verdict.from_dict(json.loads(v))
                for n, v in query(db, "SELECT node_id, verdict FROM evaluations")}
    assert {n for n, v in verdicts.items() if v.profile} == set(parents) | {best}
    prompts = query(db, "SELECT i.parent_id, c.prompt FROM llm_calls c JOIN nodes i ON c.node_id = i.id"
                        " WHERE c.purpose = 'idea' AND i.round = 2")
    assert {p for p, _ in prompts} == set(parents)
    for parent, prompt in prompts:
        assert verdicts[parent].profile["diagnosis"]["evidence"] in prompt
        assert "diagnosis (cpu): memory" in prompt

    per_round = {r: n for r, n in query(db, "SELECT round, COUNT(*) FROM profiles GROUP BY round")}
    assert [(e.round, e.profiles) for e in events if isinstance(e, RoundDone)] == [
        (1, 0), (2, per_round[2])]
    assert sorted(e.node.id for e in events if isinstance(e, ProfileTaken)) == sorted(n for n, *_ in rows)


async def test_a_profile_asked_of_the_running_engine_is_taken_and_marked_applied(tmp_path: Path):
    """A steering command (what the TUI key and `show --profile` on a running session record):
    the engine profiles that variant, records it as asked, then marks the command applied; on a
    resumed session a command left pending is carried out too."""
    db, evaluator = tmp_path / "k.db", CountingEvaluator()
    asked: list[tuple[int, int]] = []

    async def hook(event: Event, store: Store, search: Search) -> None:
        if isinstance(event, VerdictReady) and event.node.round == 1 and not asked:
            asked.append((0, event.node.id))  # (verdicts come from several tasks at once)
            cid = await store.commands.add(search.session_id, *control.encode(control.Profile(event.node.id)))
            asked[0] = (cid, event.node.id)

    summary, events = await _search(db, evaluator, hook, rounds=1, ideas=2, variants=2, top=1)
    [(cid, node)] = asked
    assert query(db, "SELECT node_id, round FROM profiles WHERE reason = 'asked'") == [(node, 1)]
    assert query(db, "SELECT applied_at IS NOT NULL FROM commands WHERE id = ?", cid) == [(1,)]
    assert (cid, "profile", (node,)) in [(e.command_id, e.kind, e.node_ids) for e in events
                                          if isinstance(e, CommandApplied)]

    # Left pending when the engine ended: a resume takes it (and the best keeps its one profile).
    sid = summary["session_id"]
    other = next(n for (n,) in query(db, "SELECT id FROM nodes WHERE kind = 'variant' AND status = 'correct'"
                                         " AND id NOT IN (SELECT node_id FROM profiles) ORDER BY id"))
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO commands(session_id, kind, args, created_at) VALUES (?,?,?,0)",
                     (sid, *control.encode(control.Profile(other))))
    before = len(evaluator.profiled)
    summary, _ = await _search(db, evaluator, resume=sid, rounds=1, ideas=2, variants=2, top=1)
    assert summary["status"] == "finished" and len(evaluator.profiled) == before + 1
    assert query(db, "SELECT reason FROM profiles WHERE node_id = ?", other) == [("asked",)]
    assert query(db, "SELECT COUNT(*) FROM commands WHERE applied_at IS NULL") == [(0,)]


# -- the real path: the recorded scripted CPU search, and `ktree show N --profile NODE` ------------


def _copy(db: Path, to: Path) -> Path:
    """A copy of a recorded DB (other tests read the original as it was recorded)."""
    with sqlite3.connect(db) as src, sqlite3.connect(to) as dst:
        src.backup(dst)
    return to


@pytest.mark.slow
def test_show_profile_on_a_finished_session_stores_a_profile(recorded_search: dict, tmp_path: Path):
    """A correct variant that was neither a parent nor the best has no profile; `ktree show N
    --profile NODE` takes one in that process (the session is finished), stores it with the
    verdict and in a profiles row, and `show --json` counts it in profiles_per_round."""
    db = _copy(recorded_search["db"], tmp_path / "k.db")
    [(sid,)] = query(db, "SELECT id FROM sessions")
    profiled = {n for (n,) in query(db, "SELECT node_id FROM profiles")}
    plain = [n for n, v in query(db, "SELECT node_id, verdict FROM evaluations WHERE status = 'correct'")
             if not json.loads(v).get("profile")]
    assert plain and not set(plain) & profiled
    node = plain[0]
    before = json.loads(run_ktree("show", str(sid), "--json", "--db", str(db)).stdout)[0]["profiles_per_round"]

    proc = run_ktree("show", str(sid), "--profile", str(node), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.splitlines()
    assert line.startswith(f"node {node}: profile (cpu): ") and "-bound" in line

    [(verdict,)] = query(db, "SELECT verdict FROM evaluations WHERE node_id = ?", node)
    profile = json.loads(verdict)["profile"]
    assert profile["tool"] == "cpu" and profile["diagnosis"]["evidence"] in line
    last_round = max(r for (r,) in query(db, "SELECT round FROM rounds"))
    assert query(db, "SELECT round, reason, tool FROM profiles WHERE node_id = ?", node) == [
        (last_round, "asked", "cpu")]
    shown = json.loads(run_ktree("show", str(sid), "--json", "--db", str(db)).stdout)[0]
    assert shown["profiles_per_round"][str(last_round)] == before.get(str(last_round), 0) + 1
    row = next(r for r in shown["variants"] if r["node"] == node)
    assert row["profile"]["diagnosis"] == profile["diagnosis"]

    again = run_ktree("show", str(sid), "--profile", str(node), "--db", str(db))  # nothing new taken
    assert again.returncode == 0 and "profiled already" in again.stdout
    assert query(db, "SELECT COUNT(*) FROM profiles WHERE node_id = ?", node) == [(1,)]


@pytest.mark.slow
@pytest.mark.parametrize("argv, says", [
    (["99", "--profile", "1"], "no session 99"),
    (["1", "--profile", "9999"], "session 1 has no node 9999"),
    (["1", "--profile", "1"], "node 1 is the reference"),
    (["1", "--profile", "IDEA"], "is an idea"),
    (["1", "--profile", "FAILED"], "only a correct variant can be profiled"),
    (["--profile", "1"], "needs the SESSION"),
])
def test_show_profile_bad_input_is_one_line_and_exit_2(recorded_search: dict, argv: list[str], says: str):
    db = recorded_search["db"]
    idea = query(db, "SELECT MIN(id) FROM nodes WHERE kind = 'idea'")[0][0]
    failed = query(db, "SELECT MIN(id) FROM nodes WHERE kind = 'variant' AND status != 'correct'")[0][0]
    if failed is None:  # (a scripted search whose variants were all correct: an idea says it too)
        failed, says = idea, "only a correct variant can be profiled"
    argv = [{"IDEA": str(idea), "FAILED": str(failed)}.get(a, a) for a in argv]
    proc = run_ktree("show", *argv, "--db", str(db))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""
