"""Real servers on loopback that speak the protocols of services a test or benchmark cannot reach:
an OpenAI-compatible chat server (`llm_server`) and an `/embeddings` server (`embeddings_server`).
Tests and benchmarks use them; the product never imports them."""
