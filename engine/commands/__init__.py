"""One module per subcommand: a parsed request in, an exit code out. No command imports another."""
