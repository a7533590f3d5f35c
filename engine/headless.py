"""The headless printer: one line per event, then a summary. A subscriber like the TUI."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import Any, TextIO

from engine.events import (
    Event,
    LLMCallDone,
    NodeAdded,
    NodeUpdated,
    RoundDone,
    SessionDone,
    SessionStarted,
    VerdictReady,
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g} ms"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_verdict(v: dict[str, Any]) -> str:
    """A verdict in one or two lines (status, error, times, speedup, first log line)."""
    parts = [v["status"]]
    if v.get("max_abs_err") is not None:
        parts.append(f"max abs err {v['max_abs_err']:.3g}")
    if v.get("time_ms") is not None:
        parts.append(f"{_ms(v['time_ms'])} (p10 {_ms(v.get('time_p10_ms'))},"
                     f" p90 {_ms(v.get('time_p90_ms'))})")
    if v.get("ref_eager_ms") is not None:
        parts.append(f"eager {_ms(v['ref_eager_ms'])}")
    if v.get("speedup_eager") is not None:
        parts.append(f"speedup {_x(v['speedup_eager'])}")
    line = ", ".join(parts)
    for flag in v.get("flags") or []:
        line += f"\n    flag: {flag[:200]}"
    if v["status"] not in ("correct", "flagged") and v.get("log"):
        first = next((ln for ln in reversed(v["log"].strip().splitlines()) if ln.strip()), "")
        line += f"\n    {first[:200]}"
    return line


def format_session_row(row: dict[str, Any]) -> str:
    started = datetime.fromtimestamp(row["created_at"]).strftime("%Y-%m-%d %H:%M")
    best = _x(row.get("best_speedup"))
    return (f"#{row['id']:<4} {row['problem']:<14} {row['backend']:<4} {row['provider']:<10}"
            f" {started}  {row.get('variants', 0):>3} variants  best {best:>7}  {row['status']}")


def session_table(session: dict[str, Any], variants: list[dict[str, Any]]) -> str:
    """A session's variants as a markdown table, with a header line naming what ran where."""
    sizes = ", ".join(f"{k}={v}" for k, v in session["sizes"].items())
    device = next((v["device"] for v in variants if v.get("device")), session["backend"])
    lines = [
        f"Session {session['id']}: {session['problem']} on {device} [{sizes}],"
        f" provider {session['provider']}, {session['status']}, best {_x(session.get('best_speedup'))}",
        "",
        "| variant | round | idea | status | ms | eager ms | speedup vs eager | max abs err |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v in variants:
        err = "-" if v.get("max_abs_err") is None else f"{v['max_abs_err']:.2g}"
        lines.append(
            f"| {v['node']} | {v['round']} | {v['idea']} | {v['status']} | {_num(v.get('time_ms'))}"
            f" | {_num(v.get('ref_eager_ms'))} | {_x(v.get('speedup_eager'))} | {err} |"
        )
    return "\n".join(lines)


def problems_table(rows: list[dict[str, Any]], backend: str, device: str) -> str:
    """`ktree problems`: one row a problem, at the sizes this machine's backend runs; reference
    times as cached for this device."""
    preset = " (the CPU size presets)" if backend == "cpu" else ""
    lines = [f"Problems on {backend}{preset}; reference times measured on {device}"
             " (`ktree bench timing` fills them in)", "",
             "| name | level | sizes | FLOPs | bytes | eager ms | torch.compile ms |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        sizes = ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
        cost = r["cost"]
        est = " (est.)" if cost.estimated else ""
        lines.append(f"| {r['name']} | {r['level'] or '-'} | {sizes} | {_sci(cost.flops)}{est} |"
                     f" {_sci(cost.bytes)}{est} | {_num(r['eager_ms'])} | {_num(r['compile_ms'])} |")
    return "\n".join(lines)


def reference_table(rows: list[dict[str, Any]]) -> str:
    """`ktree bench timing`: eager and torch.compile times of each reference."""
    lines = ["| problem | device | sizes | eager ms | torch.compile ms | compile/eager | note |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        sizes = ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
        ratio = (f"{r['compile_ms'] / r['eager_ms']:.2f}" if r.get("compile_ms") and r.get("eager_ms")
                 else "-")
        note = (r.get("error") or r.get("log") or "").strip().splitlines()
        lines.append(f"| {r['name']} | {r.get('device', '-')} | {sizes} | {_num(r.get('eager_ms'))} |"
                     f" {_num(r.get('compile_ms'))} | {ratio} | {note[-1][:80] if note else ''} |")
    return "\n".join(lines)


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


class HeadlessPrinter:
    def __init__(self, out: TextIO | None = None, quiet: bool = False):
        self.out = out or (sys.stderr if quiet else sys.stdout)
        self.t0 = time.monotonic()

    def _line(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {text}", file=self.out, flush=True)

    def __call__(self, event: Event) -> None:
        if isinstance(event, SessionStarted):
            mode = "SCRIPTED (offline canned answers, no LLM)" if event.scripted else event.provider
            sizes = ", ".join(f"{k}={v}" for k, v in event.sizes.items())
            self._line(f"session {event.session_id}: {event.problem} on {event.backend}"
                       f" [{sizes}] {event.cost} — provider {mode}")
            if event.backend == "cpu":
                self._line("cpu backend: C++ kernels against the CPU reference at the CPU size preset")
        elif isinstance(event, NodeAdded):
            n = event.node
            label = f"idea \"{n.title}\"" if n.kind == "idea" else n.kind
            self._line(f"node {n.id} {label} added (round {n.round}, parent {n.parent_id}): {n.status}")
        elif isinstance(event, NodeUpdated):
            self._line(f"node {event.node.id} {event.node.status}")
        elif isinstance(event, VerdictReady):
            self._line(f"node {event.node.id} verdict: {format_verdict(event.verdict)}")
        elif isinstance(event, LLMCallDone):
            self._line(f"llm {event.purpose} call {event.call_id} ({event.model}) {event.status}:"
                       f" {event.input_tokens} in / {event.output_tokens} out tokens,"
                       f" ${event.cost_usd:.4f}, {event.latency_s:.2f} s")
        elif isinstance(event, RoundDone):
            self._line(f"round {event.round} done: best {_x(event.best_speedup)},"
                       f" next parents {list(event.parent_ids)}")
        elif isinstance(event, SessionDone):
            self._line(f"session {event.session_id} {event.status}")

    def print_summary(self, s: dict[str, Any]) -> None:
        out = self.out
        print("", file=out)
        scripted = " (scripted provider: canned answers, no LLM)" if s.get("scripted") else ""
        print(f"Session {s['session_id']} — {s['problem']} on {s['backend']}: {s['status']}{scripted}",
              file=out)
        counts = ", ".join(f"{k} {v}" for k, v in sorted(s["by_status"].items()))
        print(f"  rounds {s['rounds']}, ideas {s['ideas']}, variants {s['variants']} ({counts})",
              file=out)
        best = s.get("best")
        if best:
            print(f"  best: node {best['node_id']} \"{best['idea']}\" {_ms(best['time_ms'])}"
                  f" vs eager {_ms(best['ref_eager_ms'])} = {_x(best['speedup_eager'])}", file=out)
        else:
            print("  best: no correct variant", file=out)
        llm = s.get("llm") or {}
        if llm:
            print(f"  llm: {llm['calls']} calls, {llm['input_tokens']} in / {llm['output_tokens']} out /"
                  f" {llm['reasoning_tokens']} reasoning tokens, ${llm['cost_usd']:.4f}", file=out)
        if s.get("stop_reason"):
            print(f"  stopped early: {s['stop_reason']}", file=out)
        print(f"  elapsed {s['elapsed_s']:.1f} s", file=out)
