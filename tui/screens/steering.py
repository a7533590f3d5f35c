"""The search screen's steering keys: prune, expand, pin, inject, edit, profile, pause, stop, export.

A key only records a command in the DB (engine.record.control) and marks it pending in the model; the
engine applies it between steps and confirms (CommandApplied, NodeUpdated, or the command row
marked applied, for a followed session), which clears the mark.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from textual.app import SystemCommand

from engine.domain import WORK_STATUSES, Node
from engine.record import control
from engine.record.events import ProfileTaken
from engine.record.solution_file import ExportError, solution_text
from tui.model import Changes, CommandRecorded, ModelInput, Note, ScreenModel, Steered
from tui.screens.dialogs import AskNumber, AskText, Confirm, EditSource

STEERING = [  # (action, palette title, help)
    ("prune", "Prune node", "cancel the selected node's queued work; never select it"),
    ("undo_prune", "Undo last prune", "take back the last prune: the node may be selected again"
                                      " (its cancelled work stays cancelled)"),
    ("expand", "Expand node", "ask for more ideas (from a variant) or variants (of an idea)"),
    ("pin", "Pin / unpin node", "always keep the selected variant as a parent"),
    ("inject", "Inject idea", "add your own idea under the selected variant"),
    ("edit", "Edit variant", "edit the selected variant's source and re-queue it"),
    ("profile", "Profile variant", "profile the selected correct variant now (a search profiles"
                                   " only its parents and its best by itself)"),
    ("pause", "Pause / resume search", "no new LLM calls or evaluations start while paused"),
    ("stop", "Stop search", "end the search after in-flight work"),
    ("export", "Export variant", "write the selected variant as a KernelBench solution file"),
    ("diff", "Toggle diff", "show the selected variant's diff against its parent"),
    ("best", "Go to best", "select the fastest correct variant"),
]


def export_path(problem: str, node_id: int, directory: Path) -> Path:
    """Where the export key writes a variant: a new file in `directory`, never an existing one."""
    stem = f"{problem}_node{node_id}"
    path = directory / f"{stem}.py"
    n = 1
    while path.exists():
        n += 1
        path = directory / f"{stem}_{n}.py"
    return path


VERBS = ("prune", "undo_prune", "expand", "pin", "inject", "edit", "profile", "pause", "stop", "export")


class SteeringScreen(Protocol):
    """What the steering keys use of the screen that owns them (tui.screens.search.SearchScreen)."""

    model: ScreenModel
    selected: int | None
    app: Any

    @property
    def store(self) -> Any: ...

    def feed(self, message: ModelInput) -> Changes: ...

    def notify(self, message: str, *, severity: str = ...) -> None: ...

    def run_action(self, action: str) -> Any: ...

    def run_worker(self, work: Any, **kwargs: Any) -> Any: ...


def action_of(verb: str) -> str:
    """The screen's action for a palette entry: a steering verb goes through `steer`."""
    return f"steer('{verb}')" if verb in VERBS else verb


