"""Evaluation of candidate kernels in subprocesses.

Self-contained: imports only torch, the standard library and its own modules (NVML through ctypes
where present), never the rest of `engine`, so it runs on a bare GPU box and on a Ray node with
nothing else of ktree there (tests/evaluate/test_self_contained.py holds it to that). What it needs
to know about a problem beyond its file (its work, its tolerance) comes with each job.

Its top holds what both sides share, and imports none of its folders (host/, harness/, child/,
languages/, profile/): a job is built on the host's side, with engine.evaluate.host.make_job.make_job.
"""

from engine.evaluate.base import Evaluator, PhaseCallback
from engine.evaluate.jobs import EvalJob
from engine.evaluate.verdict import STATUSES, Verdict

__all__ = ["EvalJob", "Evaluator", "PhaseCallback", "STATUSES", "Verdict"]
