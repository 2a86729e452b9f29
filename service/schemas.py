"""Request bodies, checked just enough to route, limit and account for a request.

Everything else passes through to vLLM untouched (`extra="allow"`), and vLLM validates it.
`strict` so that what we checked (an int max_tokens, a bool stream) is what the engine reads.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


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


class MultiModalInput(_Open):
    """vLLM's ScoreMultiModalParam: content parts instead of a text."""

    content: list[dict[str, Any]] = Field(min_length=1)


ScoreInput = str | MultiModalInput


class ScoringRequest(_Open):
    model: str
    # vLLM's ScoringRequestMixin fields that change how much work a request is; the rest
    # (instruction, chat_template_kwargs, use_activation, truncate_prompt_tokens, ...) pass.
    max_tokens_per_query: int = Field(default=0, ge=0)
    max_tokens_per_doc: int = Field(default=0, ge=0)

    def pairs(self) -> tuple[list[ScoreInput], list[ScoreInput]]:
        """(queries, documents): one query scored against each document, or pairs 1:1."""
        raise NotImplementedError


def _listed(value: ScoreInput | list[ScoreInput]) -> list[ScoreInput]:
    return value if isinstance(value, list) else [value]


class RerankRequest(ScoringRequest):
    """/v1/rerank (Jina/Cohere shape): one query, documents ranked by relevance."""

    query: ScoreInput
    documents: ScoreInput | list[ScoreInput]
    top_n: int = Field(default=0, ge=0)

    def pairs(self) -> tuple[list[ScoreInput], list[ScoreInput]]:
        return [self.query], _listed(self.documents)


# vLLM's /v1/score accepts any one of these pairs of fields (ScoreRequest's four shapes).
SCORE_PAIRS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


class ScoreRequest(ScoringRequest):
    """/v1/score: the relevance of each pair, one side against the other (1:N or N:N)."""

    queries: ScoreInput | list[ScoreInput] | None = None
    documents: ScoreInput | list[ScoreInput] | None = None
    items: ScoreInput | list[ScoreInput] | None = None
    data_1: ScoreInput | list[ScoreInput] | None = None
    data_2: ScoreInput | list[ScoreInput] | None = None
    text_1: ScoreInput | list[ScoreInput] | None = None
    text_2: ScoreInput | list[ScoreInput] | None = None

    @model_validator(mode="after")
    def _one_pair(self) -> "ScoreRequest":
        given = [p for p in SCORE_PAIRS if all(getattr(self, f) is not None for f in p)]
        if len(given) != 1:
            shapes = " or ".join(f"{a!r} and {b!r}" for a, b in SCORE_PAIRS)
            raise ValueError(f"give exactly one pair of inputs to score: {shapes}")
        used = set(given[0])
        stray = [f for a, b in SCORE_PAIRS for f in (a, b) if f not in used and getattr(self, f) is not None]
        if stray:
            raise ValueError(f"{', '.join(sorted(set(stray)))} cannot be given with {' and '.join(given[0])}")
        return self

    def pairs(self) -> tuple[list[ScoreInput], list[ScoreInput]]:
        first, second = next(p for p in SCORE_PAIRS if all(getattr(self, f) is not None for f in p))
        return _listed(getattr(self, first)), _listed(getattr(self, second))


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "private-llm"


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]
