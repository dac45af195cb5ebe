"""The OpenAI HTTP face of a generating engine.

- server.py (create_engine_app), text_stream.py (text deltas, stop strings, tool-call chunks),
  protocol.py (request models), adapters.py (LoRA adapter routes);
- app_setup.py (what the embeddings app shares), api_key.py, tracing.py, cli_options.py.
"""
