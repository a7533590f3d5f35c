"""Searches as training data: `ktree dataset export` writes the store's sessions as Parquet and
JSONL tables (variants, ideas, problems), training views (sft, preference, reward), a manifest and
a dataset card; `ktree dataset stats` counts the same rows without writing them."""
