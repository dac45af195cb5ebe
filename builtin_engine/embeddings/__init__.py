"""An embedding model served on its own: model.py (encoder and pooling), batcher.py (forward
passes across requests), protocol.py, server.py (/v1/embeddings), cli.py (`serve` for it)."""
