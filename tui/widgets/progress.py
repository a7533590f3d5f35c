"""The progress pane: round, state and elapsed time; queues; tokens and dollars against the budget;
a line per evaluation device; the round's bar; and the best speedup so far, round by round."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from tui.model import IN_FLIGHT, ScreenModel
from tui.widgets.chart import RoundsPlot, Series

TITLE = "progress · best speedup by round"
DEVICE_LINES = 12  # devices listed in full; 3 in a compact layout


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def si(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:g}"


def elapsed_s(model: ScreenModel, now: float) -> float:
    """Seconds the search has run, over all its runs (a resumed session's clock goes on from
    where it stopped): the engine's own count when it sends one, else the count it recorded
    (a session read from the DB), else from this run's start plus the runs before it."""
    info = model.info
    if "elapsed_s" in model.progress:
        return model.progress["elapsed_s"]
    if info.get("run_s") is not None:
        return info["run_s"]
    before = info.get("run_before_s") or 0.0
    if model.status == "running":
        return before + now - info.get("created_at", now)
    return before + (info.get("finished_at") or now) - info.get("created_at", now)


def queue_line(compile_q: int, device: str, gpu_q: int, calls: int, running: int, width: int | None) -> str:
    """The queues and LLM calls in one line that fits `width` (None: the longest words): a wrapped
    line pushed the tokens line out of the pane at 120 columns."""
    now = f" ({running} running)" if running else ""
    forms = [f"compile queue {compile_q} · {device} queue {gpu_q} · LLM calls {calls}{now}",
             f"queues: compile {compile_q} · {device} {gpu_q} · LLM calls {calls}{now}",
             f"queues: compile {compile_q} · {device} {gpu_q} · LLM {calls}{now}",
             f"compile {compile_q} · {device} {gpu_q} · LLM {calls}" + (f"+{running}" if running else "")]
    return next((f for f in forms if width is None or len(f) <= width), forms[-1])


def progress_text(model: ScreenModel, now: float | None = None, compact: bool = False,
                  width: int | None = None) -> tuple[Text, int]:
    """The pane's text (its queue line fitted to `width`), and how many device lines it holds. The
    engine's Progress event says where it stands (round, tokens, devices); without one (a followed
    or past session) the nodes and the session's record do. The queues are always the nodes'."""
    now = time.time() if now is None else now
    cfg = model.info.get("config") or {}
    p = model.progress
    current = max((n.round for n in model.nodes.values()), default=0)
    compile_q, gpu_q = model.queues()  # live or followed alike
    rnd, rounds = p.get("round", current), p.get("rounds", cfg.get("rounds", "?"))
    tokens, cost = p.get("tokens", model.tokens), p.get("cost_usd", model.cost_usd)
    budget_usd = p.get("budget_usd", cfg.get("budget_usd"))
    budget_tokens = p.get("budget_tokens", cfg.get("budget_tokens"))
    elapsed = elapsed_s(model, now)
    paused = model.paused and model.status == "running"  # a search that ended is not paused
    state = "paused" if paused else model.status
    text = Text()
    text.append(f"round {rnd}/{rounds}", style="bold")
    text.append(f" · {state}", style="yellow" if paused else "")
    text.append(f" · {duration(elapsed)}")
    if cfg.get("degenerate"):  # said once, on every screen that shows the search (engine.problems)
        text.append(" · degenerate problem: the reference ignores its inputs", style="bold red")
    text.append("\n")
    device = "GPU" if model.info.get("backend") == "cuda" else "timing"
    text.append(queue_line(compile_q, device, gpu_q, model.llm_calls, p.get("llm_running") or 0, width) + "\n")
    text.append(f"tokens {si(tokens)}{'/' + si(budget_tokens) if budget_tokens else ''}"
                f" · ${cost:.3f}{f'/${budget_usd:g}' if budget_usd else ''}")
    shown = device_lines(text, p.get("devices") or [], elapsed, limit=3 if compact else DEVICE_LINES)
    return text, shown


