"""The evaluation child's loading: build (or reuse) and import the candidate's solution in its
kernel language (engine.evaluate.languages: CUDA C++ through load_inline, Triton, ...), and make
the problem's models and inputs on the device, cast to the job's precision.

Runs untrusted code in the child's process (engine.evaluate.child.evaluation); torch and the standard
library only.
"""

from __future__ import annotations

from typing import Any

from engine.evaluate import languages
from engine.evaluate.jobs import EvalJob
from engine.evaluate.languages.common import (  # noqa: F401  (the child's modules import them from here)
    EvalFailure,
    build_key,
    format_exc,
    make_inputs,
    model_to,
    precision_dtype,
    solution_build_dir,
    to_device,
)
from engine.evaluate.loading import load_module_from_path


def load_solution(job: EvalJob) -> Any:
    """Build (or reuse) and import the solution module in its language
    (engine.evaluate.languages); classify any failure."""
    return languages.for_job(job).load(job, *solution_build_dir(job))


def retarget_note(job: EvalJob) -> dict[str, Any] | None:
    """The arch flags the last solution build rewrote (engine.evaluate.harness.fastbuild.retarget_flags):
    original and new flags and a line for the log; None where none was."""
    from engine.evaluate.harness import fastbuild

    if not fastbuild.RETARGETED:
        return None
    last = fastbuild.RETARGETED[-1]
    return {**last, "note": f"arch retargeted: {' '.join(last['original'])} -> {' '.join(last['flags'])}"
                            f" ({last['why']})"}


def sync_state(ref: Any, new: Any) -> None:
    """Give ModelNew the reference's parameters where names and shapes match exactly."""
    ref_state = ref.state_dict()
    new_state = new.state_dict()
    shared = {
        k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape
    }
    if shared:
        new.load_state_dict(shared, strict=False)


def make_reference(job: EvalJob, problem: Any, device: str) -> tuple[Any, list[Any], Any]:
    """(the reference model, its init inputs, the precision it is cast to), its weights drawn from
    the job's seed: the same in every process that makes it (the evaluation, and on the cpu the
    worker's server making the check set: engine.evaluate.child.worker_process)."""
    import torch

    init_inputs = problem.get_init_inputs()
    cast = precision_dtype(job)
    torch.manual_seed(job.seed)
    return model_to(problem.Model(*init_inputs), device, cast).eval(), init_inputs, cast


def reference_on_inputs(job: EvalJob) -> tuple[str, Any, Any]:
    """(device, the reference model, its timing inputs), seeded as the evaluation seeds them."""
    import torch

    device = "cuda" if job.backend == "cuda" else "cpu"
    problem = load_module_from_path(job.problem_path, job.sizes)
    torch.manual_seed(job.seed)
    model = model_to(problem.Model(*problem.get_init_inputs()), device, precision_dtype(job)).eval()
    torch.manual_seed(job.seed + 2000)
    return device, model, make_inputs(problem, device, precision_dtype(job))


def model_and_inputs(job: EvalJob) -> tuple[Any, Any, str]:
    """(the model a profile runs: the candidate, else the reference; its inputs; the device),
    seeded as the evaluation seeds them (engine.evaluate.profile.profiler's subprocess side)."""
    import torch

    device = "cuda" if job.backend == "cuda" else "cpu"
    problem = load_module_from_path(job.problem_path, job.sizes)
    init = problem.get_init_inputs()
    torch.manual_seed(job.seed)
    ref = problem.Model(*init)
    if job.solution_source:
        solution = load_solution(job)
        torch.manual_seed(job.seed)
        model = solution.ModelNew(*init)
        if isinstance(model, torch.nn.Module) and isinstance(ref, torch.nn.Module):
            sync_state(ref, model)
            model = model.to(device).eval()
    else:
        model = ref.to(device).eval()
    torch.manual_seed(job.seed + 2000)
    return model, make_inputs(problem, device), device
