"""Two sessions side by side: best speedup per round (table and plot), cost, and the best kernels."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, RichLog, Static
from textual_plotext import PlotextPlot

from engine.domain import best_variant, library_excluded, session_library_ops
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


SERIES = [("dot", "cyan"), ("x", "orange")]  # (marker, colour) of the first and second session


class CompareScreen(Screen):
    BINDINGS = [Binding("escape", "back", "Back", id="compare.back")]

    def __init__(self, a: int, b: int):
        super().__init__()
        self.ids = (a, b)
        self.data: dict[int, dict[str, Any]] = {}
        self.code: dict[int, Text] = {}  # what each session's pane shows

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Compare sessions {self.ids[0]} and {self.ids[1]}", id="banner")
        with Horizontal(id="compare-top"):
            yield DataTable(id="compare-table", cursor_type="none")
            yield PlotextPlot(id="compare-plot")
        with Horizontal(id="compare-code"):
            for sid in self.ids:  # a log renders the lines it shows, not the whole kernel up front
                yield RichLog(id=f"code-{sid}", wrap=False, auto_scroll=False)
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
        plt = self.query_one("#compare-plot", PlotextPlot).plt
        plt.title("best speedup by round")
        for sid, (marker, colour) in zip(self.ids, SERIES, strict=True):  # told apart in the legend
            rounds = self.data[sid]["rounds"]
            if rounds:
                plt.plot(list(rounds), list(rounds.values()), label=f"#{sid}", marker=marker, color=colour)
        for sid in self.ids:
            best = self.data[sid]["best"]
            if best is None:
                text = Text(f"session {sid}: no correct variant", style="dim")
            else:
                head = Text(f"#{sid} best: node {best.id}, {best.speedup:.2f}x — {best.title}\n", style="bold")
                text = head + highlight_source(best.source, dark=self.app.current_theme.dark)
            self.code[sid] = text
            self.query_one(f"#code-{sid}", RichLog).write(text)

    def action_back(self) -> None:
        self.app.pop_screen()
