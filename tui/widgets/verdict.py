"""The verdict pane: the selected node's status and, for an evaluated variant, its numbers."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from engine.domain import Node
from engine.evaluate.verdict import Verdict, device_label
from tui.widgets.code import fmt_num
from tui.widgets.status import glyph, style

LOG_LINES = 8  # the tail of the evaluation log shown under the numbers


def verdict_text(node: Node, verdict: Verdict | None, why: str | None = None) -> Text:
    """Status, kind, round and marks; then error, timings (median, p10, p90), speedups vs eager and
    torch.compile, fraction of speed-of-light, flags and the log's tail."""
    out = Text()
    out.append(f"{glyph(node.status)} {node.status}", style=f"bold {style(node.status)}")
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
    out.append(f"\nmax abs err {fmt_num(v.max_abs_err, '.3g')}")
    out.append(f" · median {fmt_num(v.time_ms, '.4g', ' ms')}"
               f" (p10 {fmt_num(v.time_p10_ms, '.4g')}, p90 {fmt_num(v.time_p90_ms, '.4g')})")
    span = v.speedup_interval
    out.append(f"\nvs eager {fmt_num(v.speedup_eager, '.2f', 'x')}")
    if span is not None:
        out.append(f" [{span[0]:.2f}-{span[1]:.2f}]", style="yellow" if _marked(v) else "")
    ref_spread = (f", p10 {fmt_num(v.ref_p10_ms, '.4g')}, p90 {fmt_num(v.ref_p90_ms, '.4g')}"
                  if v.ref_p10_ms is not None else "")
    out.append(f" ({fmt_num(v.ref_eager_ms, '.4g', ' ms')}{ref_spread})"
               f" · vs torch.compile {fmt_num(v.speedup_compile, '.2f', 'x')}"
               f" ({fmt_num(v.ref_compile_ms, '.4g', ' ms')})")
    sol = v.sol_fraction
    out.append(f" · SOL {'-' if sol is None else f'{100 * sol:.1f}%'}")
    for flag in v.flags or ():
        out.append(f"\nflag: {flag}", style="magenta")
    log = (v.log or "").rstrip()
    if log:
        out.append("\n" + "\n".join(log.splitlines()[-LOG_LINES:]), style="dim")
    return out


def _marked(v: Verdict) -> bool:
    return any(f in ("noisy", "contended") for f in v.flags)


class VerdictPane(Static):
    def show(self, node: Node, verdict: Verdict | None, why: str | None = None) -> None:
        self.update(verdict_text(node, verdict, why), layout=False)
