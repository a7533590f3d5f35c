"""The terminal app: screens, keys, the model, sizes, snapshots."""
