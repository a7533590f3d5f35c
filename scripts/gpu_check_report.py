"""The GPU check's report: `python3 scripts/gpu_check_report.py RAW OUT` writes OUT/gpu-check.md
(one table per stage) and OUT/gpu-check.json from what scripts/gpu-check left in RAW so far. Run
after every step, so a cut run still reports what passed. Standard library only (sqlite3 for the
search DB: profiles per round, round-2 idea prompts)."""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def steps(raw: Path) -> list[dict[str, str]]:
    rows = []
    for line in (raw / "steps.tsv").read_text().splitlines() if (raw / "steps.tsv").exists() else []:
        name, rc, seconds, *note = line.split("\t") + [""]
        rows.append({"step": name, "rc": rc, "seconds": seconds, "note": note[0] if note else ""})
    return rows


def tests(xml: Path) -> list[dict[str, str]]:
    if not xml.exists():
        return []
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:
        return []
    out = []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            child = case.find(kind)
            if child is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                message = (child.get("message") or "").splitlines()[0][:160] if child.get("message") else ""
                break
        out.append({"test": f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}",
                    "outcome": outcome, "seconds": case.get("time", ""), "message": message})
    return out


def searches(raw: Path) -> list[dict[str, Any]]:
    """Per session of the search DB (read-only; what a cut run left is there too): shape, status,
    variants by status, best speedup, profiles per round, the variants' held seconds (median) and
    round-2 idea prompts that carry a diagnosis."""
    db = raw / "gpu.db"
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    out = []
    try:
        sessions = conn.execute("SELECT id, problem, status, config FROM sessions ORDER BY id").fetchall()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return []
    for s in sessions:
        config = json.loads(s["config"] or "{}")
        by_status: dict[str, int] = {}
        speedups, held = [], []
        evaluations = conn.execute("SELECT status, speedup, verdict FROM evaluations WHERE session_id = ?",
                                   (s["id"],))
        for e in evaluations:
            by_status[e["status"]] = by_status.get(e["status"], 0) + 1
            if e["status"] == "correct" and e["speedup"]:
                speedups.append(e["speedup"])
            total = ((json.loads(e["verdict"] or "{}").get("timing") or {}).get("held_s") or {}).get("total")
            if total is not None and e["status"] in ("correct", "flagged"):
                held.append(total)
        profiles: dict[int, int] = {}
        if "profiles" in tables:
            for r in conn.execute("SELECT round, COUNT(*) AS n FROM profiles WHERE session_id = ?"
                                  " GROUP BY round", (s["id"],)):
                profiles[r["round"]] = r["n"]
        # Idea prompts for a parent that is a variant (not the reference): round 2 and later. The
        # engine records an idea call on the idea node it fills, whose parent is the variant asked
        # about (a record made on the variant itself counts too).
        prompts = [r[0] for r in conn.execute(
            "SELECT c.prompt FROM llm_calls c JOIN nodes n ON n.id = c.node_id"
            " LEFT JOIN nodes p ON p.id = n.parent_id WHERE c.session_id = ? AND c.purpose = 'idea'"
            " AND (n.kind = 'variant' OR (n.kind = 'idea' AND p.kind = 'variant'))", (s["id"],))]
        out.append({"session": s["id"], "problem": s["problem"],
                    "language": ",".join(config.get("languages") or []),
                    "shape": f"{config.get('rounds')}x{config.get('ideas')}x{config.get('variants')}",
                    "top": config.get("top"), "status": s["status"], "variants": sum(by_status.values()),
                    "by_status": by_status, "best_speedup": max(speedups) if speedups else None,
                    "held_s_median": round(statistics.median(held), 3) if held else None,
                    "profiles_per_round": profiles, "round2_idea_prompts": len(prompts),
                    "round2_prompts_with_diagnosis": sum("iagnos" in p for p in prompts)})
    conn.close()
    return out


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def verdicts_lines(data: Any, note: str) -> list[str]:
    """`ktree bench verdicts --json` (engine/bench/verdicts.py): its rows as a table where it has
    them, else its summary; where it wrote nothing, its log's last line."""
    if data is None:
        return [f"\n## bench verdicts\n{note}"] if note else []
    lines = ["\n## bench verdicts"]
    rows = data.get("rows") if isinstance(data, dict) else data if isinstance(data, list) else None
    if isinstance(data, dict):
        summary = {k: v for k, v in data.items() if k != "rows" and not isinstance(v, (list, dict))}
        if summary:
            lines.append(", ".join(f"{k}: {v}" for k, v in summary.items()))
    if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
        keys = [k for k in rows[0] if not isinstance(rows[0][k], (list, dict))][:8]
        lines += ["| " + " | ".join(keys) + " |", "| --- " * len(keys) + "|"]
        lines += ["| " + " | ".join(str(r.get(k, ""))[:60] for k in keys) + " |" for r in rows]
    return lines


def concurrent_lines(data: Any) -> list[str]:
    """scripts/concurrent-eval's report: per evaluation, the status together and alone, its peak
    GPU memory, an out-of-memory; the GPU's most used memory while together."""
    if not isinstance(data, dict):
        return []
    lines = ["\n## Concurrent evaluations (ktree eval processes at once, then alone)",
             f"{data.get('processes')} processes together in {data.get('together_s')} s, alone in"
             f" {data.get('alone_s')} s ({data.get('alone_done')} done); status differs:"
             f" {data.get('status_differs')}, crashed: {data.get('crashed')}, out of memory:"
             f" {data.get('out_of_memory')}, GPU memory used at most: {data.get('gpu_peak_used_mib')} MiB",
             "| problem | file | together | alone | ms | alone ms | peak GPU MiB (alone) | check set | oom |",
             "| --- " * 9 + "|"]
    for r in data.get("rows") or []:
        check_set = r.get("check_set") or {}
        placement = check_set.get("placement") or check_set.get("bytes")
        lines.append(f"| {r.get('problem')} | {r.get('file')} | {r.get('status')} | {r.get('alone_status')} |"
                     f" {r.get('time_ms') or ''} | {r.get('alone_ms') or ''} | {r.get('peak_gpu_mib') or ''}"
                     f" ({r.get('alone_peak_gpu_mib') or ''}) | {placement if placement is not None else ''} |"
                     f" {r.get('oom') or ''} |")
    return lines


