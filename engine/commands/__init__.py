"""One module per subcommand: a parsed request in, an exit code out. No command imports another;
the helpers they share are named with a leading underscore (`_common`, `_output`, `_tui`)."""
