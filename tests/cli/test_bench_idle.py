"""`bench pipeline`'s idle table (engine.bench.idle): each idle sample of a device given one cause
by a fixed precedence, the causes summing to the idle total; the evaluator's device stages it
reads. On synthetic states, no build."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from engine.bench.idle import CAUSE_NAMES, IdleLedger, Moment, idle_cause, idle_table, moment_of
from engine.evaluate.host.devices import Device


@pytest.mark.parametrize(("moment", "stage", "cause"), [
    # the device's own stage first, whatever else goes on
    (Moment(queued=2, building=1, llm_calls=3, started=True), "lock", "host lock"),
    (Moment(queued=2, building=1, started=True), "start", "start"),
    (Moment(queued=1, started=True), "prewarm", "load"),
    (Moment(started=True), "reference", "load"),
    (Moment(queued=1, building=2, started=True), "quiet", "timer"),
    (Moment(started=True), "a stage not known yet", "other"),
    # then the device queue, builds, fix calls, other calls
    (Moment(queued=1, building=2, fix_calls=1, llm_calls=1, started=True), "", "queued"),
    (Moment(building=1, fix_calls=1, llm_calls=1, started=True), "", "build"),
    (Moment(to_build=1, llm_calls=1, started=True), "", "build"),
    (Moment(fix_calls=1, llm_calls=4, started=True), "", "fix"),
    (Moment(llm_calls=4, started=True), "", "llm"),
    # nothing in flight: where the search stands
    (Moment(), "", "setup"),
    (Moment(started=True), "", "round tail"),
    (Moment(started=True, ended=True), "", "end"),
    (Moment(llm_calls=1, started=True, ended=True), "", "llm"),  # a suite's other search still asks
])
def test_each_idle_sample_gets_the_first_cause_that_holds(moment: Moment, stage: str, cause: str):
    assert idle_cause(moment, stage) == cause


def test_the_moment_counts_calls_by_purpose_and_code_waiting_for_a_build():
    nodes = [("root", "reference", "llm"), ("idea", "generating", "llm"), ("idea", "ok", "llm"),
             ("variant", "generating", "llm"), ("variant", "generating", "fix"), ("variant", "queued", "llm"),
             ("variant", "compiling", "llm"), ("variant", "correct", "llm")]
    m = moment_of(nodes, queued=1, building=1, started=True, ended=False)
    assert m == Moment(queued=1, building=1, to_build=1, fix_calls=1, llm_calls=2, started=True)


def test_the_causes_sum_to_the_idle_total_per_device_and_in_all():
    """Two devices, 1000 samples of uneven lengths: what is not held is idle, each second of it in
    one cause, the causes' rounded seconds summing to the rounded total exactly."""
    ledger = IdleLedger()
    moments = [Moment(), Moment(llm_calls=1, started=True), Moment(building=1, started=True),
               Moment(queued=1, started=True), Moment(started=True), Moment(started=True, ended=True)]
    held = {"gpu0": 0.0, "gpu1": 0.0}
    wall = 0.0
    for i in range(1000):
        dt = 0.0041 + (i % 7) * 0.00037
        wall += dt
        states = [{"name": "gpu0", "busy": i % 3 == 0, "stage": "start" if i % 11 == 0 else ""},
                  {"name": "gpu1", "busy": i % 5 == 0,
                   "waiting_for": "gpu1 (held by pid 7)" if i % 13 == 0 else None}]
        for d in states:
            held[d["name"]] += dt if d["busy"] else 0.0
        ledger.add(dt, moments[i % len(moments)], states)
    r = ledger.report(wall)
    assert [d["name"] for d in r["devices"]] == ["gpu0", "gpu1"]
    for d in r["devices"]:
        assert d["idle_s"] == pytest.approx(wall - held[d["name"]], abs=1e-3)
        assert round(sum(c["idle_s"] for c in d["causes"]), 3) == d["idle_s"]
        assert d["fraction_of_wall"] == pytest.approx(d["idle_s"] / wall, abs=1e-4)
    assert round(sum(c["idle_s"] for c in r["causes"]), 3) == r["idle_s"]
    assert r["idle_s"] == pytest.approx(sum(d["idle_s"] for d in r["devices"]), abs=2e-3)
    assert r["fraction_of_wall"] == pytest.approx(r["idle_s"] / (2 * wall), abs=1e-4)
    names = [c["cause"] for c in r["causes"]]
    assert names == [c for c in CAUSE_NAMES if c in names]  # in the order of precedence
    assert {"start", "host lock", "queued", "build", "llm", "setup", "round tail", "end"} <= set(names)
    assert "host lock" not in {c["cause"] for c in r["devices"][0]["causes"]}  # gpu1's alone


