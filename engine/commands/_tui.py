"""The commands' one door into the TUI (a helper, not a command): the app, with the key bindings
from the config file. Only the entry point's rooms open the TUI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.launch import UsageError


def keymap() -> dict[str, str]:
    """Key bindings from the config file's [bindings] table (binding id = "key")."""
    from engine.config import ConfigError, load_config
    from tui.app import keymap_from_config

    try:
        return keymap_from_config(load_config().raw)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def open_app(db: Path, **options: Any) -> int:
    """Run the app on `db` until it quits; its return code."""
    from tui.app import KtreeApp

    # The store opens inside the app's event loop (aiosqlite binds to it).
    app = KtreeApp(db_path=db, keymap=keymap(), **options)
    app.run()
    return app.return_code or 0
