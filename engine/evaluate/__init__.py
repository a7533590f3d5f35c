"""Evaluation of candidate kernels in subprocesses. Imports only torch and the standard library,
so it runs on a bare GPU box."""

from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import STATUSES, Verdict

__all__ = ["EvalJob", "STATUSES", "Verdict"]
