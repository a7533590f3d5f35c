"""scripts/gpu-check's plan (GPU_CHECK_PLAN=1: the steps it would run with their limits, nothing
run) and its report's new tables (scripts/gpu_check_report.py), checked without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT = ["prebuild", "tests", "concurrent"]
CALLS = {None: DEFAULT, "corpus": ["verdicts"], "engine": ["search", "cost", "pipeline"]}


def plan(stages: str | None = None) -> list[tuple[str, int]]:
    env = {**os.environ, "GPU_CHECK_PLAN": "1"}
    env.pop("STAGES", None)
    if stages is not None:
        env["STAGES"] = stages
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu-check")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    steps = [line.split() for line in proc.stdout.splitlines() if line.startswith("step ")]
    return [(name, int(limit)) for _, name, limit in steps]


def test_each_of_the_three_calls_fits_eight_minutes():
    """The default call (hack tests, concurrent evaluations), STAGES=corpus and STAGES=engine: each
    one call on a fresh box, its limits summing to at most 470 s."""
    for stages, names in CALLS.items():
        steps = plan(stages)
        assert [name for name, _ in steps] == names
        assert all(limit > 0 for _, limit in steps)
        assert sum(limit for _, limit in steps) <= 470, steps


def test_the_two_gpu_call_fits_its_deadline():
    """STAGES=gpus (issue 38): one GPU against two, then a suite of 4 on two GPUs, in one call of
    DEADLINE=590 s on a 2-GPU box."""
    steps = plan("gpus")
    assert [name for name, _ in steps] == ["gpus-scaling", "gpus-suite"]
    assert sum(limit for _, limit in steps) <= 590, steps


def test_stages_choose_the_steps():
    assert plan("") == []
    assert [n for n, _ in plan("verdicts concurrent")] == ["verdicts", "concurrent"]
    assert [n for n, _ in plan("prebuild slow compile")] == ["prebuild", "slow", "compile"]


def test_the_concurrent_step_judges_eight_evaluations_with_a_large_input_problem():
    text = (REPO / "scripts" / "gpu-check").read_text()
    block = text[text.index("if has concurrent"):]
    block = block[:block.index("\nfi")]
    pairs = [w for w in block.replace("\\", " ").split() if ":" in w and w.endswith(".py")]
    assert len(pairs) == 8 and len({p.split(":")[0] + p.split(":")[1] for p in pairs}) == 8
    for pair in pairs:
        problem, file = pair.replace("$L", "engine/scripted_library").split(":")
        assert (REPO / file).exists(), file
        assert "Intended outcome: correct" in (REPO / file).read_text(), file
    from engine.problems import load_problem

    large = load_problem(str(REPO / "tests/data/large/mse_loss_large.py"))
    sizes = large.sizes_for("cuda")
    assert sizes["batch_size"] * sizes["dim"] * 4 == 4 * 2**30  # 4 GiB per input


def test_the_report_shows_the_concurrent_and_verdicts_steps(tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "out"
    (raw / "concurrent").mkdir(parents=True)
    (raw / "steps.tsv").write_text("verdicts\t3\t1.0\t\nconcurrent\t0\t90.0\t\n")
    (raw / "verdicts.log").write_text("ktree bench verdicts is missing from this tree\n")
    (raw / "concurrent" / "report.json").write_text(json.dumps({
        "processes": 1, "together_s": 30.0, "alone_s": 20.0, "alone_done": 1, "status_differs": 0,
        "crashed": 0, "out_of_memory": 0, "gpu_peak_used_mib": 50000.0,
        "rows": [{"problem": "mse_loss_large", "file": "mse_loss_cuda.py", "status": "correct",
                  "alone_status": "correct", "time_ms": 2.6, "alone_ms": 2.6, "peak_gpu_mib": 41000.0,
                  "alone_peak_gpu_mib": 40000.0, "check_set": {"placement": "live", "bytes": 0}, "oom": ""}]}))
    subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check_report.py"), str(raw), str(out)],
                   check=True, timeout=60)
    md = (out / "gpu-check.md").read_text()
    assert "| verdicts | 3 |" in md and "ktree bench verdicts is missing" in md
    assert "| mse_loss_large | mse_loss_cuda.py | correct | correct |" in md and "| live |" in md
    assert json.loads((out / "gpu-check.json").read_text())["concurrent"]["processes"] == 1


def test_the_report_shows_one_gpu_against_two(tmp_path):
    """The gpus call's files (bench pipeline --scaling's JSON, the two-GPU suite's) become tables."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    (raw / "steps.tsv").write_text("gpus-scaling\t0\t300.0\t\ngpus-suite\t0\t120.0\t\n")

    def run(n: int, per_minute: float, idle: float) -> dict:
        devices = [{"name": f"gpu{i}", "jobs": 40 // n, "busy_s": 50.0, "idle_fraction_of_wall": 0.1,
                    "idle_while_waiting_s": idle, "idle_fraction_while_waiting": idle / 10} for i in range(n)]
        return {"status": "finished", "evaluations": 40, "variants_per_minute": per_minute, "wall_s": 60.0,
                "devices": devices}

    one, two = run(1, 40.0, 0.0), run(2, 74.0, 0.5)
    (raw / "pipeline-scaling.json").write_text(json.dumps({
        "problem": "softmax", "backend": "cuda", "devices": 2, "status": "finished", "target_ratio": 1.8,
        "target_idle": 0.1,
        "runs": [{"mode": "distinct", "devices": 2, "one": one, "many": two, "ratio": 1.85,
                  "worst_idle_while_waiting": 0.05, "meets": {"ratio": True, "idle": True}}]}))
    suite = {**two, "problems": ["softmax", "layernorm"], "shape": {"rounds": 2}, "busy_fraction_of_wall": 0.8}
    (raw / "pipeline-suite-gpus.json").write_text(json.dumps(suite))
    subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check_report.py"), str(raw), str(out)],
                   check=True, timeout=60)
    md = (out / "gpu-check.md").read_text()
    assert "| distinct | 40 | 40.0 | 40 | 74.0 | 1.85x | 5.0 % | yes |" in md, md
    assert "| distinct | 2 devices | gpu1 | 20 | 83.3 % |" in md, md
    assert "## A suite of 4 on two GPUs" in md and "gpu1 20, 50.0 s, 5.0 %" in md, md


