"""What several command tests share: a usage error's one line, the new-search form's values."""

from __future__ import annotations


def assert_one_line_usage_error(proc, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    # (a machine where strict isolation cannot run adds a note line before it)
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("ktree: note:")]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


FORM = {"problem": "softmax", "path": "", "provider": "auto", "models": "", "strategy": "tree",
        "backend": "auto", "rounds": "2", "ideas": "3", "variants": "2", "top": "2", "budget_usd": "",
        "budget_tokens": ""}
