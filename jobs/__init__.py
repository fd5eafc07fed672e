"""Ray Data jobs: history import, batched (re-)embedding, consolidation, maintenance."""
