"""The command line: commands and their messages, launch, options, settings, problems, benches."""
