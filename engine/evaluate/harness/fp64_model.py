"""The reference's own tensors (parameters, buffers, plain tensor attributes: what its weights take)
and its fp64 copy, made tensor by tensor and only where the answers are fp64 (plain tensor
attributes are left in fp32 by `.double()`, and a deep copy would hold the model once more on the way).

Runs in the evaluation child; torch and the standard library only.
"""

from __future__ import annotations

from typing import Any

from engine.evaluate.harness import clocks, memory


def model_tensors(model: Any) -> list[Any]:
    """A model's tensors, each once: its parameters, buffers, and the plain tensor attributes of its
    modules (state such as an LSTM's `self.h0 = torch.randn(...)`, which is neither)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return []
    found: dict[int, Any] = {}
    for t in (*model.parameters(), *model.buffers()):
        found.setdefault(id(t), t)
    for module in model.modules():
        for value in vars(module).values():
            for t in (value if isinstance(value, (list, tuple)) else (value,)):
                if isinstance(t, torch.Tensor):
                    found.setdefault(id(t), t)
    return list(found.values())


def weights(model: Any) -> int:
    """A model's parameters, buffers and plain tensor attributes (bytes): part of the reference's
    own memory."""
    return sum(t.numel() * t.element_size() for t in model_tensors(model))


def weights64(model: Any) -> int:
    """What `weights` takes with its floating tensors in fp64 (an fp64 copy of the model)."""
    return memory.fp64_bytes(model_tensors(model))


def fp64_copy(model: Any) -> Any:
    """An fp64 copy of `model`: its floating parameters, buffers and plain tensor attributes in fp64
    (`.double()` alone leaves plain tensors in their precision: an LSTM's initial state then meets
    fp64 inputs), each made straight from the original (no full copy in the original precision on
    the way: a model is held no more times than needed)."""
    import copy

    import torch

    if not isinstance(model, torch.nn.Module):
        return model
    memo: dict[int, Any] = {}
    for t in model_tensors(model):
        if t.is_floating_point() and t.dtype != torch.float64:
            with torch.no_grad():
                t64 = t.detach().to(torch.float64)
            memo[id(t)] = torch.nn.Parameter(t64, requires_grad=t.requires_grad) \
                if isinstance(t, torch.nn.Parameter) else t64
    return copy.deepcopy(model, memo).double()


class Fp64Reference:
    """The reference in fp64, made on its first call (`model`, or called as the model is): where the
    memory plan answers in the reference's own precision, no fp64 copy is ever made."""

    def __init__(self, ref: Any):
        self.ref = ref
        self._model: Any = None

    def model(self) -> Any:
        if self._model is None:
            self._model = fp64_copy(self.ref)
        return self._model

    def __call__(self, *args: Any) -> Any:
        import torch

        model = self.model()
        return clocks.module_call(model, *args) if isinstance(model, torch.nn.Module) else model(*args)
