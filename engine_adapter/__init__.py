"""Adapters from the gateway's request path to inference engines."""
from engine_adapter.base import EngineAdapter, EngineError, EngineStream, LoadView

__all__ = ["EngineAdapter", "EngineError", "EngineStream", "LoadView", "create_adapter"]


def create_adapter(url: str, engine: str, client=None, timeouts=None, api_key=None) -> EngineAdapter:
    """The adapter for one backend: hosted providers ("litellm") via the SDK, the rest via HTTP."""
    from engine_adapter.openai_http import OpenAIHTTPAdapter, Timeouts

    if engine in ("litellm", "hosted"):
        from engine_adapter.litellm_adapter import LiteLLMAdapter

        t = timeouts or Timeouts()
        return LiteLLMAdapter(url, api_key=api_key, first_token_timeout=t.first_token,
                              total_timeout=t.total)
    return OpenAIHTTPAdapter(url, engine, client=client, timeouts=timeouts or Timeouts(),
                             api_key=api_key)
