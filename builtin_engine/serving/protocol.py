"""The engine's OpenAI request models (the error shape: builtin_engine/errors.py; the engine
imports nothing from the gateway)."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.runner.logprobs import MAX_TOP_LOGPROBS


class StreamOptions(BaseModel):
    include_usage: bool = False


# OpenAI fields this engine does not implement, with the values that ask for nothing: any
# other value is refused (400) rather than silently ignored.
UNSUPPORTED = {"functions": (None, []),
               "function_call": (None, "none", "auto"), "best_of": (None, 1), "suffix": (None, ""),
               "guided_json": (None,), "guided_regex": (None,), "guided_choice": (None,),
               "prompt_logprobs": (None,), "audio": (None,), "modalities": (None, ["text"]),
               "prediction": (None,)}
# Structured output and tools are served on chat completions only.
COMPLETION_UNSUPPORTED = {**UNSUPPORTED, "response_format": (None, {"type": "text"}),
                          "tools": (None, []), "tool_choice": (None, "none")}


class _GenerationRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    unsupported_fields: ClassVar[dict] = UNSUPPORTED
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    n: int = Field(1, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    priority: int = 0
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(1.0, gt=0.0, le=10.0)

    def unsupported_field(self) -> tuple[str, str] | None:
        """(param, what it asks for) of the first field this engine does not do, if any."""
        extra = self.model_extra or {}
        for name, harmless in self.unsupported_fields.items():
            value = extra.get(name)
            if not any(value == h and type(value) is type(h) for h in harmless):
                return name, name
        return None

    @field_validator("stream_options")
    @classmethod
    def _stream_options_need_stream(cls, value, info):
        # `stream` is declared first, so it is validated (and in info.data) by now
        if value is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed when stream is true")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _bias_range(cls, value: dict[int, float] | None) -> dict[int, float] | None:
        if value and any(not -100 <= bias <= 100 for bias in value.values()):
            raise ValueError("logit_bias values must be between -100 and 100")
        return value

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: Any) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > 16 or any(not s for s in stops):
            raise ValueError("stop must be at most 16 non-empty strings")
        return stops

    @field_validator("n")
    @classmethod
    def _single_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError("only n=1 is supported")
        return value

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        return SamplingParams(
            max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p,
            top_k=max(self.top_k, 0), seed=self.seed, stop=list(self.stop or []),
            stop_token_ids=list(self.stop_token_ids or []), ignore_eos=self.ignore_eos,
            min_tokens=self.min_tokens, logit_bias=dict(self.logit_bias or {}),
            presence_penalty=self.presence_penalty, frequency_penalty=self.frequency_penalty,
            repetition_penalty=self.repetition_penalty, logprobs=self.logprobs_count())

    def logprobs_count(self) -> int | None:
        """How many top logprobs per token the request wants; None: no logprobs at all."""
        return None


class ResponseFormat(BaseModel):
    """OpenAI's response_format: text, json_object, or json_schema {name, schema, strict}."""
    type: Literal["text", "json_object", "json_schema"]
    json_schema: "JsonSchemaFormat | None" = None

    @model_validator(mode="after")
    def _schema_given(self) -> "ResponseFormat":
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs json_schema")
        return self


class JsonSchemaFormat(BaseModel):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | bool = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class FunctionDefinition(BaseModel):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedToolChoice(BaseModel):
    class Name(BaseModel):
        name: str

    type: Literal["function"]
    function: Name


class ToolCall(BaseModel):
    """An earlier assistant turn's call (rendered back into the prompt)."""
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: Literal["function"] = "function"
    function: dict[str, Any]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = [p.get("text", "") for p in self.content if p.get("type") == "text"]
        return "".join(parts)


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    # vLLM's extensions: continue_final_message extends the last (assistant) message in place
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True

    def logprobs_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def tool_choice_name(self) -> str:
        """none | auto | required | the named function."""
        choice = self.tool_choice or ("auto" if self.tools else "none")
        return choice if isinstance(choice, str) else choice.function.name

    def active_tools(self) -> list[dict]:
        """The tools the model is offered (none when tool_choice is "none")."""
        if not self.tools or self.tool_choice_name() == "none":
            return []
        return [t.model_dump(exclude_none=True) for t in self.tools]

    @model_validator(mode="after")
    def _tool_choice(self) -> "ChatCompletionRequest":
        choice = self.tool_choice_name()
        if self.tool_choice is not None and choice != "none" and not self.tools:
            raise ValueError("tool_choice needs tools")
        names = [t.function.name for t in self.tools or ()]
        if choice not in ("none", "auto", "required") and choice not in names:
            raise ValueError(f"tool_choice names {choice!r}, which is not in tools")
        if len(set(names)) != len(names):
            raise ValueError("tools: function names must be unique")
        if self.active_tools() and self.response_format and self.response_format.type != "text":
            raise ValueError("tools and a JSON response_format cannot be combined")
        return self

    def unsupported_field(self) -> tuple[str, str] | None:
        """Besides the fields: content parts other than text (the models are text-only, and
        dropping an image would let the model answer about a picture it never saw)."""
        for i, message in enumerate(self.messages):
            for j, part in enumerate(message.content if isinstance(message.content, list) else ()):
                if part.get("type") != "text":
                    return (f"messages[{i}].content[{j}]",
                            f"content parts of type {part.get('type')!r}")
        return super().unsupported_field()

    @model_validator(mode="after")
    def _continuation(self) -> "ChatCompletionRequest":
        if self.continue_final_message:
            if self.add_generation_prompt:
                raise ValueError("continue_final_message needs add_generation_prompt=false")
            if self.messages[-1].role != "assistant":
                raise ValueError("continue_final_message needs a final assistant message")
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=true")
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_GenerationRequest):
    unsupported_fields: ClassVar[dict] = COMPLETION_UNSUPPORTED
    prompt: str | list[int] | list[str]
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)

    def logprobs_count(self) -> int | None:
        return self.logprobs

    @model_validator(mode="after")
    def _no_prompt_logprobs(self) -> "CompletionRequest":
        if self.echo and self.logprobs is not None:
            raise ValueError("echo with logprobs (prompt logprobs) is not supported")
        return self

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: Any) -> str | list[int]:
        if isinstance(value, list) and value and isinstance(value[0], str):
            if len(value) != 1:
                raise ValueError("only one prompt per request is supported")
            return value[0]
        return value


class TokenizeRequest(BaseModel):
    """vLLM's /tokenize: either a prompt or chat messages (rendered with the chat template)."""
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