def test_the_report_shows_where_the_idle_seconds_went(tmp_path):
    """The pipeline step's and the two-GPU suite's idle tables (bench pipeline's `idle`), and one
    per run of the scaling bench."""
    from engine.bench.idle import IdleLedger, Moment

    def idle(names: list[str]) -> dict:
        ledger = IdleLedger()
        ledger.add(3.0, Moment(building=1, started=True), [{"name": n, "busy": False} for n in names])
        ledger.add(1.0, Moment(llm_calls=1, started=True), [{"name": n, "busy": n != "gpu1"} for n in names])
        return ledger.report(10.0)

    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    (raw / "steps.tsv").write_text("pipeline\t0\t100.0\t\ngpus-scaling\t0\t300.0\t\ngpus-suite\t0\t120.0\t\n")
    (raw / "pipeline.json").write_text(json.dumps({
        "problems": ["softmax"], "llm_latency": "no LLM latency", "shape": {"rounds": 1}, "wall_s": 10.0,
        "busy_fraction_of_wall": 0.7, "idle": idle(["gpu0"])}))
    (raw / "pipeline-suite-gpus.json").write_text(json.dumps({
        "problems": ["softmax"], "shape": {"rounds": 2}, "status": "finished", "wall_s": 10.0, "devices": [],
        "busy_fraction_of_wall": 0.6, "idle": idle(["gpu0", "gpu1"])}))
    devices = [{"name": "gpu0", "jobs": 4, "busy_s": 5.0, "idle_while_waiting_s": 0.0,
                "idle_fraction_while_waiting": 0.0}]
    one = {"evaluations": 4, "variants_per_minute": 24.0, "wall_s": 10.0, "devices": devices,
           "idle": idle(["gpu0"])}
    run = {"mode": "distinct", "devices": 2, "one": one, "many": {**one, "idle": idle(["gpu0", "gpu1"])},
           "ratio": 1.0, "worst_idle_while_waiting": 0.0, "meets": {"ratio": False, "idle": True}}
    (raw / "pipeline-scaling.json").write_text(json.dumps({
        "problem": "softmax", "backend": "cuda", "devices": 2, "status": "finished", "target_ratio": 1.8,
        "target_idle": 0.1, "runs": [run]}))
    subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check_report.py"), str(raw), str(out)],
                   check=True, timeout=60)
    md = (out / "gpu-check.md").read_text()
    pipeline = md[md.index("## bench pipeline"):]
    assert "| build | 3.00 s | 30.0 % |" in pipeline and "| idle in all | 3.00 s | 30.0 % |" in pipeline, md
    suite = md[md.index("## A suite of 4 on two GPUs"):]
    assert "| build | 6.00 s | 30.0 % | 3.00 s | 3.00 s |" in suite, md
    assert "| llm | 1.00 s | 5.0 % | 0.00 s | 1.00 s |" in suite, md
    assert "| idle in all | 7.00 s | 35.0 % | 3.00 s | 4.00 s |" in suite, md
    scaling = md[md.index("## One GPU against two"):md.index("## A suite of 4")]
    assert "Idle, distinct sources, 2 devices (10.0 s wall):" in scaling, md
    assert "Idle, distinct sources, 1 device (10.0 s wall):" in scaling, md


