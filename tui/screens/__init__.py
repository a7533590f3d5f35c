"""The screens (sessions, search, new search, compare, steering, help)."""