def test_the_table_gives_each_cause_its_seconds_and_share_and_a_column_per_device():
    ledger = IdleLedger()
    ledger.add(2.0, Moment(building=1, started=True), [{"name": "cpu0", "busy": False}])
    ledger.add(1.0, Moment(llm_calls=1, started=True), [{"name": "cpu0", "busy": False}])
    ledger.add(1.0, Moment(llm_calls=1, started=True), [{"name": "cpu0", "busy": True}])
    one = ledger.report(4.0)
    assert [(c["cause"], c["idle_s"], c["fraction_of_wall"]) for c in one["causes"]] == [
        ("build", 2.0, 0.5), ("llm", 1.0, 0.25)]
    table = idle_table(one)
    assert "| build | 2.00 s | 50.0 % |" in table and "| llm | 1.00 s | 25.0 % |" in table
    assert "| idle in all | 3.00 s | 75.0 % |" in table and "cpu0" not in table

    ledger.add(1.0, Moment(started=True), [{"name": "cpu0", "busy": True}, {"name": "cpu1", "busy": False}])
    two = idle_table(ledger.report(5.0))
    assert "| device idle, by cause | seconds | of the wall | cpu0 | cpu1 | what it means |" in two
    assert "| round tail | 1.00 s | 10.0 % | 0.00 s | 1.00 s |" in two
    assert "| idle in all | 4.00 s | 40.0 % | 3.00 s | 1.00 s |" in two


def test_a_device_says_its_stage_its_worker_s_start_and_warm_up():
    device = Device("gpu0", 0, {}, None)
    assert device.state()["stage"] == ""
    with device.staged("reference"):
        assert device.state()["stage"] == "reference"
        device.busy = True
        assert device.state()["stage"] == ""  # held: no longer idle
        device.busy = False
    assert device.state()["stage"] == ""
    worker = SimpleNamespace(starting=True, warming=False, started_ok=True)
    early = Device("gpu1", 1, {}, worker)  # type: ignore[arg-type]
    assert early.state()["stage"] == "start"  # a start ahead of any variant (start_workers) too
    worker.starting, worker.warming = False, True
    assert early.state()["stage"] == "prewarm"
    worker.warming = False
    assert early.state()["stage"] == ""


async def test_a_cpu_timing_waiting_for_a_running_build_is_the_timer_stage():
    """One cpu device: a device taken while a build holds a compile slot waits for it (the timer's
    quiet), shown as the `quiet` stage (the `timer` cause), then is held."""
    from engine.evaluate.host.evaluator import LocalEvaluator

    ev = LocalEvaluator("cpu", compile_workers=1, worker=False, host_lock=False)
    try:
        await ev._compile_slots.acquire()  # a build running
        held = asyncio.Event()

        async def take() -> None:
            async with ev._device():
                held.set()

        task = asyncio.create_task(take())
        for _ in range(100):
            await asyncio.sleep(0.01)
            if ev.device_states()[0]["stage"] == "quiet":
                break
        [state] = ev.device_states()
        assert (state["busy"], state["stage"]) == (False, "quiet")
        assert idle_cause(Moment(queued=1, building=1, started=True), state["stage"]) == "timer"
        ev._compile_slots.release()  # the build ends
        await asyncio.wait_for(held.wait(), 5)
        await task
        assert ev.device_states()[0]["stage"] == ""
    finally:
        await ev.close()


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header starts with `header`, as cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header}"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


@pytest.mark.slow
def test_the_real_bench_prints_the_idle_table_whose_causes_sum_to_the_idle_total(tmp_path):
    """`ktree bench pipeline` on the cpu backend, one scripted variant (the library's file as it is:
    a build the run's shared cache may hold already; about 90 s here when it does not): the idle
    table's causes sum to its idle total, and the idle and the device time to the wall."""
    from tests.conftest import run_ktree

    proc = run_ktree("--db", str(tmp_path / "k.db"), "bench", "pipeline", "softmax", "--backend", "cpu",
                     "--rounds", "1", "--ideas", "1", "--variants", "1", "--repeat-sources", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    measures = {row[0]: row[1] for row in _table(proc.stdout, "measure")}
    wall, held = float(measures["wall time"].split()[0]), float(measures[
        "total device time (device-seconds held)"].split()[0])
    rows = _table(proc.stdout, "device idle, by cause")
    *causes, (last, total, share, _) = rows
    assert last == "idle in all" and causes, proc.stdout
    assert {c[0] for c in causes} <= set(CAUSE_NAMES)
    seconds = [float(c[1].split()[0]) for c in causes]
    idle = float(total.split()[0])
    assert sum(seconds) == pytest.approx(idle, abs=0.005 * len(seconds) + 1e-9), proc.stdout
    assert idle + held == pytest.approx(wall, rel=0.02, abs=0.1), proc.stdout
    assert float(share.split()[0]) == pytest.approx(idle / wall * 100, abs=0.11)
    assert "build" in {c[0] for c in causes} or "start" in {c[0] for c in causes}, proc.stdout
