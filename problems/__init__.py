"""Built-in KernelBench-format problems shipped with ktree (data, loaded by engine.problems)."""
