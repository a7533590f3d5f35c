"""Every exported table's columns, each with its Arrow type and what it means, in one place: the
Parquet schemas and the dataset card's column reference are both built from these lists."""

from __future__ import annotations

import pyarrow as pa

Column = tuple[str, pa.DataType, str]

STR, INT, FLOAT, BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()
STRS, INTS = pa.list_(pa.string()), pa.list_(pa.int64())

_WHERE: list[Column] = [
    ("session_id", INT, "the ktree session (search) it comes from"),
    ("problem", STR, "the problem's name (KernelBench-format reference)"),
    ("split", STR, "train or test with --split-by problem (one problem never in both); else train"),
    ("scripted", BOOL, "true: canned answers of ktree's offline scripted provider, not a model's"),
]

VARIANTS: list[Column] = [
    *_WHERE[:2],
    ("node_id", INT, "the variant's node in the session's tree"),
    *_WHERE[2:],
    ("problem_path", STR, "the problem file the session read"),
    ("reference_source", STR, "the PyTorch reference (Model, get_inputs, get_init_inputs)"),
    ("sizes", STR, "JSON: the size constants the variant was evaluated at (fixed per session)"),
    ("backend", STR, "cuda or cpu"),
    ("language", STR, "the kernel language: cuda (load_inline C++; C++ on cpu) or triton"),
    ("precision", STR, "fp32 | fp16 | bf16 when inputs and weights were cast; null: the problem's dtypes"),
    ("atol", FLOAT, "the absolute tolerance of the correctness check"),
    ("rtol", FLOAT, "the relative tolerance of the correctness check"),
    ("gpu", STR, "the device that measured it (GPU name; the CPU's on the cpu backend)"),
    ("round", INT, "the search round that made it (1 = ideas on the reference)"),
    ("origin", STR, "llm (an implement prompt), fix (a fix prompt after a failed build), edit or human"),
    ("parent_node_id", INT, "the node whose code the prompt was built on (the reference is the root)"),
    ("parent_kind", STR, "root (the reference) or variant"),
    ("parent_source", STR, "that code"),
    ("base_speedup", FLOAT, "speedup vs eager of the code the idea improves on (1.0 for the reference)"),
    ("idea_node_id", INT, "the idea it implements"),
    ("idea_title", STR, "the idea's title"),
    ("idea_description", STR, "the idea in plain language"),
    ("prompt", STR, "the implement (or fix) prompt sent to the model; null for a human edit"),
    ("reply", STR, "the model's raw reply"),
    ("source", STR, "the solution (ModelNew) extracted from the reply"),
    ("source_hash", STR, "sha256 (16 hex) of the source without comments and whitespace (--dedupe)"),
    ("status", STR, "compile_error | runtime_error | timeout | crashed | incorrect | flagged | correct;"
                    " failed: no code came back; cancelled: never evaluated"),
    ("flags", STRS, "integrity checks that fired, review marks, and timing remarks (noisy, contended)"),
    ("notes", STR, "the node's note (why it failed or was cancelled, 'fix', 'edited by hand') and the"
                   " verdict's notes (torch ops' share, a degenerate problem), joined by '; '"),
    ("library", STR, "a correct variant's `library` mark: the reference's main ops it leaves to torch/cuDNN/"
                     "cuBLAS while its own kernels do the rest (e.g. aten.convolution), joined by ', ';"
                     " null: its own kernels do the main work (its own reward tier: see the card)"),
    ("library_share", FLOAT, "the reference's time share of those ops (0..1); null without the mark"),
    ("max_abs_err", FLOAT, "largest |out - ref| against the fp64 reference, over the trials"),
    ("max_rel_err", FLOAT, "largest relative error"),
    ("rel_l2_err", FLOAT, "||out - ref|| / ||ref||"),
    ("time_ms", FLOAT, "median time of the variant (ms)"),
    ("time_p10_ms", FLOAT, "10th percentile of its times"),
    ("time_p90_ms", FLOAT, "90th percentile of its times"),
    ("ref_eager_ms", FLOAT, "median time of the PyTorch eager reference, same worker, interleaved"),
    ("ref_compile_ms", FLOAT, "median time of the torch.compile reference (null: not taken)"),
    ("speedup_eager", FLOAT, "ref_eager_ms / time_ms"),
    ("speedup_lo", FLOAT, "low end of the eager speedup's ~95 % interval"),
    ("speedup_hi", FLOAT, "high end of that interval"),
    ("speedup_compile", FLOAT, "ref_compile_ms / time_ms"),
    ("sol_fraction", FLOAT, "fraction of speed-of-light (null where the problem's cost is unknown)"),
    ("diagnosis", STR, "why it is slow, from its profile: memory | compute | latency | launch (null: none)"),
    ("diagnosis_evidence", STR, "the profile's evidence for that diagnosis"),
    ("compile_s", FLOAT, "seconds its build took"),
    ("log", STR, "the evaluation's log tail (compiler errors, mismatches)"),
    ("model", STR, "the model that wrote the reply"),
    ("provider", STR, "its provider"),
    ("input_tokens", INT, "prompt tokens"),
    ("output_tokens", INT, "reply tokens"),
    ("reasoning_tokens", INT, "reasoning (thinking) tokens, billed apart from the reply"),
    ("cost_usd", FLOAT, "the call's cost in dollars"),
    ("pinned", BOOL, "a person pinned it as a parent"),
    ("pruned", BOOL, "a person pruned it (or a branch above it)"),
    ("human_actions", STRS, "steering commands a person gave on this node, in order (pin, prune, ...)"),
]

