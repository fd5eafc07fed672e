"""The `agent-memory` command line and `make run`'s demo: the outermost layer, above the Serve app."""
