"""Every error code a client or an operator can read in an error body, named once, and the
kinds of engine failure the gateway counts.

    raise OpenAIError(429, "too many queued requests", code=ErrorCode.QUEUE_FULL)
    class QueueFull(InferplaneError):
        status, code = 429, ErrorCode.QUEUE_FULL
    raise EngineError(UpstreamErrorKind.CONNECT, f"cannot connect to {url}")

The values are the strings on the wire (`{"error": {"code": "queue_full", ...}}`), so the
members compare equal to them and clients see no change.
"""
from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    ADAPTER_LOAD_FAILED = "adapter_load_failed"
    ADAPTER_NOT_FOUND = "adapter_not_found"
    ADAPTER_SLOTS_BUSY = "adapter_slots_busy"
    ALREADY_EXISTS = "already_exists"
    BATCH_EXPIRED = "batch_expired"
    BACKEND_NOT_ALLOWED = "backend_not_allowed"
    BODY_TIMEOUT = "body_timeout"
    BODY_TOO_LARGE = "body_too_large"
    BUDGET_EXCEEDED = "budget_exceeded"
    COLD_START_TIMEOUT = "cold_start_timeout"
    CONFLICT = "conflict"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    CONTROL_PLANE_UNAVAILABLE = "control_plane_unavailable"
    DATABASE_UNAVAILABLE = "database_unavailable"
    DUPLICATE_CUSTOM_ID = "duplicate_custom_id"
    EMPTY_FILE = "empty_file"
    ENGINE_BUDGET_EXHAUSTED = "engine_budget_exhausted"
    ENGINE_START_FAILED = "engine_start_failed"
    ENGINE_UNAVAILABLE = "engine_unavailable"
    ERROR_BUDGET_EXHAUSTED = "error_budget_exhausted"
    FORBIDDEN = "forbidden"
    GUARDRAIL_BLOCKED = "guardrail_blocked"
    GUARDRAIL_UNAVAILABLE = "guardrail_unavailable"
    INTERNAL_ERROR = "internal_error"
    INVALID_API_KEY = "invalid_api_key"
    INVALID_CONTENT_TYPE = "invalid_content_type"
    INVALID_FILE = "invalid_file"
    INVALID_IF_MATCH = "invalid_if_match"
    INVALID_JSON = "invalid_json"
    INVALID_JSON_LINE = "invalid_json_line"
    INVALID_LORA_ADAPTER = "invalid_lora_adapter"
    INVALID_METHOD = "invalid_method"
    INVALID_REQUEST = "invalid_request"
    INVALID_ROLE = "invalid_role"
    INVALID_STATE = "invalid_state"
    INVALID_TOKEN = "invalid_token"
    INVALID_URL = "invalid_url"
    INVALID_VALUE = "invalid_value"
    KEY_REVOKED = "key_revoked"
    LAST_ADMIN = "last_admin"
    LORA_ALREADY_LOADED = "lora_already_loaded"
    LORA_NOT_FOUND = "lora_not_found"
    LORA_PATH_NOT_ALLOWED = "lora_path_not_allowed"
    LORA_PATH_NOT_FOUND = "lora_path_not_found"
    LORA_SLOTS_FULL = "lora_slots_full"
    MISSING_API_KEY = "missing_api_key"
    MISSING_REQUIRED_PARAMETER = "missing_required_parameter"
    MLFLOW_ERROR = "mlflow_error"
    MLFLOW_UNAVAILABLE = "mlflow_unavailable"
    MODEL_NOT_FOUND = "model_not_found"
    NO_GATEWAY = "no_gateway"
    NO_READY_BACKEND = "no_ready_backend"
    NOT_A_CHAT_MODEL = "not_a_chat_model"
    NOT_FOUND = "not_found"
    NOT_STARTABLE = "not_startable"
    PREVIOUS_RESPONSE_NOT_FOUND = "previous_response_not_found"
    QUEUE_FULL = "queue_full"
    QUEUE_TIMEOUT = "queue_timeout"
    RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"
    REGISTRY_ERROR = "registry_error"
    REQUEST_FAILED = "request_failed"
    ROLLOUT_IN_PROGRESS = "rollout_in_progress"
    ROW_VERSION_MISMATCH = "row_version_mismatch"
    SLO_UNAVAILABLE = "slo_unavailable"
    TEAM_IN_USE = "team_in_use"
    TEAM_NOT_FOUND = "team_not_found"
    TIER_ERROR = "tier_error"
    TOKEN_EXPIRED = "token_expired"
    TOKENS_EXCEEDED = "tokens_exceeded"
    TOO_MANY_LINES = "too_many_lines"
    UNSUPPORTED_CONTENT_TYPE = "unsupported_content_type"
    UNSUPPORTED_ENDPOINT = "unsupported_endpoint"
    UNSUPPORTED_PARAMETER = "unsupported_parameter"
    UNSUPPORTED_VALUE = "unsupported_value"


class UpstreamErrorKind(StrEnum):
    """Why a call to an engine failed: the `kind` label of inferplane_upstream_errors_total and
    what retries, breakers and stream resumption decide on."""
    CONNECT = "connect"                          # no connection (refused, reset before a byte)
    TIMEOUT = "timeout"                          # no answer within the request's timeout
    FIRST_TOKEN_TIMEOUT = "first_token_timeout"  # a stream sent nothing in time
    HTTP_4XX = "http_4xx"                        # the engine refused the request
    HTTP_5XX = "http_5xx"                        # the engine failed
    PROTOCOL = "protocol"                        # an answer that is not what the API says
    ABORTED = "aborted"                          # the call was given up before its answer
    BREAKER_OPEN = "breaker_open"                # not called: its circuit breaker is open

    @classmethod
    def of_status(cls, status: int) -> "UpstreamErrorKind":
        """The kind of an HTTP error status from an engine."""
        return cls.HTTP_4XX if status < 500 else cls.HTTP_5XX


__all__ = ["ErrorCode", "UpstreamErrorKind"]
