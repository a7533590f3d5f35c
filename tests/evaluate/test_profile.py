"""Profiles and diagnoses (engine.evaluate.profile.profiler): the pure diagnosis on recorded metrics, the
parsers of ncu, torch.profiler and compute-sanitizer output, the prompts that carry them, and
(acceptance 4) a recorded scripted CPU search whose idea prompts and screen show the diagnosis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import prompts
from engine.evaluate.profile.profiler import (
    achieved,
    diagnose,
    parse_ncu_csv,
    parse_sanitizer,
    parse_trace_kernels,
    summary_lines,
    wants_sanitizer,
)
from engine.evaluate.verdict import Verdict
from tests.conftest import query, run_ktree

DATA = Path(__file__).parents[1] / "data" / "profile"  # recorded tool output

# Recorded per-kernel metrics (the profile's keys), as ncu reports them on an H100.
STREAMING = {"name": "ln_apply_kernel(const float *, float *, long)", "time_us": 410.0, "share": 0.8,
             "dram_pct": 88.5, "l2_pct": 61.0, "sm_pct": 21.0, "fma_pct": 9.0, "tensor_pct": 0.0,
             "occupancy_pct": 86.0, "theoretical_occupancy_pct": 100.0, "registers": 24, "block_size": 256}
MATMUL = {"name": "sgemm_128x128", "time_us": 900.0, "share": 1.0, "dram_pct": 22.0, "l2_pct": 35.0,
          "sm_pct": 83.0, "fma_pct": 91.0, "tensor_pct": 0.0, "occupancy_pct": 24.0,
          "theoretical_occupancy_pct": 25.0}
STARVED = {"name": "ln_stats_kernel", "time_us": 3000.0, "share": 0.95, "dram_pct": 6.0, "l2_pct": 8.0,
           "sm_pct": 4.0, "fma_pct": 1.0, "tensor_pct": 0.0, "occupancy_pct": 11.0,
           "theoretical_occupancy_pct": 50.0, "occupancy_limiter": "registers per thread",
           "stalls": [["long_scoreboard", 31.2], ["barrier", 4.1]]}


def test_diagnosis_memory_bound_from_dram_throughput():
    d = diagnose({"tool": "ncu", "kernels": [STREAMING], "kernels_per_call": 2, "device_us_per_call": 500})
    assert d["bound"] == "memory"
    assert "DRAM throughput 88% of peak" in d["evidence"] and "SM 21%" in d["evidence"]
    assert d["numbers"]["dram_pct"] == pytest.approx(88.5)


def test_diagnosis_compute_bound_names_the_busy_pipe():
    d = diagnose({"tool": "ncu", "kernels": [MATMUL], "kernels_per_call": 1, "device_us_per_call": 900})
    assert d["bound"] == "compute" and d["evidence"].startswith("FMA pipe 91% of peak")


def test_diagnosis_latency_bound_says_occupancy_limiter_and_stall():
    d = diagnose({"tool": "ncu", "kernels": [STARVED], "kernels_per_call": 2, "device_us_per_call": 3100})
    assert d["bound"] == "latency"
    assert "occupancy 11% of 50% theoretical (limited by registers per thread)" in d["evidence"]
    assert "top stall long_scoreboard" in d["evidence"]


def test_diagnosis_launch_bound_from_many_tiny_kernels():
    tiny = [{"name": f"k{i}", "time_us": 3.0, "dram_pct": 5.0, "sm_pct": 3.0} for i in range(12)]
    d = diagnose({"tool": "ncu", "kernels": tiny, "kernels_per_call": 12, "device_us_per_call": 36.0})
    assert d["bound"] == "launch" and d["evidence"] == "12 kernels per call averaging 3.0 us each"
    # Or a GPU idle most of each call (torch.profiler's wall time against device time).
    idle = diagnose({"tool": "torch", "kernels": tiny[:3], "kernels_per_call": 3, "device_us_per_call": 90.0,
                     "wall_us_per_call": 400.0})
    assert idle["bound"] == "launch" and "busy 22% of each call" in idle["evidence"]


def test_diagnosis_without_counters_from_speed_of_light():
    peaks = {"bandwidth": 3.0e12, "fp32": 5.0e13, "tf32": 4.0e14}
    rates = achieved(flops=8e6, nbytes=2.0e9, time_ms=1.0, peaks=peaks)  # 2 TB/s of 3
    assert rates["bandwidth_pct"] == pytest.approx(66.7, abs=0.1)
    d = diagnose({"tool": "torch", "kernels": [{"name": "k", "time_us": 990.0}], "kernels_per_call": 1,
                  "device_us_per_call": 990.0, "wall_us_per_call": 1000.0, "achieved": rates})
    assert d["bound"] == "memory" and "achieved bandwidth 67% of the measured peak" in d["evidence"]
    slow = diagnose({"tool": "cpu", "kernels": [], "achieved": achieved(8e6, 2e8, 1.0, peaks)})
    assert slow["bound"] == "latency" and "only 7% of peak bandwidth" in slow["evidence"]
    assert diagnose({"tool": "cpu", "kernels": []})["bound"] == "unknown"


# `ncu --csv --page details --print-metric-name name --print-units base` (shape of its rows).
NCU_CSV = (DATA / "ncu_details.csv").read_text()


def test_parse_ncu_csv_orders_kernels_and_derives_limits():
    kernels = parse_ncu_csv(NCU_CSV)
    assert [k["name"].split("(")[0] for k in kernels] == ["ln_stats_kernel", "ln_apply_kernel"]
    stats, apply = kernels
    assert stats["time_us"] == pytest.approx(3012.448) and stats["share"] == pytest.approx(3012.448 / 3424.448)
    assert stats["occupancy_limiter"] == "shared memory per block" and stats["smem_bytes"] == 2048
    assert stats["stalls"][0] == ["barrier", 20.5]
    assert apply["dram_pct"] == 88.5
    assert parse_ncu_csv("==PROF== nothing profiled\n") == []


def test_recorded_h100_ncu_output_of_the_split_layernorm_is_memory_bound():
    """ncu 2025.3 on an H100, the scripted layernorm split_1 (three kernels), as ktree ran it."""
    kernels = parse_ncu_csv((DATA / "ncu_h100_split.csv").read_text())
    assert [k["name"].split("<")[0].split("(")[0] for k in kernels] == [
        "void ln_apply_kernel", "void ln_partial_kernel", "ln_finalize_kernel"]
    apply = kernels[0]
    assert apply["time_us"] == pytest.approx(196.192) and apply["dram_pct"] == pytest.approx(83.58)
    assert apply["registers"] == 39 and apply["block_size"] == 256 and apply["theoretical_occupancy_pct"] == 75
    assert apply["stalls"][0][0] == "long_scoreboard"
    d = diagnose({"tool": "ncu", "kernels": kernels, "kernels_per_call": 3,
                  "device_us_per_call": sum(k["time_us"] for k in kernels)})
    assert d["bound"] == "memory" and d["evidence"] == "DRAM throughput 83% of peak (SM 15%)"


def test_parse_trace_kernels_per_call_with_launch_configs():
    trace = {"traceEvents": [
        {"cat": "kernel", "name": "ln_apply_kernel", "dur": 30.0,
         "args": {"grid": [1024, 1, 1], "block": [256, 1, 1], "registers per thread": 32,
                  "shared memory": 0, "est. achieved occupancy %": 100}},
        {"cat": "kernel", "name": "ln_apply_kernel", "dur": 32.0, "args": {}},
        {"cat": "kernel", "name": "ln_stats_kernel", "dur": 10.0, "args": {}},
        {"cat": "cpu_op", "name": "aten::empty", "dur": 5.0},
    ]}
    kernels = parse_trace_kernels(trace, calls=2)
    assert [k["name"] for k in kernels] == ["ln_apply_kernel", "ln_stats_kernel"]
    assert kernels[0]["time_us"] == pytest.approx(31.0) and kernels[0]["calls"] == 1
    assert kernels[0]["grid"] == [1024, 1, 1] and kernels[0]["occupancy_pct"] == 100
    assert kernels[0]["share"] == pytest.approx(62 / 72)


SANITIZER = (DATA / "memcheck.txt").read_text()


def test_parse_sanitizer_keeps_kernel_access_thread_and_line():
    report = parse_sanitizer(SANITIZER)
    lines = report.splitlines()
    assert lines[0] == "Invalid __global__ write of size 4 bytes"
    assert "ln_apply_kernel" in lines[1] and "cuda.cu:64" in lines[1]
    assert "by thread (32,0,0) in block (1,0,0)" in report and "is out of bounds" in report
    assert "Host Frame" not in report and report.count("Invalid __global__") == 2  # the first two
    assert lines[-1] == "ERROR SUMMARY: 4 errors"
    assert parse_sanitizer("========= ERROR SUMMARY: 0 errors\n") == ""
    assert wants_sanitizer("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert wants_sanitizer("CUDA error: misaligned address") and not wants_sanitizer("incorrect: trial 1")
    # What sampleloop_1's out-of-bounds store raised on an H100.
    assert wants_sanitizer("torch.AcceleratorError: CUDA error: operation not supported on global/shared"
                           " address space")


def test_prompts_carry_the_diagnosis_and_the_sanitizer_report():
    profile = {"tool": "ncu", "kernels": [STREAMING], "kernels_per_call": 1, "device_us_per_call": 410}
    profile["diagnosis"] = diagnose(profile)
    profile["reference"] = {"diagnosis": {"bound": "memory", "evidence": "DRAM throughput 92% of peak"}}
    v = Verdict(status="correct", time_ms=0.5, speedup_eager=1.4, profile=profile)
    text = prompts.describe_verdict(v)
    assert "- diagnosis (ncu): memory-bound — DRAM throughput 88% of peak" in text
    assert "ln_apply_kernel: 80% of device time" in text and "DRAM 88%" in text and "block 256" in text
    assert "the PyTorch reference, same profiler: memory-bound — DRAM throughput 92% of peak" in text
    assert len(summary_lines(profile)) == 2  # compact: the diagnosis and one line per kernel

    idea = prompts.idea_prompt("src", "parent", text, ["Fuse → best 1.40x vs eager (memory-bound)"], 2, "cuda")
    assert "DRAM throughput 88% of peak" in idea and "Fuse → best 1.40x vs eager" in idea

    fix = prompts.fix_prompt("src", "code = 1  # ModelNew", "Loop", "CUDA error: an illegal memory access"
                             "\n\ncompute-sanitizer (memcheck) on a re-run:\nold", "cuda", 0.01,
                             sanitizer=parse_sanitizer(SANITIZER))
    assert "crashed at run time with an illegal memory access" in fix
    assert "Invalid __global__ write of size 4 bytes" in fix and "by thread (32,0,0) in block (1,0,0)" in fix
    assert "\nold" not in fix  # the report appears once
    build = prompts.fix_prompt("src", "code", "Loop", "error: expected ;", "cuda", 0.01)
    assert "failed to build" in build and "Compiler output (tail)" in build


@pytest.mark.slow
def test_recorded_cpu_search_feeds_the_diagnosis_to_idea_prompts(recorded_search: dict):
    """Acceptance 4: each correct variant of a scripted CPU search that is read — a second-round
    parent, the best — has a diagnosis (cpu: achieved rates against measured peaks), and each
    second-round idea prompt holds its parent's; the rest are profiled only on demand."""
    db = recorded_search["db"]
    every = {node: Verdict.from_dict(json.loads(v)) for node, v in
             query(db, "SELECT node_id, verdict FROM evaluations WHERE status = 'correct'")}
    parents = set(json.loads(query(db, "SELECT parent_ids FROM rounds WHERE round = 2")[0][0]))
    best = recorded_search["summary"]["best"]["node_id"]
    correct = {node: v for node, v in every.items() if node in parents | {best}}
    assert correct and {node for node, v in every.items() if v.profile} == set(correct)
    for v in correct.values():
        assert v.profile["tool"] == "cpu" and v.bound in ("memory", "compute", "latency")
        assert v.profile["achieved"]["bandwidth_pct"] > 0 and v.profile["peaks"]["bandwidth"] > 0
    rows = query(db, "SELECT i.parent_id, c.prompt FROM llm_calls c JOIN nodes i ON c.node_id = i.id"
                     " WHERE c.purpose = 'idea' AND i.round = 2")
    assert rows
    for parent, prompt in rows:
        evidence = correct[parent].profile["diagnosis"]["evidence"]
        assert f"diagnosis (cpu): {correct[parent].bound}" in prompt and evidence in prompt
        tried = prompt.split(prompts.TRIED_HEADER, 1)[1].split("\n## ", 1)[0]
        assert "→ best" in tried and "x vs eager" in tried  # the parent's own idea, with its outcome

    proc = run_ktree("show", "--json", "--db", str(db))  # the profile is in the session's JSON
    assert proc.returncode == 0, proc.stderr
    shown = {r["node"]: r for r in json.loads(proc.stdout)[0]["variants"]}
    for node, v in correct.items():
        assert shown[node]["bound"] == v.bound and shown[node]["profile"]["diagnosis"] == v.profile["diagnosis"]


