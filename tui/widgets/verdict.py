"""The verdict pane: the selected node's status and, for an evaluated variant, its numbers."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from engine.domain import EAGER_BESIDE, LIBRARY_EXCLUDED, Node, library_line, shown_notes
from engine.evaluate import BOUND_LABELS, TOP_KERNELS, Verdict, device_label, is_timing_flag
from tui.widgets.code import fmt_num
from tui.widgets.status import glyph, style

LOG_LINES = 8  # the tail of the evaluation log shown under the numbers
BAR = 10  # cells in a metric bar (100% of peak fills it)
BARS = (("dram_pct", "DRAM"), ("l2_pct", "L2"), ("sm_pct", "SM"), ("fma_pct", "FMA"),
        ("tensor_pct", "TC"), ("occupancy_pct", "occ"))


def bar(pct: float) -> str:
    """A compact bar against 100% of peak: filled cells, then empty ones."""
    filled = max(0, min(BAR, round(pct / 100 * BAR)))
    return "█" * filled + "░" * (BAR - filled)


def profile_text(verdict: Verdict) -> Text:
    """Which profiler ran, the diagnosis with its numbers, and per kernel (top three by time) its
    share of device time and its metrics as bars against their peaks."""
    out = Text()
    profile = verdict.profile or {}
    tool = profile.get("tool")
    if not tool:
        return out
    if tool == "off":
        out.append(f"\nprofile: off ({profile.get('why', '')})", style="dim")
        return out
    if profile.get("error"):
        out.append(f"\nprofile ({tool}): not taken: {profile['error'][:200]}", style="yellow")
        return out
    d = profile.get("diagnosis") or {}
    out.append(f"\nprofile ({tool}): ", style="bold")
    out.append(BOUND_LABELS.get(d.get("bound"), str(d.get("bound"))), style="bold cyan")
    out.append(f" — {d.get('evidence', '')}")
    if profile.get("why"):
        out.append(f"\n  {profile['why']}", style="dim")
    for k in (profile.get("kernels") or [])[:TOP_KERNELS]:
        name = str(k.get("name", "?")).split("(")[0].removeprefix("void ")[:32]
        out.append(f"\n  {name} ", style="bold")
        out.append(f"{100 * (k.get('share') or 0):.0f}% · {k.get('time_us') or 0:.1f} us", style="dim")
        metrics = [(label, k[key]) for key, label in BARS if k.get(key) is not None]
        for label, pct in metrics:
            out.append(f"\n    {label:<4} {bar(pct)} {pct:3.0f}%")
            if label == "occ" and k.get("theoretical_occupancy_pct") is not None:
                out.append(f" of {k['theoretical_occupancy_pct']:.0f}%", style="dim")
        launch = []
        if k.get("block") or k.get("block_size"):
            b = k.get("block") or k.get("block_size")
            launch.append("block " + ("x".join(map(str, b)) if isinstance(b, list) else f"{b:g}"))
        if k.get("registers") is not None:
            launch.append(f"{k['registers']:g} regs")
        if k.get("smem_bytes"):
            launch.append(f"{k['smem_bytes']:g} B smem")
        if k.get("occupancy_limiter"):
            launch.append(f"limited by {k['occupancy_limiter']}")
        if k.get("stalls"):
            launch.append("stalls " + ", ".join(str(s[0]) for s in k["stalls"][:2]))
        if launch:
            out.append("\n    " + " · ".join(launch), style="dim")
    ref = (profile.get("reference") or {}).get("diagnosis")
    if ref:
        out.append(f"\n  reference: {BOUND_LABELS.get(ref.get('bound'), ref.get('bound'))}"
                   f" — {ref.get('evidence', '')}", style="dim")
    return out


def verdict_text(node: Node, verdict: Verdict | None, why: str | None = None, excluded: bool = False) -> Text:
    """Status, kind, round and marks; then error, timings (median, p10, p90), speedups vs eager and
    torch.compile, fraction of speed-of-light, flags, the `library` mark (`excluded`: the search
    excludes library ops, so this one is neither a parent nor the best), notes and the log's tail."""
    out = Text()
    out.append(f"{glyph(node.status)} {node.status}", style=f"bold {style(node.status)}")
    if verdict is not None and verdict.library and verdict.status == "correct":
        out.append(" lib", style="bold yellow")
    out.append(f"  {node.kind} #{node.id} · round {node.round}")
    if node.pinned:
        out.append(" · pinned", style="blue")
    if node.pruned:
        out.append(" · pruned", style="dim")
    if why:  # e.g. why it waits
        out.append(f"\n{why}", style="yellow")
    v = verdict
    if v is None:
        return out
    if v.gpu:  # which device measured it
        out.append(f" · {device_label(v)}", style="dim")
    if v.compiler_error:  # first, where the pane is small (a snug or compact screen): why it failed
        out.append(f"\n{v.compiler_error}", style="bold red")
    if v.time_ms is None and v.max_abs_err is None and v.speedup_eager is None:
        return _rest(out, v, excluded)  # never checked nor timed: no line of dashes before the log
    out.append(f"\nmax abs err {fmt_num(v.max_abs_err, '.3g')}")
    out.append(f" · median {fmt_num(v.time_ms, '.4g', ' ms')}"
               f" (p10 {fmt_num(v.time_p10_ms, '.4g')}, p90 {fmt_num(v.time_p90_ms, '.4g')})")
    span = v.speedup_interval
    out.append(f"\nvs eager {fmt_num(v.speedup_eager, '.2f', 'x')}")
    if span is not None:
        out.append(f" [{span[0]:.2f}-{span[1]:.2f}]", style="yellow" if _marked(v) else "")
    ref_spread = (f", p10 {fmt_num(v.ref_p10_ms, '.4g')}, p90 {fmt_num(v.ref_p90_ms, '.4g')}"
                  if v.ref_p10_ms is not None else "")
    out.append(f" (eager {fmt_num(v.ref_eager_ms, '.4g', ' ms')} {EAGER_BESIDE}{ref_spread})"
               f" · vs torch.compile {fmt_num(v.speedup_compile, '.2f', 'x')}"
               f" ({fmt_num(v.ref_compile_ms, '.4g', ' ms')})")
    sol = v.sol_fraction
    out.append(f" · SOL {'-' if sol is None else f'{100 * sol:.1f}%'}")
    return _rest(out, v, excluded)


