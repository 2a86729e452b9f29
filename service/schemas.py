"""Request bodies, checked just enough to route, limit and account for a request.

Everything else passes through to vLLM untouched (`extra="allow"`), and vLLM validates it.
`strict` so that what we checked (an int max_tokens, a bool stream) is what the engine reads.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ChatMessage(_Open):
    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(_Open):
    include_usage: bool = False


class _Generation(_Open):
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1)  # choices: each may generate max_tokens


class ChatCompletionRequest(_Generation):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


TokenInput = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(_Generation):
    prompt: TokenInput


class EmbeddingRequest(_Open):
    model: str
    input: TokenInput


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "private-llm"


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]
