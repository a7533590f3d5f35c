"""A synthetic, deterministic session written straight into a store: what the snapshot tests and
`scripts/bench-tui` open. No LLM, no compiler: every number here is made up (the session says so:
its provider is "synthetic" and the screens mark it SCRIPTED)."""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from engine.record.store import Store

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC: fixed, so screens render the same every run
STATUSES = (["correct"] * 12 + ["incorrect"] * 2 + ["compile_error"] * 2 + ["flagged", "runtime_error",
            "timeout", "crashed"])
IDEAS = ["Fuse max and sum into one pass", "Vectorize the row loop", "Tile rows across threads",
         "Online softmax with rescaling", "Polynomial exp", "Unroll by 16 lanes", "Cache-blocked rows",
         "Avoid the second sweep"]

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

KERNEL = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

constexpr int kTile = {tile};

torch::Tensor softmax_rows(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0), dim = x.size(1);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {{
        float m = -INFINITY, s = 0.0f;
        for (int64_t j = 0; j < dim; ++j) m = std::max(m, xp[r * dim + j]);
        for (int64_t j = 0; j < dim; j += kTile)
            for (int64_t k = j; k < std::min<int64_t>(dim, j + kTile); ++k)
                s += std::exp(xp[r * dim + k] - m);
        for (int64_t j = 0; j < dim; ++j) yp[r * dim + j] = std::exp(xp[r * dim + j] - m) / s;
    }}
    return y;
}}
"""

ext = load_inline(name="ktree_fake_{name}", cpp_sources=cpp_source, functions=["softmax_rows"],
                  extra_cflags=["-O{opt}"])


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.softmax_rows(x)
'''


def _verdict(status: str, rng: random.Random, ref_ms: float) -> dict[str, Any]:
    v: dict[str, Any] = {"status": status, "flags": [], "max_abs_err": None, "time_ms": None,
                         "time_p10_ms": None, "time_p90_ms": None, "ref_eager_ms": ref_ms,
                         "ref_compile_ms": round(ref_ms * 0.8, 4), "speedup_eager": None,
                         "speedup_compile": None, "sol_fraction": None, "log": "",
                         "backend": "cpu", "device": "synthetic CPU", "sizes": {"batch_size": 4096}}
    if status in ("correct", "flagged", "incorrect"):
        t = round(ref_ms / rng.uniform(0.4, 3.5), 4)
        v.update(max_abs_err=(rng.uniform(1e-7, 1e-5) if status != "incorrect" else 0.37),
                 time_ms=t, time_p10_ms=round(t * 0.97, 4), time_p90_ms=round(t * 1.05, 4))
        if status != "incorrect":
            v.update(speedup_eager=round(ref_ms / t, 3), speedup_compile=round(ref_ms * 0.8 / t, 3),
                     sol_fraction=round(rng.uniform(0.05, 0.6), 3))
    if status == "flagged":
        v["flags"] = ["speedup over 10x: marked for review"]
    if status == "compile_error":
        v["log"] = "error: 'kTil' was not declared in this scope\n    for (int64_t j = 0; j < dim; j += kTil)"
    if status == "runtime_error":
        v["log"] = "RuntimeError: x must be contiguous"
    if status in ("timeout", "crashed"):
        v["log"] = f"the evaluation {'ran past 60 s' if status == 'timeout' else 'died of SIGSEGV'}"
    return v


async def write_fake_session(store: Store, n_nodes: int = 60, *, seed: int = 0, ideas: int = 2,
                             variants: int = 2, top: int = 2, status: str = "finished",
                             t0: float = T0) -> int:
    """Write a finished session of about `n_nodes` nodes (root, ideas, variants, round after round)
    with evaluations and LLM calls; return its id."""
    rng = random.Random(seed)
    ref_ms = 2.0
    cfg = {"rounds": 0, "ideas": ideas, "variants": variants, "top": top, "budget_usd": 1.0,
           "budget_tokens": None, "strategy": "tree"}
    cur = await store.conn.execute(
        "INSERT INTO sessions(problem, problem_path, backend, strategy, provider, models, config, sizes,"
        " status, created_at, finished_at, ref_ms, pid, heartbeat_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        ("softmax", "problems/level1/softmax.py", "cpu", "tree", "scripted",
         json.dumps(["scripted:synthetic"]), json.dumps(cfg), json.dumps({"batch_size": 4096, "dim": 4096}),
         status, t0, None if status == "running" else t0 + 600 + n_nodes, ref_ms,
         # "running": this process stands in for its engine (alive, beating now)
         os.getpid() if status == "running" else None, time.time() if status == "running" else None))
    sid = cur.lastrowid
    assert sid is not None
    rows = await store.conn.execute_fetchall("SELECT COALESCE(MAX(id), 0) FROM nodes")
    next_id = rows[0][0] + 1
    nodes: list[tuple] = []
    evals: list[tuple] = []
    calls: list[tuple] = []
    t = t0

    def node(parent: int | None, kind: str, rnd: int, title: str, text: str, source: str, st: str,
             speedup: float | None = None, time_ms: float | None = None) -> int:
        nonlocal next_id, t
        t += 0.5
        nid = next_id
        next_id += 1
        nodes.append((nid, sid, parent, kind, rnd, title, text, source, st, "llm", speedup, time_ms, t, t))
        return nid

    def call(node_id: int, purpose: str, prompt: str, reply: str) -> None:
        calls.append((sid, node_id, "scripted", "synthetic", purpose, prompt, reply, 1200, 800, 0,
                      0.0021, 1.5, 1, "ok", None, t))

    root = node(None, "root", 0, "Softmax over rows", "", REFERENCE, "reference")
    parents = [(root, REFERENCE)]
    best: tuple[float, int] | None = None
    total = 1
    r = 0
    while total < n_nodes:
        r += 1
        scored: list[tuple[float, int, str]] = []
        for parent, _ in parents:
            titles = [IDEAS[(parent + i + r) % len(IDEAS)] for i in range(ideas)]
            call(parent, "idea", f"Propose {ideas} ideas to speed up node {parent}.",
                 "\n".join(f"{i + 1}. {title}" for i, title in enumerate(titles)))
            for title in titles:
                idea = node(parent, "idea", r, title, f"{title}: a synthetic idea for round {r}.", "", "ok")
                total += 1
                for _ in range(variants):
                    st = STATUSES[rng.randrange(len(STATUSES))]
                    source = KERNEL.format(tile=rng.choice([8, 16, 32, 64]), name=next_id,
                                           opt=rng.choice([2, 3]))
                    v = _verdict(st, rng, ref_ms)
                    vid = node(idea, "variant", r, title, "", source, st, v["speedup_eager"], v["time_ms"])
                    total += 1
                    v["log"] = v["log"] or f"evaluated node {vid}"
                    evals.append((vid, sid, st, v["max_abs_err"], v["time_ms"], ref_ms, v["speedup_eager"],
                                  "cpu", "synthetic CPU", json.dumps(v["sizes"]), json.dumps(v), t))
                    call(vid, "implement", f"Implement idea {title!r} for node {parent}.",
                         f"```python\n{source}```")
                    if st == "correct" and v["speedup_eager"]:
                        scored.append((v["speedup_eager"], vid, source))
                        if best is None or v["speedup_eager"] > best[0]:
                            best = (v["speedup_eager"], vid)
        scored.sort(reverse=True)
        if scored:
            parents = [(vid, src) for _, vid, src in scored[:top]]
    await store.conn.executemany(
        "INSERT INTO nodes(id, session_id, parent_id, kind, round, title, text, source, status, origin,"
        " speedup, time_ms, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", nodes)
    await store.conn.executemany(
        "INSERT INTO evaluations(node_id, session_id, status, max_abs_err, time_ms, ref_ms, speedup, backend,"
        " device, sizes, verdict, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", evals)
    await store.conn.executemany(
        "INSERT INTO llm_calls(session_id, node_id, provider, model, purpose, prompt, reply, input_tokens,"
        " output_tokens, reasoning_tokens, cost_usd, latency_s, attempts, status, error, created_at)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", calls)
    await store.conn.execute("UPDATE sessions SET config = ? WHERE id = ?",
                             (json.dumps({**cfg, "rounds": r}), sid))
    if best is not None:
        await store.conn.execute("UPDATE sessions SET best_node_id = ?, best_speedup = ? WHERE id = ?",
                                 (best[1], best[0], sid))
    await store.conn.commit()
    return sid
