"""How a command registers its parser (a helper, not a command): the subcommands' table, each
command's parser made here with the global flags, and the flags `run` and `suite` share.

A command module declares its own flags in its `register(commands)`; the CLI (engine/cli.py) only
asks each module to register and dispatches on the table."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from engine import options
from engine.commands._common import USAGE_ERROR

Body = Callable[[argparse.Namespace], int]
DB_HELP = "SQLite database (default: $KTREE_DB or ./store.db)"


class CommandParser(argparse.ArgumentParser):
    """A usage error is one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see --help)\n")


class Commands:
    """The subcommands of one parser, each with its body: `add` gives a command's parser to declare
    its flags on, `group` a command with subcommands of its own (the same group when asked again).
    `table` maps `COMMAND [SUBCOMMAND]` to the body: parsed flags in, exit code out."""

    def __init__(self, parser: argparse.ArgumentParser, common: argparse.ArgumentParser,
                 table: dict[str, Body], dest: str = "command", prefix: str = "") -> None:
        self._sub = parser.add_subparsers(dest=dest, parser_class=CommandParser, required=bool(prefix))
        self._common, self.table, self._prefix = common, table, prefix
        self._groups: dict[str, Commands] = {}

    def add(self, name: str, body: Body, **kw: Any) -> argparse.ArgumentParser:
        self.table[self._prefix + name] = body
        return self._sub.add_parser(name, parents=[self._common], **kw)

    def group(self, name: str, **kw: Any) -> Commands:
        if name not in self._groups:
            parser = self._sub.add_parser(name, parents=[self._common], **kw)
            self._groups[name] = Commands(parser, self._common, self.table, dest=name,
                                          prefix=f"{self._prefix}{name} ")
        return self._groups[name]


def new_parser(description: str) -> tuple[argparse.ArgumentParser, Commands]:
    """`ktree`'s parser and its subcommands' table (empty: each command module registers itself)."""
    parser = CommandParser(prog="ktree", description=description)
    parser.add_argument("--db", help=DB_HELP)
    # Global options are accepted after the subcommand too (`ktree sessions --db X`): each
    # subparser has them with a SUPPRESS default, so a value given before the subcommand survives.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)
    return parser, Commands(parser, common, {})


def search_flags(parser: argparse.ArgumentParser) -> None:
    """A search's flags, `run`'s and each problem's of a `suite`: every part's (engine.options: shape,
    budgets, LLM, checks, placement), the estimate, and how it is shown."""
    parser.add_argument("--estimate", action="store_true",
                        help="print the expected LLM calls, tokens and dollars, and exit")
    options.add_search_flags(parser)
    parser.add_argument("--headless", action="store_true", help="no TUI: one line per event")
    parser.add_argument("--json", action="store_true", help="with --headless: summary as JSON")
