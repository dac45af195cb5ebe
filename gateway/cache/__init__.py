"""The gateway's response cache (exact and semantic): gateway/cache/response_cache.py."""
