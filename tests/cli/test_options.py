"""The configuration's parts (engine.options): a field is declared once, in its part, and the
command line, the new-search form, a request's checks and the session's record all come from it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from textual.widgets import Input

from engine import options
from engine.cli import build_parser
from engine.commands._common import run_request
from engine.launch import RunRequest, UsageError
from engine.launch.run import _search_config
from engine.llm.scripted import ScriptedProvider
from engine.options import CheckSettings, opt, positive
from engine.problems import load_problem
from engine.record.events import EventBus
from engine.record.store import Store
from engine.search import Search, SearchConfig
from tests.conftest import query
from tests.search.helpers import InstantEvaluator
from tests.tui_helpers import fake_db
from tui.app import KtreeApp
from tui.screens.new_search import NewSearchScreen, form_request

FORM = {"problem": "softmax", "path": ""}


@dataclass(frozen=True)
class ChecksWithWarmup(CheckSettings):
    """The check settings with one more field, declared as any other."""

    warmup: int = opt(3, parse=positive, form="warm-up runs", form_rank=90,
                      help="timed runs thrown away before the first kept one (default 3)")


@pytest.fixture
def warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(options.PARTS, "checks", ChecksWithWarmup)


def _run_help() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["run"].format_help()  # type: ignore[union-attr]


def test_a_field_names_one_part():
    owners: dict[str, str] = {}
    for name, part in options.PARTS.items():
        for f in fields(part):
            assert f.name not in owners, f"{f.name} is declared by {owners[f.name]} and {name}"
            owners[f.name] = name
            assert f.metadata["opt"].help, f"{name}.{f.name} has no help"


def test_every_flag_of_run_is_declared_by_a_part():
    """`ktree run`'s flags are the parts' flags plus the command's own (what it runs, how it shows)."""
    own = {"-h", "--help", "--db", "--resume", "--estimate", "--headless", "--json"}
    parser = build_parser()
    run = next(a for a in parser._actions if a.dest == "command").choices["run"]  # type: ignore[union-attr]
    given = {s for a in run._actions for s in a.option_strings}
    declared = {options.flag_of(f, o) for part in options.PARTS.values() for f, o in options.declared(part)
                if o.flag is not None}
    assert given - own == declared


async def test_a_field_added_to_a_part_is_a_flag_a_form_field_and_recorded(warmup: None, tmp_path: Path):
    # the command line: in --help, parsed, checked
    assert "--warmup WARMUP" in _run_help() and "timed runs thrown away" in _run_help()
    request = run_request(build_parser().parse_args(["run", "softmax", "--warmup", "5", "--rounds", "1"]))
    assert isinstance(request.checks, ChecksWithWarmup) and request.checks.warmup == 5
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "softmax", "--warmup", "0"])
    assert exited.value.code == 2
    # a request built elsewhere is checked in the flag's words
    with pytest.raises(UsageError, match="--warmup: 0 must be at least 1"):
        _search_config(RunRequest.of("softmax", warmup=0), load_problem("softmax"))

    # the form: a field of its own, read back into the request
    assert form_request({**FORM, "warmup": "7"}).checks.warmup == 7
    with pytest.raises(ValueError, match="warm-up runs: 'x' is not a whole number"):
        form_request({**FORM, "warmup": "x"})
    db, _ = await fake_db(tmp_path / "k.db", 5)
    app = KtreeApp(db_path=db)
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, NewSearchScreen)
        assert app.screen.query_one("#warmup", Input).value == "3"  # its default, as typed
        await pilot.press("escape")

    # the session's record: as a search records its config
    config = _search_config(request, load_problem("softmax"))
    store = await Store.open(tmp_path / "s.db")
    try:
        search = Search(store, EventBus(), [(ScriptedProvider("softmax", "cpu", seed=0), "scripted")],
                        InstantEvaluator(True), load_problem("softmax"), config)
        await asyncio.wait_for(search.run(), timeout=60)
    finally:
        await store.close()
    [(recorded,)] = query(tmp_path / "s.db", "SELECT config FROM sessions")
    recorded = json.loads(recorded)
    assert recorded["warmup"] == 5 and recorded["rounds"] == 1
    assert SearchConfig.from_dict(recorded).checks.warmup == 5  # and read back as it was


def test_records_written_before_the_parts_still_read():
    """A flat record of an older version (its `time_limit`, its `language` as typed) reads back."""
    old = {"problem": "softmax", "rounds": 3, "time_limit": 60.0, "language": "cuda,triton",
           "isolation": "basic", "gpus": [0, 1], "no_longer_a_field": 1}
    request = RunRequest.from_record(old)
    assert request.shape.rounds == 3 and request.budgets.time_limit_s == 60.0
    assert request.shape.languages == ("cuda", "triton") and request.placement.gpus == (0, 1)
    assert RunRequest.from_record(request.record()) == request
    config = SearchConfig.from_dict({"rounds": 2, "atol": 0.5, "isolation": "strict", "languages": ["cuda"]})
    assert config.shape.rounds == 2 and config.checks.atol == 0.5 and config.shape.languages == ("cuda",)
    assert SearchConfig.from_dict(config.record()) == config


def test_the_form_is_made_of_the_declared_fields_in_order():
    assert [ff.name for ff in options.form_fields()] == [
        "provider", "models", "rounds", "ideas", "variants", "top", "strategy", "backend", "languages",
        "budget_usd", "budget_tokens"]
    kinds = {ff.name: (ff.kind, ff.choices) for ff in options.form_fields()}
    assert kinds["rounds"] == ("integer", None) and kinds["budget_usd"] == ("number", None)
    assert kinds["languages"][1] == ("cuda", "triton", "cuda,triton")


def test_the_commands_page_lists_the_parts_as_declared():
    assert options.doc_table() in (Path(__file__).resolve().parents[2] / "docs" / "commands.md").read_text()


def test_a_resume_refuses_what_the_session_keeps():
    from engine.commands.run import check_run_args

    parse = build_parser().parse_args
    check_run_args(parse(["run", "--resume", "3", "--budget-usd", "2", "--gpus", "1", "--seed", "4"]))
    for flags, said in ((["--rounds", "5"], "--rounds"), (["--language", "triton", "--atol", "0.1"],
                                                            "--language, --atol")):
        with pytest.raises(UsageError, match=f"^{said}: a resumed session keeps its own"):
            check_run_args(parse(["run", "--resume", "3", *flags]))


def test_every_option_of_every_command_is_described():
    """Issue 56, item 15: `ktree dataset export --help` left `--format` undescribed (as were the
    benches' --backend and --json): each option's --help line says what it does."""
    import argparse

    from engine.cli import build_parser

    bare: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.option_strings and not action.help and "-h" not in action.option_strings:
                bare.append(f"{path} {action.option_strings[-1]}")

    walk(build_parser(), "ktree")
    assert bare == []