@pytest.mark.slow
async def test_screen_shows_the_diagnosis_and_the_bound_column(recorded_search: dict):
    from textual.widgets import DataTable, Static

    from tests.tui_helpers import app_on
    from tui.screens.search import SearchScreen

    db = recorded_search["db"]
    [(node, verdict)] = query(db, "SELECT node_id, verdict FROM evaluations WHERE status = 'correct'"
                                  " AND node_id IN (SELECT node_id FROM profiles) ORDER BY node_id LIMIT 1")
    v = Verdict.from_dict(json.loads(verdict))
    async with app_on(db, size=(160, 60)) as (app, pilot):
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        table = screen.query_one("#timings", DataTable)
        assert table.get_cell(str(node), "bound") == v.bound
        screen.select_node(node)
        await pilot.pause()
        pane = str(screen.query_one("#verdict", Static).render())
        assert f"profile (cpu): {v.bound}" in pane and v.profile["diagnosis"]["evidence"] in pane


@pytest.mark.slow
def test_eval_profile_prints_the_diagnosis(build_cache: Path):
    """`ktree eval --profile auto` on the cpu backend: the verdict, then which profiler ran and the
    diagnosis; --json carries the profile."""
    from engine.llm.scripted import load_ideas

    [idea] = [i for i in load_ideas("softmax", "cpu") if i.key == "online"]
    solution = next(v for v in idea.variants if "Intended outcome: correct" in v.read_text())
    proc = run_ktree("eval", "softmax", str(solution), "--backend", "cpu", "--profile", "auto")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "correct" in proc.stdout and "diagnosis (cpu): " in proc.stdout, proc.stdout
    proc = run_ktree("eval", "softmax", str(solution), "--backend", "cpu", "--json", "--profile", "auto")
    profile = json.loads(proc.stdout)["profile"]
    assert profile["tool"] == "cpu" and profile["diagnosis"]["bound"] in ("memory", "compute", "latency")
    assert profile["diagnosis"]["evidence"] in "\n".join(summary_lines(profile))


