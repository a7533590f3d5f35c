"""The subjects of the benches that evaluate real kernels: the scripted library's honest ones
(those that declare "Intended outcome: correct"), for the seed problems."""

from __future__ import annotations

import re
from pathlib import Path

from engine.domain import DEFAULT_LANGUAGE
from engine.llm.scripted import DATA, library_dir

SEED_PROBLEMS = ("softmax", "layernorm", "matmul", "conv2d", "conv_relu_maxpool")
INTENDED_CORRECT = re.compile(r"Intended outcome:\s*correct\b", re.IGNORECASE)


def honest_variants(problem: str, backend: str, language: str = DEFAULT_LANGUAGE) -> list[Path]:
    """The scripted library's files for this problem that declare themselves correct."""
    folder = DATA / problem / library_dir(backend, language)
    return [f for f in sorted(folder.glob("*_*.py")) if INTENDED_CORRECT.search(f.read_text())]
