"""What runs beside the candidate, in its process: the harness that checks and times it.

The integrity checks (`integrity_checks`) and their detectors (`integrity`, `tamper`), timing
(`timing`), timed calls the candidate cannot tell from checked ones (`rotation`), noise
(`noise`), the harness's clocks (`clocks`), foreign load on the GPU (`gpuload`), memory
proportional to the problem (`memory`), the check trials' expected answers (`expected_cache`)
within one host-wide budget (`ledger`), and the compile levers of `load_inline` builds
(`fastbuild`, with its header in `include/`). Torch and the standard library only; never the
host's side (tests/test_architecture.py).
"""