def _rest(out: Text, v: Verdict, excluded: bool) -> Text:
    """The verdict pane after its timings: flags, the library mark, notes, the profile, the log."""
    for flag in v.flags or ():
        out.append(f"\nflag: {flag}", style="magenta")
    if v.library:
        out.append(f"\nlibrary: {library_line(v.library)}", style="bold yellow")
        out.append(" — the reference's main op left to torch/cuDNN/cuBLAS, the rest in its own kernels")
        if excluded:
            out.append(f"\n{LIBRARY_EXCLUDED}: correct, but neither a parent nor the best", style="dim")
    for note in shown_notes(v.notes, v.library):
        out.append(f"\nnote: {note}", style="yellow")
    out.append_text(profile_text(v))
    log = (v.log or "").rstrip()
    if log:
        out.append("\n" + "\n".join(log.splitlines()[-LOG_LINES:]), style="dim")
    return out


def _marked(v: Verdict) -> bool:
    return any(is_timing_flag(f) for f in v.flags)


class VerdictPane(Static):
    """Focusable (Tab reaches it) so `z` can zoom it: its log and the compiler's line need more
    than the few lines a snug or compact screen gives it."""

    can_focus = True

    def show(self, node: Node, verdict: Verdict | None, why: str | None = None, excluded: bool = False) -> None:
        self.update(verdict_text(node, verdict, why, excluded), layout=False)
