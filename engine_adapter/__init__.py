"""Adapters from the gateway's request path to inference engines."""
from common.vocabulary import EngineKind
from engine_adapter.base import EngineAdapter, EngineError, EngineStream, LoadView

__all__ = ["EngineAdapter", "EngineError", "EngineStream", "LoadView", "create_adapter"]


def create_adapter(url: str, engine: str, client=None, timeouts=None, api_key=None,
                   managed: bool = False) -> EngineAdapter:
    """The adapter for one backend: hosted providers ("litellm") via the SDK, the rest via HTTP.
    A builtin or managed engine is called with its derived key (engine_keys) unless `api_key`
    is given."""
    from engine_adapter import engine_keys
    from engine_adapter.openai_http import OpenAIHTTPAdapter, Timeouts

    if api_key is None and engine_keys.keyed(engine, managed):
        api_key = engine_keys.key_for(url)
    if engine in (EngineKind.LITELLM, "hosted"):
        from engine_adapter.litellm_adapter import LiteLLMAdapter

        t = timeouts or Timeouts()
        return LiteLLMAdapter(url, api_key=api_key, first_token_timeout=t.first_token,
                              total_timeout=t.total)
    return OpenAIHTTPAdapter(url, engine, client=client, timeouts=timeouts or Timeouts(),
                             api_key=api_key)
