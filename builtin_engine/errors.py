"""The engine's one error type and OpenAI's error shape, for every layer of the engine.

    raise EngineError(400, "prompt contains token ids outside the vocabulary", "prompt")
    return exc.response()                    # JSONResponse {"error": {message, type, param, code}}
    return error_response(400, "We could not parse the JSON body of your request.")
"""
from __future__ import annotations

from fastapi.responses import JSONResponse


class EngineError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.code, self.kind = code, kind

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.param, self.code, self.kind)


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   kind: str = "invalid_request_error") -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)