def test_the_prebuild_lists_its_sources_without_a_gpu():
    """scripts/gpu-prebuild reads the sources the GPU tests build (an import the GPU box alone would
    otherwise find broken)."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu-prebuild"), "--list"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) >= 10, proc.stderr[-2000:]


STAND_IN_CLI = '''
import json, sys, time
args = sys.argv[1:]
db = args[args.index("--db") + 1]
if "alone-slow" in db:
    time.sleep(60)
print(json.dumps({"status": "correct", "flags": [], "time_ms": 1.0}))
'''


@pytest.mark.slow
def test_an_alone_run_cut_by_the_budget_is_not_run_not_a_difference(tmp_path):
    """scripts/concurrent-eval with --budget: an alone run the budget cuts short is "not run" (not
    compared), not a "no verdict (timeout)" counted as a status that differs (the default GPU
    check's concurrent step failed that way on the H100 box). `ktree eval` is a stand-in here (an
    engine.cli package in the working folder; the slow problem's alone run sleeps past the budget)."""
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text("")
    (tmp_path / "engine" / "cli.py").write_text(STAND_IN_CLI)
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "concurrent-eval"), "--timeout", "90",
                           "--budget", "22", "--out", "out", "slow:a.py", "fast:b.py"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    rows = {r["problem"]: r for r in report["rows"]}
    assert rows["slow"]["status"] == "correct" and rows["slow"]["alone_status"] == "not run", rows
    assert "budget of 22 s ran out" in proc.stderr, proc.stderr
    assert report["status_differs"] == 0 and report["crashed"] == 0
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_report_counts_the_round_2_idea_prompts_and_their_diagnosis(tmp_path):
    """An idea call is recorded on the idea node it fills, whose parent is the variant it asks about:
    the report finds those calls (it read none before: 0/0 beside prompts that held the diagnosis)."""
    import asyncio
    import sqlite3

    from engine.record.store import Store
    from tests.fake_session import write_fake_session

    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    (raw / "steps.tsv").write_text("search\t0\t10.0\t\n")

    async def make() -> None:
        store = await Store.open(raw / "gpu.db")
        try:
            await write_fake_session(store, 40)
        finally:
            await store.close()

    asyncio.run(make())
    with sqlite3.connect(raw / "gpu.db") as conn:
        ids = [r[0] for r in conn.execute(  # (the fake session records idea calls on their parent)
            "SELECT c.id FROM llm_calls c JOIN nodes n ON n.id = c.node_id"
            " WHERE c.purpose = 'idea' AND n.kind = 'variant' ORDER BY c.id")]
        assert len(ids) >= 2  # the fake session has rounds after the first
        # the first one recorded as the engine records it: on the idea node it fills
        [(variant,)] = conn.execute("SELECT node_id FROM llm_calls WHERE id = ?", (ids[0],)).fetchall()
        [(idea,)] = conn.execute("SELECT MIN(id) FROM nodes WHERE parent_id = ? AND kind = 'idea'",
                                 (variant,)).fetchall()
        conn.execute("UPDATE llm_calls SET node_id = ?, prompt = prompt || '\nProfile diagnosis: memory-bound'"
                     " WHERE id = ?", (idea, ids[0]))
    subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check_report.py"), str(raw), str(out)],
                   check=True, timeout=60)
    [search] = json.loads((out / "gpu-check.json").read_text())["searches"]
    assert (search["round2_prompts_with_diagnosis"], search["round2_idea_prompts"]) == (1, len(ids))
