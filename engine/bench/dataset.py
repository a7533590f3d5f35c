"""`ktree bench dataset`: export N synthetic variant rows (every table and view, Parquet and
JSONL) and report the seconds and the peak memory. Each export runs in a child process of its own,
so its peak resident set is its own; a child that only imports gives the floor, and a tenth of the
rows beside the full count shows whether memory grows with the rows (it should not: streamed)."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.record.store import SCHEMA, SCHEMA_VERSION

_KERNEL = '''import torch
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
// variant {n}: block {block}, unroll {unroll}
torch::Tensor forward(torch::Tensor x) {{
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); i += {block}) {{
        for (int u = 0; u < {unroll}; ++u) o[i + u] = in[i + u] * {scale}f;
    }}
    return out;
}}
"""

ext = load_inline("v{n}", cpp_sources=cpp_source, functions=["forward"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.forward(x)
'''
_STATUSES = ("correct",) * 6 + ("incorrect", "compile_error", "runtime_error", "flagged")


def synthetic_db(path: Path, rows: int, sessions: int, seed: int = 0) -> None:
    """A ktree DB of `sessions` finished sessions holding `rows` variants in all: two rounds,
    four variants an idea, the code, prompts, replies and verdicts of a real search's size."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    reference = ("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                 "        return x * 2\n")
    per = [rows // sessions + (1 if i < rows % sessions else 0) for i in range(sessions)]
    n = 0
    for s, count in enumerate(per):
        now = time.time()
        sid = conn.execute(
            "INSERT INTO sessions(problem, problem_path, backend, strategy, provider, models, config, sizes,"
            " status, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (f"problem_{s % 50}", f"problems/p{s % 50}.py", "cuda", "tree", "openai", '["openai:o3"]',
             json.dumps({"atol": 0.01, "rtol": 0.01, "precision": None}), '{"n": 4096}', "finished", now),
        ).lastrowid
        root = conn.execute("INSERT INTO nodes(session_id, parent_id, kind, round, title, source, status,"
                            " created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                            (sid, None, "root", 0, "x * 2", reference, "reference", now, now)).lastrowid
        parent, idea = root, None
        for i in range(count):
            if i % 4 == 0:
                idea = conn.execute(
                    "INSERT INTO nodes(session_id, parent_id, kind, round, title, text, status, created_at,"
                    " updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                    (sid, parent, "idea", 1 + (i >= count // 2), f"idea {i // 4}", "tile it " * 40, "ok",
                     now, now)).lastrowid
                conn.execute("INSERT INTO llm_calls(session_id, node_id, provider, model, purpose, prompt,"
                             " reply, status, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                             (sid, idea, "openai", "o3", "idea", "ideas please " * 400,
                              json.dumps([{"title": f"idea {i // 4}", "description": "tile it"}]), "ok", now))
            n += 1
            status = rng.choice(_STATUSES)
            speedup = rng.lognormvariate(0, 0.6) if status == "correct" else None
            source = _KERNEL.format(n=n, block=rng.choice((64, 128, 256)), unroll=rng.randint(1, 8),
                                    scale=rng.random())
            vid = conn.execute(
                "INSERT INTO nodes(session_id, parent_id, kind, round, title, source, status, language,"
                " speedup, time_ms, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (sid, idea, "variant", 1, f"idea {i // 4}", source, status, "cuda", speedup,
                 1 / speedup if speedup else None, now, now)).lastrowid
            if i == count // 2 and speedup:
                parent = vid
            conn.execute("INSERT INTO llm_calls(session_id, node_id, provider, model, purpose, prompt, reply,"
                         " input_tokens, output_tokens, reasoning_tokens, cost_usd, status, created_at)"
                         " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         (sid, vid, "openai", "o3", "implement", "implement this idea " * 300,
                          f"Here it is:\n```python\n{source}```\n", 1500, 900, 4000, 0.05, "ok", now))
            verdict = {"status": status, "backend": "cuda", "device": "NVIDIA H100", "flags": [],
                       "time_ms": 1 / speedup if speedup else None, "ref_eager_ms": 1.0,
                       "speedup_eager": speedup, "speedup_lo": speedup and speedup * 0.97,
                       "speedup_hi": speedup and speedup * 1.03, "log": "3 trials passed " * 20,
                       "gpu": {"name": "NVIDIA H100"}, "sizes": {"n": 4096}}
            conn.execute("INSERT INTO evaluations(node_id, session_id, status, time_ms, ref_ms, speedup,"
                         " backend, device, sizes, verdict, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                         (vid, sid, status, verdict["time_ms"], 1.0, speedup, "cuda", "gpu0: NVIDIA H100",
                          '{"n": 4096}', json.dumps(verdict), now))
    conn.commit()
    conn.close()


_CHILD = """
import json, resource, sys, time
from pathlib import Path
from engine.dataset.writer import VIEWS, ExportOptions, run
from engine.dataset.source import Selection
report = {"seconds": 0.0}
if sys.argv[1] != "import":
    t = time.perf_counter()
    m = run(Path(sys.argv[1]), ExportOptions(Selection(), views=VIEWS), Path(sys.argv[2]))
    report = {"seconds": time.perf_counter() - t, "rows": m["rows"]}
report["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes
print(json.dumps(report))
"""


def _child(*argv: str) -> dict[str, Any]:
    """Run `_CHILD`: its report, with its own peak resident set (MB)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    if proc.returncode != 0:
        raise RuntimeError(f"the export child failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def dataset_bench(rows: int = 10_000, sessions: int = 20) -> dict[str, Any]:
    """Export `rows` and a tenth of them; seconds and peak memory of each, and of an import alone."""
    out: dict[str, Any] = {"rows": rows, "sessions": sessions, "runs": []}
    with tempfile.TemporaryDirectory(prefix="ktree-bench-dataset-") as tmp:
        base = _child("import")
        out["import_peak_mb"] = base["peak_mb"]
        for n in sorted({max(1, rows // 10), rows}):
            db = Path(tmp) / f"{n}.db"
            made = time.perf_counter()
            synthetic_db(db, n, max(1, min(sessions, n)))
            made = time.perf_counter() - made
            report = _child(str(db), str(Path(tmp) / f"out-{n}"))
            size = sum(f.stat().st_size for f in (Path(tmp) / f"out-{n}").iterdir())
            out["runs"].append({"variants": n, "db_mb": db.stat().st_size / 2**20, "made_s": made,
                                "seconds": report["seconds"], "peak_mb": report["peak_mb"],
                                "out_mb": size / 2**20, "rows": report["rows"]})
    return out


def dataset_table(result: dict[str, Any]) -> str:
    lines = [f"dataset export: every table and view, Parquet + JSONL, {result['sessions']} sessions;"
             f" a child that only imports peaks at {result['import_peak_mb']:.0f} MB",
             "", f"{'variants':>9} {'DB MB':>7} {'export s':>9} {'peak MB':>8} {'out MB':>7}  rows"]
    for r in result["runs"]:
        rows = ", ".join(f"{k} {v if isinstance(v, int) else sum(v.values())}" for k, v in r["rows"].items())
        lines.append(f"{r['variants']:>9} {r['db_mb']:>7.1f} {r['seconds']:>9.2f} {r['peak_mb']:>8.0f}"
                     f" {r['out_mb']:>7.1f}  {rows}")
    return "\n".join(lines)
