"""ktree's terminal app (Textual)."""