@pytest.mark.slow
def test_bench_profile_measures_the_overhead_per_variant(build_cache: Path):
    """`ktree bench profile` on the cpu backend: an honest kernel evaluated without, then with its
    profile (taken, not read from a cache); the overhead is the profile's share of the variant's
    whole cost, from the seconds the verdicts recorded."""
    proc = run_ktree("bench", "profile", "softmax", "--backend", "cpu", "--variants", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    [row] = result["rows"]
    assert row["status"] == "correct" and row["tool"] == "cpu"
    assert row["bound"] in ("memory", "compute", "latency")
    assert row["profile_s"] >= 0 and row["eval_s"] > 0 and row["build_s"] > 0
    total = row["build_s"] + row["eval_s"] + row["profile_s"]
    assert row["overhead"] == pytest.approx(row["profile_s"] / total)
    auto = result["paths"]["auto"]
    assert auto["profiled"] == 1 and auto["overhead_median"] == row["overhead"]


@pytest.mark.parametrize(("argv", "says"), [
    (["gelu"], "no honest scripted cpu kernels for 'gelu'"),
    (["softmax", "--path", "ncu"], "on cpu only auto"),
])
def test_bench_profile_usage_errors_are_one_line(argv: list[str], says: str):
    proc = run_ktree("bench", "profile", *argv, "--backend", "cpu")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr


def test_resume_asks_for_the_fix_of_a_sanitized_runtime_error():
    """A run-time error with a compute-sanitizer report gets a fix child like a compile error,
    after a resume too; one without a report (no illegal access) does not."""
    from engine.domain import Node
    from engine.search.resume import FIX, recovery

    def n(id: int, parent: int | None, kind: str, status: str) -> Node:
        return Node(id, 1, parent, kind, 1, "", "", "", status, "llm", None, None)

    nodes = {x.id: x for x in [n(1, None, "root", "reference"), n(2, 1, "idea", "ok"),
                               n(3, 2, "variant", "runtime_error"), n(4, 2, "variant", "runtime_error")]}
    assert [(s, node.id) for s, node in recovery(nodes, 1, busy=set(), sanitized={3})] == [(FIX, 3)]
    assert recovery(nodes, 1, busy=set()) == []


class SanitizingEvaluator:
    """An evaluator (no GPU needed) that gives the scripted layernorm's out-of-bounds variant what
    the real one gives on an H100 (a run-time error with compute-sanitizer's report) and every
    other variant a correct verdict with an ncu-style profile."""

    backend = "cuda"
    gpus = None
    session = None
    waiting = {"compile": 0, "device": 0}
    compile_workers = 1

    def device_states(self) -> list[dict]:
        return []

    def job(self, problem_path, source, sizes, *, flops, bytes, **options):
        from engine.evaluate.host.make_job import make_job

        return make_job(problem_path, source, sizes, backend="cuda", cache_dir="", flops=flops,
                        bytes=bytes, **options)

    async def evaluate(self, job, on_phase=None, gate=None) -> Verdict:
        if "y[i * M + n]" in job.solution_source:
            report = parse_sanitizer(SANITIZER)
            return Verdict(status="runtime_error", backend="cuda", sanitizer=report,
                           log="torch.AcceleratorError: CUDA error: operation not supported on global/shared"
                               f" address space\n\ncompute-sanitizer (memcheck) on a re-run:\n{report}")
        profile = {"tool": "ncu", "kernels": [STREAMING], "kernels_per_call": 1, "device_us_per_call": 410}
        profile["diagnosis"] = diagnose(profile)
        return Verdict(status="correct", backend="cuda", time_ms=1.0, ref_eager_ms=2.0, speedup_eager=2.0,
                       trials=3, profile=profile)

    async def close(self) -> None:
        pass


async def test_a_sanitized_crash_gets_a_fix_prompt_holding_the_report(tmp_path: Path):
    """Acceptance 3 (the search's side): the out-of-bounds variant's fix prompt holds the report
    naming the kernel and the invalid access, and the scripted fix answers it."""
    from engine.llm.scripted import DATA, ScriptedProvider
    from engine.problems import load_problem
    from engine.record.events import EventBus
    from engine.record.store import Store
    from engine.scripted_library import answered
    from engine.search import Search, SearchConfig

    store = await Store.open(tmp_path / "k.db")
    try:
        search = Search(store, EventBus(), [(ScriptedProvider("layernorm", "cuda", seed=0), "scripted")],
                        SanitizingEvaluator(), load_problem("layernorm"),
                        SearchConfig.of(rounds=1, ideas=4, variants=2, top=1))
        await search.run()
    finally:
        await store.close()
    db = tmp_path / "k.db"
    [(failed, fix_prompt, fix_node)] = query(
        db, "SELECT n.parent_id, c.prompt, n.id FROM llm_calls c JOIN nodes n ON c.node_id = n.id"
            " WHERE c.purpose = 'fix' AND n.parent_id IN (SELECT node_id FROM evaluations"
            " WHERE status = 'runtime_error')")
    assert "crashed at run time with an illegal memory access" in fix_prompt
    assert "Invalid __global__ write of size 4 bytes" in fix_prompt and "ln_apply_kernel" in fix_prompt
    assert "by thread (32,0,0) in block (1,0,0)" in fix_prompt and "cuda.cu:64" in fix_prompt
    [(source,)] = query(db, "SELECT source FROM nodes WHERE id = ?", fix_node)
    assert source.strip() == answered(DATA / "layernorm/cuda/fixes/sampleloop_1.py").strip()
    [(log,)] = query(db, "SELECT verdict FROM evaluations WHERE node_id = ?", failed)
    assert "Invalid __global__ write" in json.loads(log)["log"]  # the verdict log has it too


def _evaluate_cuda(name: str, profile: str) -> Verdict:
    import asyncio
    import os

    from engine.evaluate.host.evaluator import LocalEvaluator
    from engine.llm.scripted import DATA
    from engine.problems import load_problem

    problem = load_problem("layernorm")

    async def go() -> Verdict:
        evaluator = LocalEvaluator("cuda", cuda_arch=os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0",
                                   profile=profile)
        cost = problem.cost("cuda")
        job = evaluator.job(problem.path, (DATA / "layernorm/cuda" / name).read_text(),
                            problem.sizes_for("cuda"), flops=cost.flops, bytes=cost.bytes)
        try:
            return await evaluator.evaluate(job)
        finally:
            await evaluator.close()

    return asyncio.run(go())


@pytest.mark.gpu
def test_gpu_out_of_bounds_write_gets_compute_sanitizers_report():
    v = _evaluate_cuda("sampleloop_1.py", "auto")
    assert v.status == "runtime_error", v.log[-1500:]
    assert "Invalid __global__ write" in v.sanitizer and "ln_apply_kernel" in v.sanitizer, v.log[-3000:]
    assert "by thread" in v.sanitizer and v.sanitizer in v.log


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["auto", "torch"])
def test_gpu_split_layernorm_profile(mode: str):
    v = _evaluate_cuda("split_1.py", mode)
    assert v.status == "correct", v.log[-1500:]
    assert v.profile["tool"] in (("ncu", "torch") if mode == "auto" else ("torch",)), v.profile
    assert v.profile["kernels"] and v.profile["kernels"][0]["time_us"] > 0
    assert v.bound in ("memory", "compute", "latency", "launch")
    assert v.profile["reference"]["diagnosis"]["bound"]