def idle_lines(pipeline: dict[str, Any]) -> list[str]:
    """`bench pipeline --json`'s idle table (engine.bench.idle: where every idle second of the
    devices went), where the run has one."""
    if not isinstance(pipeline.get("idle"), dict):
        return []
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from engine.bench.idle import idle_table

    return ["", idle_table(pipeline["idle"])]


def main(raw: Path, out: Path) -> None:
    result: dict[str, Any] = {
        "device": (raw / "device.txt").read_text().strip() if (raw / "device.txt").exists() else "",
        "steps": steps(raw), "tests": tests(raw / "pytest.xml"), "slow_tests": tests(raw / "pytest-slow.xml"),
        "prebuild": next((line for line in reversed((raw / "prebuild.log").read_text().splitlines())
                          if line.startswith(("total:", "references:"))), None)
        if (raw / "prebuild.log").exists() else None,
        "searches": searches(raw), "gpu_cost": _json(raw / "gpu-cost.json"),
        "pipeline": _json(raw / "pipeline.json"),
        "scaling": _json(raw / "pipeline-scaling.json"),
        "suite_gpus": _json(raw / "pipeline-suite-gpus.json"),
        "compile": _json(raw / "compile.json"),
        "verdicts": _json(raw / "verdicts.json"),
        "verdicts_note": _last_line(raw / "verdicts.log"),
        "concurrent": _json(raw / "concurrent" / "report.json"),
    }
    lines = [f"# GPU check\n\n{result['device']}\n", "| step | exit | seconds | note |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {s['step']} | {s['rc']} | {s['seconds']} | {s['note']} |" for s in result["steps"]]
    if result["prebuild"]:
        lines.append(f"\nprebuild: {result['prebuild']}")
    for label, rows in (("GPU tests", result["tests"]), ("slow GPU tests", result["slow_tests"])):
        if rows:
            counts: dict[str, int] = {}
            for r in rows:
                counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
            lines += [f"\n## {label}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
                      "| test | outcome | s | message |", "| --- | --- | --- | --- |"]
            lines += [f"| {r['test']} | {r['outcome']} | {r['seconds']} | {r['message']} |" for r in rows]
    if result["searches"]:
        lines += ["\n## Scripted searches", "| session | problem | language | shape | status | variants |"
                  " by status | best x | held s (median) | profiles per round (T) |"
                  " round-2 idea prompts with diagnosis |", "| --- " * 11 + "|"]
        for s in result["searches"]:
            diag = f"{s['round2_prompts_with_diagnosis']}/{s['round2_idea_prompts']}"
            best = f"{s['best_speedup']:.2f}" if s["best_speedup"] else ""
            lines.append(f"| {s['session']} | {s['problem']} | {s['language']} | {s['shape']} | {s['status']} |"
                         f" {s['variants']} | {s['by_status']} | {best} | {s['held_s_median'] or ''} |"
                         f" {s['profiles_per_round']} ({s['top']}) | {diag} |")
    if result["gpu_cost"]:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from engine.bench.gpu_cost import gpu_cost_table

        lines += ["\n## bench gpu-cost", gpu_cost_table(result["gpu_cost"])]
    p = result["pipeline"]
    if p:
        window = p.get("busy_window") or {}
        lines += ["\n## bench pipeline", f"{p.get('problems')} {p.get('llm_latency')} shape {p.get('shape')}:"
                  f" {p.get('variants_per_minute')} variants/min, {p.get('evaluations')} evaluations in"
                  f" {p.get('wall_s')} s; GPU busy {p.get('busy_fraction_of_wall', 0) * 100:.1f} % of the wall,"
                  f" {window.get('busy_fraction', 0) * 100:.1f} % in the window where every problem had work"
                  f" ({window.get('start_s')}-{window.get('end_s')} s)"]
        lines += idle_lines(p)
    if result["scaling"]:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from engine.bench.scaling import format_scaling

        lines += ["\n## One GPU against two (bench pipeline --scaling)", format_scaling(result["scaling"])]
    q = result["suite_gpus"]
    if q:
        per_gpu = "; ".join(f"{d['name']} {d['jobs']}, {d['busy_s']} s,"
                            f" {d['idle_fraction_while_waiting'] * 100:.1f} %" for d in q.get("devices") or [])
        lines += ["\n## A suite of 4 on two GPUs",
                  f"{q.get('problems')} shape {q.get('shape')}: {q.get('status')},"
                  f" {q.get('variants_per_minute')} variants/min, {q.get('evaluations')} evaluations in"
                  f" {q.get('wall_s')} s; GPUs busy {q.get('busy_fraction_of_wall', 0) * 100:.1f} % of the"
                  f" wall; per GPU (evaluations, busy s, idle while variants waited): {per_gpu}"]
        lines += idle_lines(q)
    if result["compile"]:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from engine.bench.compile import compile_table

        lines += ["\n## bench compile", compile_table(result["compile"])]
    lines += verdicts_lines(result["verdicts"], result["verdicts_note"])
    lines += concurrent_lines(result["concurrent"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-check.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "gpu-check.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