IDEAS: list[Column] = [
    *_WHERE[:2],
    ("idea_node_id", INT, "the idea's node in the session's tree"),
    *_WHERE[2:],
    ("round", INT, "the search round"),
    ("origin", STR, "llm, or human (a person's idea)"),
    ("parent_node_id", INT, "the code the idea improves on (the reference is the root)"),
    ("parent_kind", STR, "root or variant"),
    ("parent_speedup", FLOAT, "that code's speedup vs eager (1.0 for the reference)"),
    ("title", STR, "the idea's title"),
    ("description", STR, "the idea in plain language"),
    ("call_id", INT, "the LLM call that proposed it (several ideas share one call); null: a person's"),
    ("prompt", STR, "the idea prompt (code, timings, profile, what was tried)"),
    ("reply", STR, "the model's raw reply (all the ideas of the call)"),
    ("model", STR, "the model"),
    ("input_tokens", INT, "prompt tokens of the call"),
    ("output_tokens", INT, "reply tokens of the call"),
    ("reasoning_tokens", INT, "reasoning tokens of the call"),
    ("cost_usd", FLOAT, "the call's cost in dollars"),
    ("variants", INT, "variants written for the idea (fixes and edits included)"),
    ("correct", INT, "of those, correct"),
    ("best_status", STR, "the best outcome among them (correct best, compile_error worst)"),
    ("best_speedup", FLOAT, "the fastest correct one's speedup vs eager"),
    ("best_node_id", INT, "that variant"),
    ("improved", BOOL, "a correct variant beat parent_speedup"),
]

PROBLEMS: list[Column] = [
    ("problem", STR, "the problem's name"),
    *_WHERE[2:],
    ("problem_path", STR, "the file it was read from"),
    ("source_hash", STR, "sha256 (16 hex) of the reference source"),
    ("source", STR, "the PyTorch reference"),
    ("sizes", STR, "JSON: the size constants"),
    ("backend", STR, "cuda or cpu"),
    ("gpu", STR, "the device of the reference times on this row (null: nothing was timed)"),
    ("ref_eager_ms", FLOAT, "median over the evaluations of the eager reference's median time"),
    ("ref_compile_ms", FLOAT, "the same for torch.compile"),
    ("evaluations", INT, "how many timed evaluations these times come from"),
    ("sessions", INTS, "the sessions that searched it"),
    ("degenerate", BOOL, "the reference output does not depend on its inputs (null: not checked)"),
]

SFT: list[Column] = [
    *_WHERE[:2],
    ("node_id", INT, "the variant"),
    *_WHERE[2:],
    ("language", STR, "kernel language"),
    ("model", STR, "the model that wrote it"),
    ("prompt", STR, "the implement (or fix) prompt"),
    ("completion", STR, "the model's reply: correct and faster than the code the idea improves on"),
    ("speedup_eager", FLOAT, "its speedup vs eager"),
    ("base_speedup", FLOAT, "the speedup it beat"),
    ("library", STR, "its `library` mark's ops (the reference's main op left to a library); null: none"),
]

PREFERENCE: list[Column] = [
    *_WHERE[:2],
    *_WHERE[2:],
    ("idea_node_id", INT, "the idea both variants implement"),
    ("parent_node_id", INT, "the code both prompts were built on"),
    ("language", STR, "kernel language"),
    ("prompt", STR, "the prompt both replies answer (the same text)"),
    ("chosen", STR, "the better reply: correct and faster"),
    ("rejected", STR, "the worse reply: slower (beyond timing noise) or not correct"),
    ("chosen_node_id", INT, "the chosen variant"),
    ("rejected_node_id", INT, "the rejected variant"),
    ("chosen_status", STR, "always correct"),
    ("rejected_status", STR, "the rejected variant's status"),
    ("chosen_speedup", FLOAT, "speedup vs eager of the chosen"),
    ("rejected_speedup", FLOAT, "of the rejected (null unless correct)"),
    ("chosen_library", STR, "the chosen's `library` mark (null: its own kernels do the main work)"),
    ("rejected_library", STR, "the rejected's; an own-kernel answer beats a library-marked one at equal"
                              " speed (the reward tier decides between them)"),
    ("margin", FLOAT, "reward(chosen) - reward(rejected), by the card's reward formula"),
]

REWARD: list[Column] = [
    *_WHERE[:2],
    ("node_id", INT, "the variant"),
    *_WHERE[2:],
    ("language", STR, "kernel language"),
    ("model", STR, "the model that wrote it"),
    ("prompt", STR, "the implement (or fix) prompt"),
    ("completion", STR, "the model's reply"),
    ("status", STR, "its verdict status (failed: no code came back)"),
    ("speedup_eager", FLOAT, "its speedup vs eager (correct only)"),
    ("library", STR, "the `library` mark's ops (null: none); a marked correct variant has its own tier"),
    ("reward", FLOAT, "the scalar reward (formula in the card)"),
]

TABLES: dict[str, list[Column]] = {"variants": VARIANTS, "ideas": IDEAS, "problems": PROBLEMS,
                                   "sft": SFT, "preference": PREFERENCE, "reward": REWARD}


def schema(name: str) -> pa.Schema:
    return pa.schema([pa.field(col, typ) for col, typ, _ in TABLES[name]])


def names(name: str) -> list[str]:
    return [col for col, _, _ in TABLES[name]]
