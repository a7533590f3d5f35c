"""The idea tree: reference → ideas → variants → their ideas, one line per node.

Items are made lazily: a small tree opens fully, a large one level by level (children appear when
their parent opens), so a session of thousands of nodes opens at once and stays fast.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual import events, on
from textual.binding import Binding
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from engine.domain import Node, language_mark
from tui.model import PCH_NOTE, ScreenModel
from tui.widgets.resize import SteadyScrollBars
from tui.widgets.status import glyph, style

AUTO_EXPAND = 400  # trees up to this many nodes open fully; larger ones open level by level


def node_label(node: Node, model: ScreenModel, wide: bool = False) -> Text:
    """A node's line: status glyph, what it is (its language mark, its speedup, its `lib` mark:
    the reference's main op left to a library, "(excluded)" when the search excludes those),
    pinned / pruned / pending marks,
    and the ★ on the one best variant (`model.best_id`). `wide`: also the speedup vs torch.compile."""
    colour = style(node.status)
    label = Text(f"{glyph(node.status)} ", style=colour)
    best = node.id == model.best_id
    if best:  # first, so a narrow tree that cuts the line's end still shows it
        label.append("★ best ", style="bold yellow")
    if node.kind == "root":
        label.append(f"reference {model.info.get('problem', '')}".rstrip(), style="bold cyan")
    elif node.kind == "idea":
        label.append(node.title or "(idea)", style="bold" if node.status == "ok" else colour)
        if node.origin == "human":
            label.append(" (yours)", style="italic")
    else:
        label.append(f"#{node.id} ")
        mark = language_mark(node.language)  # CUDA C++ is the default and goes unmarked
        if mark:
            label.append(f"{mark} ", style="magenta")
        if node.speedup is not None:
            label.append(f"{node.speedup:.2f}x ", style="bold green" if node.speedup >= 1 else "")
        if wide:
            verdict = model.verdicts.get(node.id)
            sc = verdict.speedup_compile if verdict is not None else None
            if sc is not None:
                label.append(f"({sc:.2f}x compile) ", style="dim")
        label.append(node.status, style=colour)
        if node.library and node.status == "correct":  # the reference's main op left to a library
            label.append(" lib", style="bold yellow")
            if model.library_excluded(node):
                label.append(" (excluded)", style="dim")
        if node.status == "compiling" and model.first_build:
            label.append(f" · {PCH_NOTE}", style="yellow")
        if node.origin in ("human", "edit"):
            label.append(" (yours)", style="italic")
    if node.pinned:
        label.append(" ⚲pinned", style="bold blue")
    if node.pruned:
        label.stylize("dim strike")
        label.append(" ✂pruned", style="dim")
    if node.id in model.node_pending:
        label.append(f" ⧗{model.node_pending[node.id]}…", style="italic yellow")
    if best:
        label.stylize("reverse", 0, 1)
    return label


class SearchTree(SteadyScrollBars, Tree[int]):
    """The tree of one session, drawn from a ScreenModel; an item's data is its node id."""

    BINDINGS = [Binding("j", "cursor_down", "Down", id="tree.down", show=False),
                Binding("k", "cursor_up", "Up", id="tree.up", show=False)]

    def __init__(self, model: ScreenModel, *, id: str | None = None) -> None:
        super().__init__(Text("reference"), id=id)
        self.model = model
        self.items: dict[int, TreeNode[int]] = {}  # the nodes that have an item so far
        self.wide = False

    def _on_resize(self, event: events.Resize) -> None:
        """Textual's Tree drops every line it drew on a resize and lays itself out again (a second
        frame, ~20 ms, after each zoom and each screen shown); its lines are kept by width and its
        layout does not depend on its size, so a resize only needs room for more lines."""
        self._line_cache.grow(event.size.height)
        event.prevent_default()

    def set_wide(self, wide: bool) -> None:
        """Wide terminals show the speedup vs torch.compile too."""
        if wide != self.wide:
            self.wide = wide
            self.relabel(list(self.items))

    def add_nodes(self, node_ids: Iterable[int]) -> None:
        """Items for new nodes of the model (parents first): under an open parent at once, under a
        closed one when it opens."""
        for node_id in node_ids:
            node = self.model.nodes[node_id]
            if node.kind == "root" or node.parent_id is None:
                self._materialize(node)
                continue
            parent = self.items.get(node.parent_id)
            if parent is None:
                continue
            if parent.is_expanded or parent.is_root:
                self._materialize(node)
            else:
                parent.allow_expand = True

    def relabel(self, node_ids: Iterable[int]) -> None:
        for node_id in node_ids:
            item = self.items.get(node_id)
            if item is not None and node_id in self.model.nodes:
                item.set_label(node_label(self.model.nodes[node_id], self.model, self.wide))

    def reveal(self, node_id: int) -> TreeNode[int] | None:
        """The node's item, creating (and opening) its ancestors as needed."""
        nodes = self.model.nodes
        path: list[int] = []
        nid: int | None = node_id
        while nid is not None and nid not in self.items:
            path.append(nid)
            nid = nodes[nid].parent_id if nid in nodes else None
        if nid is None:
            return None
        for ancestor in [nid, *reversed(path[1:])]:
            self.items[ancestor].expand()
            self._open_children(ancestor)
        item = self.items.get(node_id)
        if item is not None and item.parent is not None and not item.parent.is_expanded:
            item.parent.expand()
        return item

    def _materialize(self, node: Node) -> TreeNode[int] | None:
        """Create the item of `node` (its parent's must exist); its children come when it opens."""
        label = node_label(node, self.model, self.wide)
        if node.kind == "root" or node.parent_id is None:
            item = self.root
            item.data = node.id
            item.set_label(label)
            item.allow_expand = True
        else:
            parent = self.items.get(node.parent_id)
            if parent is None:
                return None
            parent.allow_expand = True
            item = parent.add(label, data=node.id, expand=len(self.model.nodes) <= AUTO_EXPAND,
                              allow_expand=bool(self.model.kids.get(node.id)))
        self.items[node.id] = item
        return item

    def _open_children(self, node_id: int) -> None:
        for child in self.model.kids.get(node_id, []):
            if child not in self.items:
                self._materialize(self.model.nodes[child])

    @on(Tree.NodeExpanded)
    def _open_on_expand(self, event: Tree.NodeExpanded[int]) -> None:
        if event.node.data is not None:
            self._open_children(event.node.data)
