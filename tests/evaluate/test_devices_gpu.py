"""On a box with two or more CUDA GPUs (skipped elsewhere): a scripted search on `--gpus 0,1`
spreads its variants over both GPUs, every verdict names the GPU that measured it, and each GPU
has its own torch.compile baseline."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from engine.evaluate.host.evaluator import LocalEvaluator
from engine.problems import load_problem
from tests.conftest import run_ktree
from tests.evaluate.helpers import RENDEZVOUS

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]


def test_two_gpus_evaluate_at_the_same_time(tmp_path: Path):
    softmax = load_problem("softmax")
    a, b = str(tmp_path / "a-started"), str(tmp_path / "b-started")
    sources = [RENDEZVOUS.format(mine=a, other=b), RENDEZVOUS.format(mine=b, other=a)]
    cost = softmax.cost("cuda")  # as the search passes it

    async def go() -> list:
        evaluator = LocalEvaluator("cuda", gpus=[0, 1], isolation="basic", eval_timeout=180)
        try:
            return list(await asyncio.gather(*(evaluator.evaluate(
                evaluator.job(softmax.path, s, softmax.sizes_for("cuda"), flops=cost.flops, bytes=cost.bytes))
                for s in sources)))
        finally:
            await evaluator.close()

    verdicts = asyncio.run(go())
    assert [v.status for v in verdicts] == ["incorrect", "incorrect"], [v.log for v in verdicts]
    assert sorted(v.gpu["slot"] for v in verdicts) == ["gpu0", "gpu1"]
    assert all(v.gpu["name"] and v.gpu["cuda"] and v.gpu["torch"] for v in verdicts)
    uuids = [v.gpu["uuid"] for v in verdicts]
    assert None in uuids or uuids[0] != uuids[1]


def test_scripted_search_on_two_gpus(tmp_path: Path):
    db = tmp_path / "k.db"
    proc = run_ktree("run", "softmax", "--provider", "scripted", "--backend", "cuda", "--headless",
                     "--json", "--rounds", "1", "--ideas", "3", "--variants", "2", "--gpus", "0,1",
                     "--db", str(db), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT device, verdict FROM evaluations").fetchall()
        [config] = conn.execute("SELECT config FROM sessions").fetchone()
    assert json.loads(config)["placement"]["gpus"] == [0, 1]  # a resume uses them again
    measured = [json.loads(v) for _, v in rows if json.loads(v).get("time_ms") is not None]
    by_gpu: dict[str, list[dict]] = defaultdict(list)
    for v in measured:
        by_gpu[v["gpu"]["slot"]].append(v)
    assert set(by_gpu) == {"gpu0", "gpu1"}, {d for d, _ in rows}  # both GPUs measured variants
    assert {d.split(":")[0] for d, _ in rows if ":" in d} <= {"gpu0", "gpu1"}
    assert by_gpu["gpu0"][0]["gpu"]["index"] == 0 and by_gpu["gpu1"][0]["gpu"]["index"] == 1
    for verdicts in by_gpu.values():  # one torch.compile baseline per GPU, from that GPU
        assert len({v["ref_compile_ms"] for v in verdicts}) == 1
