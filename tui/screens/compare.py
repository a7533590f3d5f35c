"""Two sessions side by side: best speedup per round (table and plot), cost, and the best kernels."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from engine.domain import best_variant, library_excluded, session_library_ops
from tui.widgets.chart import RoundsPlot, Series
from tui.widgets.code import highlight_source


def best_per_round(nodes: list[Any], library_ops: str = "allow") -> dict[int, float]:
    """Best-so-far speedup (correct variants; not library-marked ones where the session excludes
    them) at the end of each round."""
    by_round: dict[int, float] = {}
    for n in nodes:
        if n.kind == "variant" and n.status == "correct" and n.speedup and not library_excluded(n, library_ops):
            by_round[n.round] = max(by_round.get(n.round, 0.0), n.speedup)
    out, best = {}, 0.0
    for r in range(1, max(by_round, default=0) + 1):
        best = max(best, by_round.get(r, 0.0))
        out[r] = best
    return out


# (marker, plotext colour, the legend's mark and colour) of the first and second session; the legend
# is a line of its own above the plot (plotext's, inside it, is drawn over by the lines)
SERIES = [("dot", "cyan", "•", "cyan"), ("x", "orange", "x", "dark_orange")]


class CompareScreen(Screen):
    BINDINGS = [Binding("escape", "back", "Back", id="compare.back")]

    def __init__(self, a: int, b: int):
        super().__init__()
        self.ids = (a, b)
        self.data: dict[int, dict[str, Any]] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Compare sessions {self.ids[0]} and {self.ids[1]}", id="banner")
        with Horizontal(id="compare-top"):
            yield DataTable(id="compare-table", cursor_type="none")
            with Vertical(id="compare-chart"):
                yield Static("", id="compare-legend")
                yield RoundsPlot(id="compare-plot")
        with Horizontal(id="compare-code"):
            for sid in self.ids:
                with VerticalScroll(id=f"best-{sid}"):
                    yield Static("", id=f"code-{sid}")
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        store = self.app.store  # type: ignore[attr-defined]
        for sid in self.ids:
            session = await store.session(sid)
            nodes = await store.nodes(sid)
            totals = await store.llm_totals(sid)
            library_ops = session_library_ops(session and session["config"])
            best = best_variant(nodes, library_ops)
            self.data[sid] = {"session": session, "rounds": best_per_round(nodes, library_ops),
                              "totals": totals, "best": best,
                              "variants": sum(n.kind == "variant" for n in nodes)}
        a, b = (self.data[s] for s in self.ids)
        table = self.query_one("#compare-table", DataTable)
        table.add_columns("", *(f"#{s} {self.data[s]['session']['problem']}" for s in self.ids))

        def scripted(d: dict[str, Any]) -> str:
            return " SCRIPTED" if "scripted" in d["session"]["provider"].split(",") else ""

        table.add_row("models", *(", ".join(d["session"]["models"])[:20] + scripted(d) for d in (a, b)))
        table.add_row("status", a["session"]["status"], b["session"]["status"])
        table.add_row("variants", str(a["variants"]), str(b["variants"]))
        table.add_row("cost", *(f"${d['totals']['cost_usd']:.3f}" for d in (a, b)))
        table.add_row("tokens", *(f"{int(d['totals']['tokens'])}" for d in (a, b)))
        for r in range(1, max(len(a["rounds"]), len(b["rounds"])) + 1):
            table.add_row(f"best after round {r}",
                          *(f"{d['rounds'][r]:.2f}x" if r in d["rounds"] else "-" for d in (a, b)))
        legend = Text("best speedup by round:", style="bold")
        series = []
        for sid, (marker, colour, mark, style) in zip(self.ids, SERIES, strict=True):
            rounds = self.data[sid]["rounds"]
            series.append(Series(list(rounds), list(rounds.values()), marker=marker, color=colour))
            legend.append(f"  {mark} #{sid}", style=style)
        self.query_one("#compare-legend", Static).update(legend)
        self.query_one("#compare-plot", RoundsPlot).show_series(series)
        for sid in self.ids:
            best = self.data[sid]["best"]
            widget = self.query_one(f"#code-{sid}", Static)
            if best is None:
                widget.update(Text(f"session {sid}: no correct variant", style="dim"))
            else:
                head = Text(f"#{sid} best: node {best.id}, {best.speedup:.2f}x — {best.title}\n", style="bold")
                widget.update(head + highlight_source(best.source, dark=self.app.current_theme.dark))

    def action_back(self) -> None:
        self.app.pop_screen()