class SteeringKeys:
    """The steering keys of a search screen, owned by it (`SearchScreen.steering`): the screen's
    `steer` action runs one by its verb."""

    def __init__(self, screen: SteeringScreen):
        self.screen = screen
        self.pruned: list[int] = []  # this screen's prunes, the last first to be undone (u)
        self.profiling: set[int] = set()  # variants `f` profiles in this process

    @property
    def model(self) -> ScreenModel:
        return self.screen.model

    async def run(self, verb: str) -> None:
        if verb not in VERBS:
            raise ValueError(f"no steering key {verb!r}")
        done = getattr(self, verb)()
        if inspect.isawaitable(done):
            await done

    def palette_commands(self) -> Iterator[SystemCommand]:
        """What the command palette offers on the search screen: the steering actions."""
        for verb, title, help_text in STEERING:
            yield SystemCommand(title, help_text, partial(self.screen.run_action, action_of(verb)))

    def _steerable(self) -> bool:
        sid = self.model.session_id
        if sid is None:
            self.screen.notify("the search has not started yet", severity="warning")
            return False
        if self.model.status != "running":
            self.screen.notify(f"session {sid} is {self.model.status}: nothing to steer", severity="warning")
            return False
        return True

    def _target(self, kinds: tuple[str, ...], what: str) -> Node | None:
        node = self.model.nodes.get(self.screen.selected) if self.screen.selected is not None else None
        if node is None or node.kind not in kinds:
            self.screen.notify(f"select {what} first", severity="warning")
            return None
        return node

    def _no_parent(self, node: Node, what: str) -> bool:
        """Whether `node` is a variant that is not correct, said with why: pinning it, expanding it
        or an idea under it would make it a parent, and each idea and variant under a parent that
        failed is LLM work (money, with a paid provider) spent on code that never worked. `what`:
        what only a correct variant can be ("pinned")."""
        if node.kind != "variant" or node.status == "correct":
            return False
        if node.status in WORK_STATUSES:
            why = f"#{node.id} is {node.status}, no verdict yet: only a correct variant can be {what}"
        else:
            why = (f"#{node.id} is {node.status}: only a correct variant can be {what}"
                   " (E edits it into a new variant)")
        self.screen.notify(why, severity="warning")
        return True

    async def _send(self, command: control.Command, node_id: int | None, mark: str) -> int:
        """Record a command; mark it pending in the tree at once, confirmed when the engine applies it."""
        if node_id is not None:
            self.screen.feed(Steered(node_id, mark))
        cid = await self.screen.store.commands.add(self.model.session_id, *control.encode(command))
        self.screen.feed(CommandRecorded(cid, command.kind, node_id, mark))
        return cid

    async def prune(self) -> None:
        node = self._target(("idea", "variant"), "an idea or a variant to prune")
        if node is None or not self._steerable():
            return
        if node.pruned:
            self.screen.notify(f"#{node.id} is already pruned")
            return
        await self._send(control.Prune(node.id), node.id, "prune")
        self.pruned.append(node.id)

    async def undo_prune(self) -> None:
        if not self._steerable():
            return
        undone = self.pruned
        while undone and not self.model.nodes[undone[-1]].pruned:
            undone.pop()  # taken back already (or never applied)
        if not undone:
            self.screen.notify("no prune to undo", severity="warning")
            return
        node_id = undone.pop()
        await self._send(control.Prune(node_id, pruned=False), node_id, "unprune")

    async def pin(self) -> None:
        node = self._target(("variant",), "a variant to pin")
        if node is None or not self._steerable():
            return
        if not node.pinned and self._no_parent(node, "pinned"):
            return
        await self._send(control.Pin(node.id, pinned=not node.pinned), node.id,
                         "unpin" if node.pinned else "pin")

    def expand(self) -> None:
        node = self._target(("root", "idea", "variant"), "a node to expand")
        if node is None or not self._steerable() or self._no_parent(node, "expanded"):
            return
        cfg = self.model.info.get("config") or {}
        if node.kind == "idea":
            prompt = f"More variants of “{node.title}”: how many?"
            field, default = "variants", cfg.get("variants", 2)
        else:
            prompt, field, default = f"More ideas from #{node.id}: how many?", "ideas", cfg.get("ideas", 3)

        async def done(count: int | None) -> None:
            if count:
                await self._send(control.Expand(node.id, **{field: count}), node.id, f"+{count} {field}")

        self.screen.app.push_screen(AskNumber(prompt, int(default or 2)), done)

    def inject(self) -> None:
        node = self._target(("root", "idea", "variant"), "a variant to add an idea under")
        if node is None or not self._steerable():
            return
        parent = self.model.nodes[node.parent_id] if node.kind == "idea" and node.parent_id else node
        if self._no_parent(parent, "given an idea"):
            return

        async def done(text: str | None) -> None:
            if text:
                await self._send(control.InjectIdea(parent.id, text), parent.id, "idea")

        self.screen.app.push_screen(AskText(f"Your idea for #{parent.id} (implemented like any other):",
                                     "e.g. fuse the max and the sum into one pass"), done)

    def edit(self) -> None:
        node = self._target(("variant",), "a variant to edit")
        if node is None or not self._steerable():
            return
        if not node.source:
            self.screen.notify(f"#{node.id} has no source yet", severity="warning")
            return

        async def done(source: str | None) -> None:
            if source:
                await self._send(control.EditVariant(node.id, source), node.id, "edit")

        title = f"Edit #{node.id} — saved as a new variant, evaluated"
        self.screen.app.push_screen(EditSource(title, node.source), done)

    async def profile(self) -> None:
        node = self._target(("variant",), "a correct variant to profile")
        if node is None:
            return
        verdict = self.model.verdicts.get(node.id)
        if verdict is None or not verdict.ok:
            self.screen.notify(f"#{node.id} is {node.status}: only a correct variant can be profiled",
                        severity="warning")
            return
        if verdict.profile:
            self.screen.notify(f"#{node.id} has its profile already (see the verdict pane)")
            return
        if self.model.status != "running":  # no engine to ask: profiled here
            self._profile_here(node)
            return
        await self._send(control.Profile(node.id), node.id, "profile")

    def _profile_here(self, node: Node) -> None:
        """A session no engine runs: its variant profiled in this process, as `ktree show SESSION
        --profile NODE` does, the profile recorded and shown (a worker: the screen stays live)."""
        sid = self.model.session_id
        if node.id in self.profiling:
            self.screen.notify(f"#{node.id} is being profiled")
            return
        self.profiling.add(node.id)
        self.screen.notify(f"profiling #{node.id} (session {sid} is {self.model.status}:"
                           " here, not by its engine)")

        async def work() -> None:
            from engine.launch import profile_evaluator
            from engine.record.report import profile_line
            from engine.search.profile_requests import profile_recorded, profile_target

            try:
                target = await profile_target(self.screen.store, sid, node.id)  # type: ignore[arg-type]
                evaluator = await asyncio.to_thread(profile_evaluator, target.session)
                try:
                    verdict = await profile_recorded(self.screen.store, target, evaluator)
                finally:
                    await evaluator.close()
            except Exception as exc:  # said in one line (no GPU for a cuda session, a closed store)
                self.screen.notify(f"#{node.id}: cannot profile: {exc}", severity="error")
                return
            finally:
                self.profiling.discard(node.id)
            if not verdict.profile:
                self.screen.notify(f"#{node.id}: no profile taken (profiling is off)", severity="warning")
                return
            self.screen.feed(ProfileTaken(target.node, verdict, "asked"))
            self.screen.notify(f"#{node.id}: {profile_line(verdict.profile)}")

        self.screen.run_worker(work(), name="profile", group="profile", exit_on_error=False)

    async def pause(self) -> None:
        if not self._steerable():
            return
        paused = self.model.paused
        await self._send(control.Resume() if paused else control.Pause(), None, "resume" if paused else "pause")

    def stop(self) -> None:
        if not self._steerable():
            return

        async def done(yes: bool | None) -> None:
            if yes:
                await self._send(control.Stop(), None, "stop")

        question = f"Stop session {self.model.session_id}? In-flight work finishes."
        self.screen.app.push_screen(Confirm(question), done)

    async def export(self) -> None:
        node = self._target(("variant",), "a variant to export")
        if node is None:
            return
        try:
            text = await solution_text(self.screen.store, node.id)
        except ExportError as exc:
            self.screen.notify(str(exc), severity="warning")
            return
        path = export_path(self.model.info.get("problem", "problem"), node.id, Path.cwd())
        path.write_text(text)
        self.screen.feed(Note(f"exported #{node.id} to {path}"))  # (the status line: a toast covered it)
