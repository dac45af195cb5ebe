"""Client APIs the gateway serves, each an `Endpoint` on an `EngineProtocol` (see base.py)."""
from gateway.endpoints.base import Endpoint, EngineProtocol, ParsedRequest, StreamEvents
from gateway.endpoints.chat_completions import CHAT, CHAT_COMPLETIONS
from gateway.endpoints.completions import COMPLETION, COMPLETIONS

__all__ = ["CHAT", "CHAT_COMPLETIONS", "COMPLETION", "COMPLETIONS", "Endpoint",
           "EngineProtocol", "ParsedRequest", "StreamEvents"]
