"""Best speedup by round, on axes that say where the values are: whole rounds on x, and on y a
label on every row, the value that row stands for (plotext draws a point on the row whose value
is nearest, so a point sits on the label nearest to it)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rich.console import RenderResult
from textual_plotext import PlotextPlot

FRAME_ROWS = 3  # plotext's frame: the top border, the x axis and its labels


@dataclass(frozen=True)
class Series:
    """One line of the plot: rounds and the speedup at each."""

    rounds: list[int]
    speedups: list[float]
    marker: str = "dot"
    color: str | None = None


# The y axis spans at least this share of its top value (or of 1): two sessions at 1.669x and 1.679x
# sat on the bottom and top rows, a 0.01x gap drawn as the whole height.
MIN_SPAN = 0.1


def row_values(lo: float, hi: float, rows: int) -> list[float]:
    """What each row of the plot stands for, bottom to top: evenly spaced from `lo` to `hi`, `lo`
    lowered to make MIN_SPAN where they are closer (a speedup axis: not below 0 where `lo` is not);
    one row: the top value."""
    if rows <= 1:
        return [hi]
    span = MIN_SPAN * max(abs(hi), 1.0)
    if hi - lo < span:
        lo = max(0.0, hi - span) if lo >= 0 else hi - span
    return [lo + i * (hi - lo) / (rows - 1) for i in range(rows)]


def row_labels(values: list[float]) -> list[str]:
    """The rows' labels, with as many decimals as tell neighbouring rows apart (2 to 4)."""
    step = (values[-1] - values[0]) / (len(values) - 1) if len(values) > 1 else 1.0
    decimals = min(4, max(2, math.ceil(-math.log10(step)) if step > 0 else 2))
    return [f"{v:.{decimals}f}" for v in values]


def round_ticks(first: int, last: int, width: int) -> list[int]:
    """Whole rounds from `first` to `last`, one every few columns at most (rounds are integers:
    no tick falls between two)."""
    most = max(1, width // 6)
    step = max(1, math.ceil((last - first + 1) / most))
    return list(range(first, last + 1, step))


class RoundsPlot(PlotextPlot):
    """A plotext plot of speedup by round whose axes are set from its size each time it draws."""

    def __init__(self, *, id: str | None = None, title: str = "") -> None:
        super().__init__(id=id)
        self.series: list[Series] = []
        self.title = title

    def show_series(self, series: Iterable[Series]) -> None:
        self.series = [s for s in series if s.rounds]
        self.refresh()

    def render(self) -> RenderResult:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if self.title:
            plt.title(self.title)
        if self.series:
            for s in self.series:
                plt.plot(s.rounds, s.speedups, marker=s.marker, color=s.color)
            rounds = [r for s in self.series for r in s.rounds]
            plt.xticks(round_ticks(min(rounds), max(rounds), self.size.width))
            speedups = [v for s in self.series for v in s.speedups]
            values = row_values(min(speedups), max(speedups),
                                self.size.height - FRAME_ROWS - (1 if self.title else 0))
            plt.ylim(values[0], values[-1])
            plt.yticks(values, row_labels(values))
        return super().render()