# What a device handed a variant does before it is held (Device.state()'s `stage`), as the line says it.
STAGES = {"start": "starting its worker", "reference": "setting up the reference",
          "prewarm": "compiling Triton's kernels", "quiet": "waiting for the builds to end"}


def device_lines(text: Text, devices: list[dict[str, Any]], elapsed: float, limit: int) -> int:
    """One line per evaluation device (GPU): busy, idle, waiting for its host lock ("waiting
    for gpu0 (held by pid N, session M)": another process on the host uses it) or what it does
    for the variant it was handed before it is held (STAGES: never "idle" while it works for
    one), evaluations done, utilisation (its busy time over the run's); at most `limit`, then how
    many more. Returns the lines written."""
    width = max((len(d["name"]) for d in devices), default=0)
    for d in devices[:limit]:
        util = min(1.0, d["busy_s"] / elapsed) if elapsed > 0 else 0.0
        waiting = d.get("waiting_for")
        stage = STAGES.get(d.get("stage") or "")
        state = ("down" if not d["alive"] else "busy" if d["busy"] else "waiting" if waiting
                 else "stage" if stage else "idle")
        colour = {"down": "red", "busy": "green", "idle": "dim", "waiting": "yellow", "stage": "yellow"}[state]
        text.append(f"\n{d['name']:<{width}} ")
        label = f"waiting for {waiting}" if state == "waiting" else stage if state == "stage" else state
        text.append(label, style=colour)
        text.append(f" {d['jobs']:>3} jobs {util:>4.0%}" + (f" queue {d['queue']}" if d["queue"] else ""))
    if len(devices) > limit:
        text.append(f"\n+{len(devices) - limit} more devices", style="dim")
    return min(len(devices), limit + 1)


ENDED = frozenset({"finished", "stopped", "failed"})  # a session that runs no more (interrupted resumes)


def round_bar(model: ScreenModel) -> tuple[int, int]:
    """(expected, done) variants of the latest round: the bar under the text. An idea still
    generating counts for the variants it will make; one that failed (no ideas came) for none.
    Once the session has ended its last round is over, whatever it made: the bar is full."""
    cfg = model.info.get("config") or {}
    current = max((n.round for n in model.nodes.values()), default=0)
    variants = done = generating = 0
    for n in model.nodes.values():
        if n.round == current:
            if n.kind == "variant":
                variants += 1
                done += n.status not in IN_FLIGHT
            elif n.kind == "idea" and n.status == "generating":
                generating += 1
    expected = max(variants + generating * int(cfg.get("variants") or 1), 1)
    return expected, expected if model.status in ENDED else done


def best_so_far(best_by_round: dict[int, float]) -> tuple[list[int], list[float]]:
    """The plot's points: each round and the best speedup up to it (never drops)."""
    best, xs, ys = 0.0, [], []
    for r in sorted(best_by_round):
        best = max(best, best_by_round[r])
        xs.append(r)
        ys.append(best)
    return xs, ys


class ProgressPane(Vertical):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = TITLE

    def compose(self) -> ComposeResult:
        yield Static("", id="progress-text")
        yield ProgressBar(id="round-bar", show_eta=False)
        yield RoundsPlot(id="plot")

    def show(self, model: ScreenModel, compact: bool) -> None:
        text, shown = progress_text(model, compact=compact, width=self.content_region.width or None)
        label = self.query_one("#progress-text", Static)
        if shown:  # the pane grows by a line per device (none: the stylesheet's sizes)
            label.styles.height = "auto" if compact else 3 + shown  # compact: the queue line may wrap
            self.styles.height = "auto" if compact else 13 + shown
        label.update(text, layout=bool(shown))
        # the title names the plot only where it is drawn (it was cut to "best speedup by ro…" at 80x24)
        self.border_title = TITLE if self.query_one("#plot").display else "progress"
        total, done = round_bar(model)
        self.query_one("#round-bar", ProgressBar).update(total=total, progress=done)

    def show_plot(self, model: ScreenModel) -> None:
        xs, ys = best_so_far(model.best_by_round)
        self.query_one("#plot", RoundsPlot).show_series([Series(xs, ys)])
