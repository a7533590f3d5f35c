"""The headless printer: one line per event, then a summary. A subscriber like the TUI."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from engine.domain import counted
from engine.problems import DEGENERATE_LINE
from engine.record.events import (
    BudgetReached,
    CommandApplied,
    Event,
    LLMCallDone,
    NodeAdded,
    NodeUpdated,
    ProfileTaken,
    Progress,
    RoundDone,
    SessionDone,
    SessionStarted,
    VerdictReady,
)
from engine.record.report import fmt_ms, fmt_x, format_verdict, profile_line


class HeadlessPrinter:
    def __init__(self, out: TextIO | None = None, quiet: bool = False):
        self.out = out or (sys.stderr if quiet else sys.stdout)
        self.t0 = time.monotonic()
        self._device_waits: dict[str, str | None] = {}  # device name -> what it last waited for

    def _line(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {text}", file=self.out, flush=True)

    def __call__(self, event: Event) -> None:
        if isinstance(event, SessionStarted):
            mode = "SCRIPTED (offline canned answers, no LLM)" if event.scripted else event.provider
            sizes = ", ".join(f"{k}={v}" for k, v in event.sizes.items())
            resumed = "resumed " if event.resumed else ""
            self._line(f"{resumed}session {event.session_id}: {event.problem} on {event.backend}"
                       f" [{sizes}] {event.cost} — provider {mode}")
            if event.backend == "cpu":
                self._line("cpu backend: C++ kernels against the CPU reference at the CPU size preset")
            if event.config.get("degenerate"):
                self._line(f"problem {DEGENERATE_LINE}")
        elif isinstance(event, NodeAdded):
            n = event.node
            label = f"idea \"{n.title}\"" if n.kind == "idea" else n.kind
            self._line(f"node {n.id} {label} added (round {n.round}, parent {n.parent_id}): {n.status}")
        elif isinstance(event, NodeUpdated):
            n = event.node
            title = f" \"{n.title}\"" if n.kind == "idea" and n.status == "ok" else ""
            marks = "".join(m for m, on in ((" pinned", n.pinned), (" pruned", n.pruned)) if on)
            why = f": {n.title + ': ' if n.kind == 'idea' and n.title else ''}{n.text.splitlines()[0]}" \
                if n.status == "failed" and n.text else ""
            self._line(f"node {n.id}{title} {n.status}{marks}{why}")
        elif isinstance(event, VerdictReady):
            self._line(f"node {event.node.id} verdict: {format_verdict(event.verdict)}")
        elif isinstance(event, ProfileTaken):
            self._line(f"node {event.node.id} profiled ({event.reason}): {profile_line(event.verdict.profile)}")
        elif isinstance(event, LLMCallDone) and event.status != "ok":
            self._line(f"llm {event.purpose} call {event.call_id} ({event.model}) {event.status}"
                       f" after {event.latency_s:.1f} s, {counted(event.attempts, 'attempt')}: {event.error}")
        elif isinstance(event, LLMCallDone):
            self._line(f"llm {event.purpose} call {event.call_id} ({event.model}) {event.status}:"
                       f" {event.input_tokens} in / {event.output_tokens} out tokens,"
                       f" ${event.cost_usd:.4f}, {event.latency_s:.2f} s")
        elif isinstance(event, RoundDone):
            nxt = "the last round" if event.last else f"next parents {list(event.parent_ids)}"
            self._line(f"round {event.round} done: best {fmt_x(event.best_speedup)}, {nxt},"
                       f" {event.profiles} profile{'' if event.profiles == 1 else 's'} taken")
            for tie in event.ties:
                self._line(f"round {event.round} {tie}")
        elif isinstance(event, BudgetReached):
            self._line(f"{event.reason}: no new work starts, work in flight finishes")
        elif isinstance(event, CommandApplied):
            nodes = f" (nodes {', '.join(map(str, event.node_ids))})" if event.node_ids else ""
            self._line(f"command {event.command_id} {event.kind} applied{nodes}")
        elif isinstance(event, Progress):
            for d in event.devices:  # a line when a device starts waiting for another process
                waiting = d.get("waiting_for")
                if waiting and waiting != self._device_waits.get(d["name"]):
                    self._line(f"waiting for {waiting}")
                self._device_waits[d["name"]] = waiting
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
            print(f"  best: node {best['node_id']} \"{best['idea']}\" {fmt_ms(best['time_ms'])}"
                  f" vs eager {fmt_ms(best['ref_eager_ms'])} = {fmt_x(best['speedup_eager'])}", file=out)
        else:
            print("  best: no correct variant", file=out)
        llm = s.get("llm") or {}
        if llm:
            print(f"  llm: {llm['calls']} calls, {llm['input_tokens']} in / {llm['output_tokens']} out /"
                  f" {llm['reasoning_tokens']} reasoning tokens, ${llm['cost_usd']:.4f}", file=out)
        if s.get("stop_reason"):
            print(f"  stopped early: {s['stop_reason']}", file=out)
        print(f"  elapsed {s['elapsed_s']:.1f} s", file=out)


class SuiteLinePrinter:
    """A suite's problem, headless: a line when its session starts and ends, per verdict, and per
    failed LLM call, each naming the problem (a suite's lines interleave)."""

    def __init__(self, problem: str, out: TextIO | None = None):
        self.problem = problem
        self.out = out or sys.stdout
        self.t0 = time.monotonic()

    def _line(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {self.problem}: {text}", file=self.out, flush=True)

    def __call__(self, event: Event) -> None:
        if isinstance(event, SessionStarted):
            self._line(f"{'resumed ' if event.resumed else ''}session {event.session_id} on {event.backend}")
            if event.config.get("degenerate"):
                self._line(f"problem {DEGENERATE_LINE}")
        elif isinstance(event, VerdictReady):
            self._line(f"node {event.node.id} {format_verdict(event.verdict).splitlines()[0]}")
        elif isinstance(event, LLMCallDone) and event.status != "ok":
            self._line(f"llm {event.purpose} call {event.call_id} failed: {event.error}")
        elif isinstance(event, BudgetReached):
            self._line(f"{event.reason}: no new work starts")
        elif isinstance(event, SessionDone):
            best = (event.summary.get("best") or {}).get("speedup_eager")
            self._line(f"session {event.session_id} {event.status}, best {fmt_x(best)}")
