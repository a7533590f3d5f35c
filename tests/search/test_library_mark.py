"""Issue 33's `library` mark (a correct variant that leaves the reference's main op to torch/cuDNN/
cuBLAS while its own kernels do the rest) wherever a verdict shows, and `--library-ops allow|exclude`
from the flag to the session's record, the parents, the best and a resume. No compile: the verdicts
are written through the real store, or given by an evaluator that builds nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest

from engine.cli import build_parser, main
from engine.commands._common import run_request
from engine.domain import Node
from engine.evaluate.verdict import Verdict
from engine.record.store import Store
from tests.conftest import query

LIBRARY = {"ops": ["aten.convolution"], "share": 0.87}
LINE = "aten.convolution (87 % of the reference's time)"
LIBRARY_NOTE = "library: aten.convolution (87 % of the reference's time) left to cuDNN"
TORCH_NOTE = "torch-ops: 0.8 % of ModelNew.forward's time in torch ops (aten.eq 0.5 %)"
PROMPT = "Implement the idea: fuse the epilogue"


def _verdict(speedup: float | None, status: str = "correct", library: dict | None = None,
             notes: tuple[str, ...] = ()) -> Verdict:
    timed = speedup is not None
    return Verdict(status=status, backend="cpu", device="cpu", library=library or {}, notes=notes,
                   time_ms=2.0 / speedup if timed else None, ref_eager_ms=2.0 if timed else None,
                   speedup_eager=speedup, speedup_lo=speedup - 0.1 if timed else None,
                   speedup_hi=speedup + 0.1 if timed else None, max_abs_err=1e-6, trials=3,
                   sizes={"batch_size": 8})


async def _library_session(db: Path, library_ops: str | None) -> dict[str, int]:
    """One round by hand: the reference, an idea, and four variants answering one prompt: A leaves
    the convolution to cuDNN at 2.0x, B does it all in its own kernels at 2.0x, C own at 1.5x, D
    incorrect. `library_ops` None: a session recorded before the option."""
    store = await Store.open(db)
    try:
        config = {"rounds": 1, "ideas": 1, "variants": 4, "top": 1, "atol": 1e-2, "rtol": 1e-2}
        if library_ops is not None:
            config["library_ops"] = library_ops
        sid = await store.sessions.create(problem="conv", problem_path="/conv.py", backend="cpu",
                                         strategy="tree", provider="openai", models=["openai:o3"],
                                         config=config, sizes={"batch_size": 8}, status="finished")
        root = await store.nodes.add(session_id=sid, parent_id=None, kind="root", round=0, status="reference",
                                    title="conv", source="class Model: ...")
        idea = await store.nodes.add(session_id=sid, parent_id=root.id, kind="idea", round=1, status="ok",
                                    title="fuse the epilogue")
        ids = {}
        for name, verdict in (("A", _verdict(2.0, library=LIBRARY, notes=(LIBRARY_NOTE, TORCH_NOTE))),
                              ("B", _verdict(2.0)), ("C", _verdict(1.5)),
                              ("D", _verdict(None, status="incorrect"))):
            node = await store.nodes.add(session_id=sid, parent_id=idea.id, kind="variant", round=1,
                                        status="queued", title="fuse the epilogue", language="cuda",
                                        source=f"class ModelNew:  # {name}\n    pass\n")
            await store.calls.add(session_id=sid, node_id=node.id, provider="openai", model="o3",
                                     purpose="implement", prompt=PROMPT, reply=f"```python\n# {name}\n```")
            await store.evaluations.add(node_id=node.id, session_id=sid, verdict=verdict)
            await store.nodes.update(node.id, status=verdict.status, speedup=verdict.speedup_eager,
                                    time_ms=verdict.time_ms, library=", ".join(verdict.library.get("ops", [])))
            ids[name] = node.id
        return {"session": sid, **ids}
    finally:
        await store.close()


def _out(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_show_and_export_say_the_mark_and_exclude_keeps_it_out_of_the_best(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "k.db"
    ids = asyncio.run(_library_session(db, "exclude"))
    sid, a, b = str(ids["session"]), ids["A"], ids["B"]
    outline = _out(capsys, "show", sid, "--db", str(db))
    [line_a] = [ln for ln in outline.splitlines() if f"#{a} variant" in ln]
    assert f"correct 2.00x (1 ms) [library: {LINE}] [excluded: library op] [note: torch-ops]" in line_a
    assert "[note: library]" not in line_a  # the evaluator's library note is that mark, said once
    assert "library ops excluded" in outline.splitlines()[1]
    [line_b] = [ln for ln in outline.splitlines() if f"#{b} variant" in ln]
    assert "library" not in line_b
    # the best (the one export writes, the TUI stars) is starred, and only it
    assert "★ best" in line_b and "★" not in line_a and outline.count("★") == 1
    table = _out(capsys, "show", sid, "--db", str(db), "--table")
    assert f"| {a} | 1 | fuse the epilogue | correct [lib] |" in table
    assert f"| {b} ★ | 1 | fuse the epilogue | correct |" in table
    [shown] = json.loads(_out(capsys, "show", sid, "--db", str(db), "--json"))
    rows = {r["node"]: r for r in shown["variants"]}
    assert (rows[a]["best"], rows[b]["best"]) == (False, True)
    assert (rows[a]["library"], rows[a]["library_excluded"]) == (LIBRARY, True)
    assert (rows[b]["library"], rows[b]["library_excluded"]) == (None, False)

    # The best under exclude is B (A is as fast and earlier, but library-marked); export writes it.
    best = _out(capsys, "export", sid, "--db", str(db))
    assert "# library:" not in best and "# B" in best
    header = _out(capsys, "export", sid, "--node", str(a), "--db", str(db))
    assert f"# library: {LINE}\n# note: {TORCH_NOTE}\n" in header
    assert "# note: library:" not in header


def test_allow_ranks_a_library_marked_variant_like_any_other(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    for library_ops in ("allow", None):  # a session recorded before the option allows
        db = tmp_path / f"{library_ops}.db"
        ids = asyncio.run(_library_session(db, library_ops))
        outline = _out(capsys, "show", str(ids["session"]), "--db", str(db))
        assert f"[library: {LINE}] [note: torch-ops]" in outline and "excluded" not in outline
        assert "# A" in _out(capsys, "export", str(ids["session"]), "--db", str(db))  # the earlier of two


def test_eval_text_json_and_the_idea_prompt_say_the_mark() -> None:
    from engine.prompts import describe_verdict
    from engine.record.report import eval_table, format_verdict

    v = _verdict(2.0, library=LIBRARY, notes=(LIBRARY_NOTE, TORCH_NOTE))
    text = format_verdict(v)
    assert text.startswith("correct [lib], max abs err")  # the one-line form (headless --quiet) has it
    words = "library (the reference's main op left to torch/cuDNN/cuBLAS, the rest in its own kernels)"
    assert f"\n    {words}: {LINE}" in text
    assert f"note: {TORCH_NOTE}" in text and "note: library:" not in text
    table = eval_table([("a.py", v), ("b.py", _verdict(1.5))]).splitlines()
    assert table[1].split()[:2] == ["a.py", "correct"] and "[lib]" in table[1] and "[lib]" not in table[2]
    d = json.loads(json.dumps(v.to_dict()))  # what `ktree eval --json` prints
    assert d["library"] == LIBRARY and Verdict.from_dict(d).library == LIBRARY
    assert Verdict.from_dict({k: x for k, x in d.items() if k != "library"}).library == {}
    prompt = describe_verdict(v)
    assert f"- library: {LINE} left to torch/cuDNN/cuBLAS" in prompt and f"- note: {TORCH_NOTE}" in prompt
    assert "- note: library:" not in prompt
    assert "library" not in format_verdict(_verdict(1.5)) + describe_verdict(_verdict(1.5))
    # What the idea prompt says an idea came to, when its best variant is library-marked.
    from engine.search.history import outcome

    idea = Node(2, 1, 1, "idea", 1, "fuse", "", "", "ok", "llm", None, None)
    variant = Node(3, 1, 2, "variant", 1, "fuse", "", "src", "correct", "llm", 2.0, 1.0,
                   library="aten.convolution")
    assert outcome({2: idea, 3: variant}, {3: v}, idea) == (
        "best 2.00x vs eager with aten.convolution left to a library")


def test_the_tui_shows_lib_beside_the_status_and_excluded_under_exclude() -> None:
    from tui.model import ScreenModel
    from tui.widgets.timings import row_cells
    from tui.widgets.tree import node_label
    from tui.widgets.verdict import verdict_text

    marked = Node(3, 1, 2, "variant", 1, "fuse", "", "src", "correct", "llm", 2.0, 1.0,
                  library="aten.convolution")
    own = Node(4, 1, 2, "variant", 1, "fuse", "", "src", "correct", "llm", 1.5, 1.3)
    v = _verdict(2.0, library=LIBRARY, notes=(LIBRARY_NOTE, TORCH_NOTE))
    for library_ops, excluded in (("allow", False), ("exclude", True)):
        model = ScreenModel(info={"status": "finished", "config": {"library_ops": library_ops}})
        model.nodes = {3: marked, 4: own}
        assert model.library_excluded(marked) is excluded and not model.library_excluded(own)
        label = node_label(marked, model).plain
        assert label.endswith("correct lib" + (" (excluded)" if excluded else "")), label
        assert "lib" not in node_label(own, model).plain
        pane = verdict_text(marked, v, excluded=model.library_excluded(marked)).plain
        assert pane.startswith("✓ correct lib") or " correct lib" in pane.splitlines()[0]
        assert f"\nlibrary: {LINE} — the reference's main op left to torch/cuDNN/cuBLAS" in pane
        assert ("\nexcluded: library op: correct, but neither a parent nor the best" in pane) is excluded
        assert f"note: {TORCH_NOTE}" in pane and "note: library:" not in pane
    from tui.screens.compare import best_per_round

    assert best_per_round([marked, own]) == {1: 2.0} and best_per_round([marked, own], "exclude") == {1: 1.5}
    assert row_cells(marked, v)["status"].plain == "correct lib"
    assert row_cells(own, _verdict(1.5))["status"].plain == "correct"


def test_the_dataset_has_a_library_column_and_tier_and_prefers_own_kernels(tmp_path: Path) -> None:
    from engine.dataset.hygiene import REWARD_FORMULA, reward

    db = tmp_path / "k.db"
    ids = asyncio.run(_library_session(db, "exclude"))
    out = tmp_path / "out"
    assert main(["dataset", "export", "--db", str(db), "--out", str(out), "--view", "all", "--format",
                 "parquet"]) == 0
    variants = pd.read_parquet(out / "variants.parquet").set_index("node_id")
    assert variants.loc[ids["A"], "library"] == "aten.convolution"
    assert variants.loc[ids["A"], "library_share"] == pytest.approx(0.87)
    assert variants.loc[[ids["B"], ids["C"], ids["D"]], "library"].isna().all()
    rewards = pd.read_parquet(out / "reward.parquet").set_index("node_id")
    assert rewards.loc[ids["A"], "reward"] == pytest.approx(0.2 + 0.5 * (2.0 - 0.2))
    assert rewards.loc[ids["B"], "reward"] == pytest.approx(2.0)
    assert rewards.loc[ids["A"], "library"] == "aten.convolution"
    pairs = pd.read_parquet(out / "preference.parquet")
    got = {(r.chosen_node_id, r.rejected_node_id): r for r in pairs.itertuples()}
    # Equal speed within noise: the own kernel is preferred (the reward tier decides), never the reverse.
    assert (ids["B"], ids["A"]) in got and (ids["A"], ids["B"]) not in got
    assert got[(ids["B"], ids["A"])].margin == pytest.approx(0.9)
    assert pd.isna(got[(ids["B"], ids["A"])].chosen_library)
    assert got[(ids["B"], ids["A"])].rejected_library == "aten.convolution"
    sft = pd.read_parquet(out / "sft.parquet").set_index("node_id")
    assert sft.loc[ids["A"], "library"] == "aten.convolution" and pd.isna(sft.loc[ids["B"], "library"])
    assert (ids["A"], ids["D"]) in got and all(r.margin > 0 for r in pairs.itertuples())
    assert "`library` mark" in (out / "README.md").read_text() and "library" in REWARD_FORMULA
    # The tier: below an own-kernel answer of the same speedup, above incorrect, faster above slower.
    for speedup in (None, 0.01, 0.5, 1.0, 2.0, 16.0, 64.0):
        assert reward("incorrect", None) < reward("correct", speedup, library=True) < reward("correct", speedup)
    assert reward("correct", 1.0, library=True) == pytest.approx(0.6)
    assert reward("correct", 3.0, library=True) > reward("correct", 2.0, library=True)


def test_the_flag_is_parsed_checked_and_recorded(capsys: pytest.CaptureFixture) -> None:
    from engine.launch import RunRequest, UsageError
    from engine.launch.run import _check_choices, _search_config
    from engine.problems import load_problem

    parser = build_parser()
    assert run_request(parser.parse_args(["run", "softmax"])).checks.library_ops == "allow"
    args = parser.parse_args(["run", "softmax", "--library-ops", "exclude"])
    assert run_request(args).checks.library_ops == "exclude"
    assert parser.parse_args(["suite", "level1", "--library-ops", "exclude"]).library_ops == "exclude"
    for command in (["run", "softmax"], ["suite", "level1"]):
        with pytest.raises(SystemExit) as exit:
            main([*command, "--library-ops", "maybe"])
        assert exit.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--library-ops: invalid choice: 'maybe'" in err[0], err
    with pytest.raises(UsageError, match="--library-ops: invalid choice: 'maybe'"):
        _check_choices(RunRequest.of("softmax", library_ops="maybe"))
    problem = load_problem("softmax")
    excluding = _search_config(RunRequest.of("softmax", library_ops="exclude"), problem)
    assert excluding.checks.library_ops == "exclude"
    assert _search_config(RunRequest.of("softmax"), problem).checks.library_ops == "allow"


class LibraryEvaluator:
    """An evaluator that builds nothing: its first verdict leaves the convolution to cuDNN at 10x,
    every later one is its own kernel, a little faster each time (1.2x, 1.3x, ...)."""

    backend = "cpu"
    gpus = None
    waiting = {"compile": 0, "device": 0}
    compile_workers = 1

    def __init__(self) -> None:
        self.calls = 0

    def device_states(self) -> list[dict]:
        return []

    def job(self, problem_path, source, sizes, *, flops, bytes, **options):
        from engine.evaluate.host.make_job import make_job

        return make_job(problem_path, source, sizes, backend="cpu", cache_dir="", flops=flops, bytes=bytes,
                        **options)

    async def evaluate(self, job, on_phase=None, gate=None) -> Verdict:
        self.calls += 1
        if self.calls == 1:
            return _verdict(10.0, library=LIBRARY, notes=(LIBRARY_NOTE,))
        return _verdict(1.1 + 0.1 * self.calls)

    async def profile(self, job, verdict, on_phase=None) -> Verdict:
        return verdict

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("library_ops", ["allow", "exclude"])
async def test_a_search_that_excludes_library_ops_never_grows_from_one_nor_names_it_best(
        tmp_path: Path, library_ops: str) -> None:
    from engine.launch import ResumeRequest, prepare_resume
    from engine.llm.scripted import ScriptedProvider
    from engine.problems import load_problem
    from engine.record.events import EventBus
    from engine.search import Search, SearchConfig

    db = tmp_path / "k.db"
    store = await Store.open(db)
    try:
        search = Search(store, EventBus(), [(ScriptedProvider("softmax", "cpu", seed=0), "scripted")],
                        LibraryEvaluator(), load_problem("softmax"),
                        SearchConfig.of(rounds=2, ideas=2, variants=1, top=1, library_ops=library_ops))
        summary = await search.run()
        sid = search.session_id
        assert sid is not None
        session = await store.sessions.get(sid)
        assert session is not None and session["config"]["library_ops"] == library_ops
        # A resume reads it back (the session is made resumable by hand: it finished).
        await store.sessions.update(sid, status="interrupted")
        prepared = await prepare_resume(ResumeRequest.of(sid, isolation="basic"), store)
        await prepared.evaluator.close()
        assert prepared.config.checks.library_ops == library_ops
    finally:
        await store.close()
    [(marked, library)] = query(db, "SELECT id, library FROM nodes WHERE library != ''")
    assert library == "aten.convolution"
    assert query(db, "SELECT status FROM nodes WHERE id = ?", marked) == [("correct",)]  # never a hack
    [(parents,)] = query(db, "SELECT parent_ids FROM rounds WHERE session_id = ? AND round = 2", sid)
    [(best,)] = query(db, "SELECT best_node_id FROM sessions WHERE id = ?", sid)
    if library_ops == "allow":
        assert json.loads(parents) == [marked] and best == marked and summary["best"]["speedup_eager"] == 10.0
        assert summary["best"]["library"] == "aten.convolution"
    else:
        assert marked not in json.loads(parents) and json.loads(parents)
        assert best != marked and summary["best"]["speedup_eager"] < 10.0 and summary["best"]["library"] is None
    assert summary["library_ops"] == library_ops
