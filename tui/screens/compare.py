"""Two sessions side by side: best speedup per round (table and plot), cost, and the best kernels."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from engine.domain import best_variant, library_excluded, session_library_ops
from tui.screens.ahead import StyledAhead
from tui.widgets.chart import RoundsPlot, Series
from tui.widgets.code import highlighted_lines
from tui.widgets.code_view import CodeView
from tui.widgets.footer import SteadyFooter


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


SIDES = ("a", "b")  # the code views' ids: code-a (the first session's), code-b
# (marker, plotext colour, the legend's mark and colour) of the first and second session; the legend
# is a line of its own above the plot (plotext's, inside it, is drawn over by the lines)
SERIES = [("dot", "cyan", "•", "cyan"), ("x", "orange", "x", "dark_orange")]


CHART_MIN = 30  # columns the chart keeps beside the table (its axis labels and a readable plot)
PADDING = 2  # a table column's padding, both sides
SCROLLBAR = 2  # room for the table's vertical scrollbar (many rounds)
MIN_SHARE = 8  # the narrowest a session's column gets
MODELS_WIDTH = 40  # the model names, at most (then cut with "…")
SCRIPTED = " SCRIPTED"  # after the models of a scripted session (its numbers are made up)


def cut(text: str, width: int) -> str:
    """`text` in `width` cells, its end replaced by "…" where it is cut."""
    if cell_len(text) <= width:
        return text
    out = ""
    for char in text:
        if cell_len(out + char) > width - 1:
            break
        out += char
    return out + "…"


class CompareScreen(StyledAhead, Screen):
    BINDINGS = [Binding("escape", "back", "Back", id="compare.back")]

    def __init__(self, a: int | None = None, b: int | None = None):
        """Sessions `a` and `b`; none: a screen built ahead, given its two by `take`."""
        super().__init__()
        self.ids: tuple[Any, Any] = (a, b)
        self.data: dict[int, dict[str, Any]] = {}
        self._filled_for = 0  # the width the table was cut for

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(self._title(), id="banner")
        with Horizontal(id="compare-top"):
            yield DataTable(id="compare-table", cursor_type="none")
            with Vertical(id="compare-chart"):
                yield Static("", id="compare-legend")
                yield RoundsPlot(id="compare-plot")
        with Horizontal(id="compare-code"):
            for side in SIDES:  # draws the lines on screen only
                yield CodeView(id=f"code-{side}")
        yield SteadyFooter(compact=True)

    def code_view(self, session_id: int) -> CodeView:
        """Where a session's best kernel shows (the left one: the first session's)."""
        return self.query_one(f"#code-{SIDES[self.ids.index(session_id)]}", CodeView)

    def _title(self) -> str:
        return "" if None in self.ids else f"Compare sessions {self.ids[0]} and {self.ids[1]}"

    async def on_mount(self) -> None:
        if None not in self.ids:
            await self._load()

    async def take(self, a: int, b: int) -> None:
        """A screen built ahead (KtreeApp.build_ahead) takes these two, before it is shown: read
        from the DB and drawn into widgets already made and laid out (over the two it held, if
        any: KtreeApp.prepare_compare)."""
        self.ids, self.data = (a, b), {}
        self.query_one("#banner", Static).update(self._title())
        await self._load()

    async def _load(self) -> None:
        store = self.app.store  # type: ignore[attr-defined]
        for sid in self.ids:
            session = await store.sessions.get(sid)
            nodes = await store.nodes.of(sid)
            totals = await store.calls.totals(sid)
            library_ops = session_library_ops(session and session["config"])
            best = best_variant(nodes, library_ops)
            self.data[sid] = {"session": session, "rounds": best_per_round(nodes, library_ops),
                              "totals": totals, "best": best,
                              "variants": sum(n.kind == "variant" for n in nodes)}
        self._fill_table()
        legend = Text()  # the marks first: a narrow chart cuts the title, not them
        series = []
        for sid, (marker, colour, mark, style) in zip(self.ids, SERIES, strict=True):
            rounds = self.data[sid]["rounds"]
            series.append(Series(list(rounds), list(rounds.values()), marker=marker, color=colour))
            legend.append(f"{mark} #{sid}  ", style=style)
        legend.append("best speedup by round", style="bold")
        self.query_one("#compare-legend", Static).update(legend)
        self.query_one("#compare-plot", RoundsPlot).show_series(series)
        for sid in self.ids:
            best = self.data[sid]["best"]
            if best is None:
                text = Text(f"session {sid}: no correct variant", style="dim")
            else:
                head = Text(f"#{sid} best: node {best.id}, {best.speedup:.2f}x — {best.title}", style="bold")
                # on the heading's bold, as they always were (the line numbers show it)
                text = [head, *highlighted_lines(best.source, dark=self.app.current_theme.dark, style="bold")]
            self.code_view(sid).update(text)

    def live(self) -> bool:
        """Whether a session shown here was running when it was read (its numbers move on)."""
        return any(d["session"] is None or d["session"]["status"] == "running" for d in self.data.values())

    def on_resize(self) -> None:
        if self.data and self._filled_for != self.app.size.width:
            self._fill_table()  # the sessions' columns cut to the new width

    def _fill_table(self) -> None:
        """Both sessions' columns whole beside the chart: the table is as wide as its cells, at
        most half the width or what leaves the chart CHART_MIN columns; a cell wider than its
        column's share is cut with "…" (the model names first: SCRIPTED stays)."""
        a, b = (self.data[s] for s in self.ids)

        def scripted(d: dict[str, Any]) -> bool:
            return "scripted" in d["session"]["provider"].split(",")

        rows = [("models", *(", ".join(d["session"]["models"]) for d in (a, b))),
                ("status", a["session"]["status"], b["session"]["status"]),
                ("variants", str(a["variants"]), str(b["variants"])),
                ("cost", *(f"${d['totals']['cost_usd']:.3f}" for d in (a, b))),
                ("tokens", *(f"{int(d['totals']['tokens'])}" for d in (a, b)))]
        for r in range(1, max(len(a["rounds"]), len(b["rounds"])) + 1):
            rows.append((f"best after round {r}",
                         *(f"{d['rounds'][r]:.2f}x" if r in d["rounds"] else "-" for d in (a, b))))
        heads = [f"#{s} {self.data[s]['session']['problem']}" for s in self.ids]
        label_w = max(cell_len(row[0]) for row in rows)
        width = self.app.size.width
        budget = max(width // 2, width - CHART_MIN) - label_w - 3 * PADDING - SCROLLBAR
        share = max(MIN_SHARE, budget // 2)
        models = [cut(m[:MODELS_WIDTH], share - (len(SCRIPTED) if scripted(d) else 0)) + (
            SCRIPTED if scripted(d) else "") for m, d in zip(rows[0][1:], (a, b), strict=True)]
        rows[0] = ("models", *models)
        cols = [[cut(heads[i], share), *(cut(row[i + 1], share) for row in rows)] for i in range(2)]
        widths = [label_w, *(max(cell_len(c) for c in col) for col in cols)]
        table = self.query_one("#compare-table", DataTable)
        self._filled_for = width
        with self.app.batch_update():
            table.clear(columns=True)
            for label, w in zip(["", *(col[0] for col in cols)], widths, strict=True):
                table.add_column(label, width=w)
            for j, row in enumerate(rows):
                table.add_row(row[0], cols[0][j + 1], cols[1][j + 1])
            table.styles.width = sum(widths) + 3 * PADDING + SCROLLBAR

    def action_back(self) -> None:
        self.app.pop_screen()
