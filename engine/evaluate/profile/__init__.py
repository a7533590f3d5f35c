"""Profiles of a correct variant: the profiler (ncu, torch.profiler, the cpu's achieved rates)
and the diagnosis read from them."""
