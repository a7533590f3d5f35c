"""Recording: what a search leaves for its readers. The SQLite store (`store`, its tables in
`schema`), the typed events published after each commit (`events`), and the human commands that
steer a running search (`control`), queued in the store; the kill points the resume tests
stop the engine at, between commits (`crash`); and what a reader is handed from it: text reports
(`report`: a verdict in a line or two, sessions and problems as tables) and a variant as a
KernelBench solution file (`solution_file`).

Below the search and the launch, above the records every room shares (engine.domain): nothing here
imports the search, the launch, the commands or the TUI (tests/test_architecture.py).
"""
