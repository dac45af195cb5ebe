"""`--api-key`: a Bearer token every request must carry, as vLLM's flag asks for.

vLLM checks only /v1/*; this engine checks every route but `/health` and `/metrics` (liveness
and Prometheus scrapes stay open), because /tokenize, /kv/summary and /stats reveal what
other clients' prompts hold. The key is compared in constant time, and never logged.

    app.add_middleware(ApiKeyMiddleware, api_key=secret)
"""
from __future__ import annotations

import hmac

from common.connections import error_body

OPEN_PATHS = frozenset({"/health", "/metrics"})
API_KEY_ENV = "INFERPLANE_ENGINE_API_KEY"  # how a supervisor hands the key over (not argv)


class ApiKeyMiddleware:
    def __init__(self, app, api_key: str):
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._authorized(scope):
            return await self.app(scope, receive, send)
        body = error_body("Unauthorized: this engine needs `Authorization: Bearer <api key>`",
                          "authentication_error", "invalid_api_key")
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})

    def _authorized(self, scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return hmac.compare_digest(value, self._expected)
        return False
