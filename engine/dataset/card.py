"""The dataset card (README.md in the export's folder): a Hugging Face card header that names
each table's files (so `datasets.load_dataset(DIR, "variants")` finds them), then what each
column means, the counts, the GPUs and models, the reward formula and the caveats. Built from the
manifest and engine.dataset.columns alone, so it says what the files hold."""

from __future__ import annotations

from typing import Any

from engine.dataset.columns import TABLES

ABOUT = {
    "variants": "one row per variant (a candidate kernel): the tree around it, its prompt and reply, its"
                " code, its verdict and its cost",
    "ideas": "one row per optimization idea, with the call that proposed it and its best outcome",
    "problems": "one row per problem (reference source, sizes, backend) and device, with its reference times",
    "sft": "prompt -> completion pairs whose variant was correct and faster than the code its idea"
           " improves on",
    "preference": "pairs of replies to the same prompt (same idea, same parent code): chosen = correct and"
                  " faster, rejected = slower beyond timing noise, or not correct",
    "reward": "prompt, completion and a scalar reward from the verdict's status and speedup",
}


def _table(rows: dict[str, int], what: str) -> list[str]:
    if not rows:
        return ["(none)", ""]
    return [f"| {what} | variants |", "| --- | ---: |", *(f"| {k} | {n} |" for k, n in rows.items()), ""]


def card_text(manifest: dict[str, Any]) -> str:
    files: dict[str, int] = manifest["files"]
    splits = ("train", "test") if manifest["split"] else None
    header = ["---", "configs:"]
    for table in TABLES:
        if not any(f.startswith((f"{table}.", f"{table}-")) for f in files):
            continue
        header += [f"- config_name: {table}", "  data_files:"]
        for split in splits or ("train",):
            name = f"{table}-{split}.parquet" if splits else f"{table}.parquet"
            if name not in files:
                name = name.replace(".parquet", ".jsonl")
            header += [f"  - split: {split}", f"    path: {name}"]
    header += ["tags:", "- kernels", "- cuda", "- code-generation", "---", ""]

    sessions = manifest["sessions"]
    scripted = [s["id"] for s in sessions if s["scripted"]]
    counts = manifest["counts"]
    opts = manifest["options"]
    timed = counts.get("timed_against", ["PyTorch eager", "torch.compile"])  # (older manifests: both)
    timing = f"timed against {' and '.join(timed)}" if timed else "never timed (no reference time was taken)"
    lines = [
        "# ktree search dataset", "",
        f"Exported by ktree {manifest['ktree_version']} on {manifest['created_at']} from {manifest['database']}"
        f" (schema {manifest['schema_version']}): {len(sessions)} session(s) of"
        f" {len(counts['by_problem']) or len({s['problem'] for s in sessions})} problem(s),"
        f" {counts['variants']} variant(s) selected.", "",
        "Each session is one LLM-driven search for a faster kernel than a PyTorch reference: ideas in plain"
        " language, several implementations of each, every one compiled, checked against an fp64 reference and"
        f" {timing}.", "",
        "## Files", "",
        "| file | rows |", "| --- | ---: |", *(f"| {name} | {n} |" for name, n in files.items()), "",
        "Load one with pandas: `pandas.read_parquet(\"variants.parquet\")` (or"
        " `pandas.read_json(\"variants.jsonl\", lines=True)`), or with 🤗 datasets:"
        " `datasets.load_dataset(\"path/to/this/folder\", \"variants\")`.", "",
        "## Selection and hygiene", "",
        f"- views: {', '.join(opts['views'])}; formats: {', '.join(opts['formats'])}",
        f"- correct only: {'yes' if opts['correct_only'] else 'no'}; minimum speedup:"
        f" {opts['min_speedup'] if opts['min_speedup'] is not None else 'none'}",
        f"- deduplicated: {'yes, by the hash of the source with comments and whitespace removed (the first kept)' if opts['dedupe'] else 'no'}",  # noqa: E501
        "- flagged variants (an integrity check fired, or a review mark such as a speedup too good to trust)"
        " left out of: " + (", ".join(v for v, out in opts["exclude_flagged"].items() if out) or "no view"),
    ]
    if manifest["split"]:
        lines.append(f"- split by problem (seed {opts['seed']}, test fraction {opts['test_fraction']:g}):"
                     " test ="
                     f" {', '.join(manifest['split']['test_problems'])}; train ="
                     f" {', '.join(manifest['split']['train_problems'])}. No problem is in both.")
    else:
        lines.append("- no split: every row's `split` is `train`")
    if scripted:
        lines.append(f"- **scripted sessions included** ({', '.join(map(str, scripted))}): their prompts"
                     " are real but their replies are ktree's canned offline answers, not a model's;"
                     " `scripted` marks their rows")
    if manifest["scripted_left_out"]:
        lines.append(f"- scripted sessions left out: {', '.join(map(str, manifest['scripted_left_out']))}"
                     " (--include-scripted exports them)")
    lines += ["", "## Counts", "", "Over the selected variants (the rows of the variants table).", "",
              "### By status", "", *_table(counts["by_status"], "status"),
              "### By language", "", *_table(counts["by_language"], "language"),
              "### By problem", "", *_table(counts["by_problem"], "problem"),
              "### GPUs", "", *_table(counts["by_gpu"], "device"),
              "### Models", "", *_table(counts["by_model"], "model"),
              "## Reward", "", f"The reward view's `reward`: {manifest['reward_formula']}.", "",
              "## Caveats", "",
              "- Every time was measured at one fixed set of sizes per session (`sizes`); a kernel fast there"
              " may not be fast, or even correct, at others.",
              "- Correct means: several trials with fresh random inputs, `allclose(atol, rtol)` and a relative"
              " L2 error within tolerance against an fp64 reference (default tolerance 1e-2, the `atol`/`rtol`"
              " columns), NaN/Inf never passing. Looser than bit-exact; tighter tolerances may reject some.",
              "- Speedups are medians with ~95 % intervals (`speedup_lo`/`speedup_hi`); two variants whose"
              " intervals overlap are not ranked (no preference pair is made of them).",
              "- Scripted sessions (`scripted` = true) hold canned answers written for ktree's tests: real"
              " kernels, but not a model's output.",
              "- Integrity checks catch known hacks (timer patching, cached outputs, ...); a `correct` variant"
              " is not proven honest. `flags` and `notes` say what was seen.",
              "- A `correct` variant with a `library` mark (the `library` column) leaves the reference's main"
              " op (a convolution, a matmul) to torch/cuDNN/cuBLAS and does the rest in its own kernels; its"
              " reward has its own tier (above), and sft keeps it with the column saying so.", "",
              "## Columns", ""]
    for table, columns in TABLES.items():
        if not any(f.startswith((f"{table}.", f"{table}-")) for f in files):
            continue
        lines += [f"### {table}", "", ABOUT[table] + ".", "",
                  "| column | type | meaning |", "| --- | --- | --- |",
                  *(f"| {name} | {typ} | {meaning} |" for name, typ, meaning in columns), ""]
    return "\n".join(header + lines)
