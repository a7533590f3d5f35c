"""`ktree`: the command line. With no arguments it opens the sessions screen.

A dispatch table: each module of engine/commands/ registers its parser and its body (parsed flags
-> exit code). A usage error is one line and exit 2. The entry point; nothing below imports it.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys

from engine.commands import bench, dataset, eval, export, problems, run, sessions, show, suite
from engine.commands._common import USAGE_ERROR, db_path
from engine.commands._flags import Body, new_parser
from engine.commands._output import error, quiet_triton_teardown, say
from engine.launch import UsageError, check_cpu_timer

# In the order `ktree --help` lists them (`bench dataset` is the dataset command's, in bench's group).
MODULES = (run, suite, eval, sessions, show, export, problems, bench, dataset)


def build_parser() -> argparse.ArgumentParser:
    return _parser_and_table()[0]


def _parser_and_table() -> tuple[argparse.ArgumentParser, dict[str, Body]]:
    parser, commands = new_parser("LLM-driven search for faster CUDA kernels.")
    for module in MODULES:
        module.register(commands)
    return parser, {"": _browse, **commands.table}


def _browse(args: argparse.Namespace) -> int:
    """No subcommand: the sessions screen."""
    from engine.commands._tui import open_app

    return open_app(db_path(args))


def _times(name: str, args: argparse.Namespace) -> bool:
    """Whether the command may time on the cpu (so reads KTREE_CPU_TIMER); the TUI may start a search."""
    if name == "show":
        return bool(getattr(args, "profile", None))
    return name in ("", "run", "suite", "eval") or (name.startswith("bench ") and name != "bench dataset")


def command_name(args: argparse.Namespace) -> str:
    """The dispatch table's key for parsed flags: `bench timing`, `run`, or "" for none."""
    words = [args.command, getattr(args, "bench", None), getattr(args, "dataset", None)]
    return " ".join(w for w in words if w)


def main(argv: list[str] | None = None) -> int:
    quiet_triton_teardown()
    parser, commands = _parser_and_table()
    args = parser.parse_args(argv)
    try:
        name = command_name(args)
        if _times(name, args):
            check_cpu_timer()  # every evaluator reads it, the benches' and eval's too
        if name not in commands:
            raise UsageError(f"unknown command {args.command}")
        return commands[name](args)
    except UsageError as exc:
        error(str(exc))
        return USAGE_ERROR
    except KeyboardInterrupt:
        say("ktree: interrupted")
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except sqlite3.DatabaseError as exc:  # damage deeper in the file than opening it reads
        error(f"{db_path(args)} is damaged ({exc}); `sqlite3 DB .recover` may save its rows")
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
