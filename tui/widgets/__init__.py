"""The widgets the screens compose."""