def test_a_rate_above_the_measured_peak_is_labelled_above_it():
    """Issue 30 item 8: a diagnosis never says a kernel ran at 171 % "of" a peak without saying the
    measured peak was passed (a measured copy or matmul is not a bound)."""
    beyond = diagnose({"tool": "cpu", "kernels": [], "achieved": {"bandwidth_pct": 171.4, "flops_pct": 3.0}})
    assert beyond["bound"] == "memory" and "171% of the measured peak" in beyond["evidence"]
    assert "above it" in beyond["evidence"]
    fast = diagnose({"tool": "cpu", "kernels": [], "achieved": {"bandwidth_pct": 40.0, "flops_pct": 214.0}})
    assert fast["bound"] == "compute" and "214% of the measured peak — above it" in fast["evidence"]
    within = diagnose({"tool": "cpu", "kernels": [], "achieved": {"bandwidth_pct": 99.0, "flops_pct": 3.0}})
    assert "above" not in within["evidence"]


def test_cpu_bandwidth_is_held_to_a_copy_of_the_same_working_set(tmp_path: Path):
    """Issue 30 item 8's root cause: the cpu timer flushes no cache and a cpu problem's working set
    (softmax: 4 MiB) stays in the caches between timed calls, while the bandwidth peak was a copy
    of 256 MiB (the DRAM's): torch's own softmax read 262 % of it here. Against a copy of the same
    working set, measured on the timer's threads, the reference is within the peak."""
    import asyncio

    from engine.evaluate.harness import timing
    from engine.evaluate.host.make_job import make_job
    from engine.evaluate.loading import load_module_from_path
    from engine.evaluate.profile import profiler as profile
    from engine.problems import load_problem

    problem = load_problem("softmax")
    sizes = problem.sizes_for("cpu")
    cost = problem.cost_at(sizes)
    module = load_module_from_path(str(problem.path), sizes)
    model, inputs = module.Model(*module.get_init_inputs()), module.get_inputs()
    timing.fix_threads()
    stats = timing.time_pair(lambda: model(*inputs), lambda: model(*inputs), "cpu", budget_s=0.5)

    async def runner(prefix: list[str], job, action: str, env: dict, timeout_s: float):  # in-process
        return profile.ACTIONS[action](job), "", ""

    job = make_job(problem.path, "", sizes, backend="cpu", cache_dir=str(tmp_path), flops=cost.flops,
                   bytes=cost.bytes)
    profiler = profile.Profiler("auto", str(tmp_path))
    got = asyncio.run(profiler.profile(runner, job, stats.new.median, {}, "cpu0"))
    # (within the peak up to the two measurements' noise: the peak's copy and the reference are timed at
    # different moments, and beside a test run on two cores they read 101.8 % and 119.2 %; alone 3 of 3
    # within it. The bug this guards read 262 %.)
    assert 0 < got["achieved"]["bandwidth_pct"] <= 150, got
    peaks = got["peaks"]
    assert peaks["working_set_bytes"] == int(cost.bytes) // 8 * 8 and peaks["threads"] >= 1
    assert peaks["bandwidth_working_set"] > 0 and peaks["bandwidth"] > 0
    assert "MiB working set" in got["diagnosis"]["evidence"] or got["diagnosis"]["bound"] != "memory"
