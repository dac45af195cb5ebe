"""The builtin engine: `python -m builtin_engine serve` (cli.py). Layers, top down: cli.py,
embeddings/, serving/, runner/, structured/ and loader/, models/, kernels/, core/, errors.py
(docs/internals.md)."""
