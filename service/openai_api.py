"""The OpenAI-compatible API: /v1/models (a FastAPI route) and the relayed POST routes, as
vLLM serves them: chat completions and completions (generate models), embeddings (embed
models), rerank and score (score models: cross-encoders).

The POST routes are served by `OpenAIRoutes`, an ASGI layer in front of FastAPI's router:
on every request they are the hot path, and FastAPI's routing, dependency solving and
response handling cost more CPU than the relay itself (measured: CPU per streamed request
fell by a third). The OpenAPI document still describes them (`openapi_paths`), and their
errors are the same OpenAI bodies as everywhere else.
"""

from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from service.accesslog import RequestInfo
from service.auth import ApiKey, KeyDep
from service.errors import ERROR_RESPONSES, GatewayError, invalid_request, send_error
from service.limits import estimate_chat_tokens, estimate_pair_tokens, estimate_tokens, reserve_or_raise
from service.proxy import ProxyCall
from service.resume_families import family
from service.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    ModelCard,
    ModelList,
    RerankRequest,
    ScoreRequest,
    ScoringRequest,
    StreamOptions,
)
from service.state import Gateway
from service.stream_resume import StreamResume, admit

api = APIRouter(prefix="/v1", tags=["openai"], responses=ERROR_RESPONSES)


@api.get("/models", response_model=ModelList)
async def list_models(request: Request, key: KeyDep) -> ModelList:
    gw = request.app.state.gateway
    return ModelList(
        data=[ModelCard(id=m, created=gw.started_at) for m in gw.router.by_model if key.allows(m)]
    )


ApiBody = ChatCompletionRequest | CompletionRequest | EmbeddingRequest | RerankRequest | ScoreRequest
ROUTES: dict[str, type[ApiBody]] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/embeddings": EmbeddingRequest,
    "/v1/rerank": RerankRequest,
    "/v1/score": ScoreRequest,
}
# The engine tasks (EngineConfig.task) that answer each route, as vLLM serves them: another
# task's engine would answer with its own 404/400/500, so the gateway refuses it first and says
# why. vLLM scores with an embedding model too (cosine of the two embeddings).
ROUTE_TASKS: dict[str, frozenset[str]] = {
    "/v1/chat/completions": frozenset({"generate"}),
    "/v1/completions": frozenset({"generate"}),
    "/v1/embeddings": frozenset({"embed"}),
    "/v1/rerank": frozenset({"score", "embed"}),
    "/v1/score": frozenset({"score", "embed"}),
}


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


class OpenAIRoutes:
    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gw = gateway
        header = gateway.settings.session_header
        self.session_header = header.encode() if header else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        model = ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if model is None:
            await self.app(scope, receive, send)
            return
        info: RequestInfo = scope["state"]["info"]
        try:
            if scope["method"] != "POST":
                raise GatewayError(405, f"Use POST for {scope['path']}.", code="method_not_allowed")
            key: ApiKey = scope["state"]["key"]  # checked by AdmissionMiddleware
            raw = await _read_body(receive)
            try:
                body = model.model_validate_json(raw)
            except ValidationError as exc:
                raise invalid_request(exc.errors(include_url=False)) from None
            call = await self._prepare(scope, key, body, raw, info)
        except GatewayError as exc:
            info.error = exc.code
            await send_error(send, exc)
            return
        await call(scope, receive, send)

    async def _prepare(
        self, scope: Scope, key: ApiKey, body: ApiBody, raw: bytes, info: RequestInfo
    ) -> ProxyCall:
        gw = self.gw
        model = body.model
        # Models a key may not use are as unknown to it as models that do not exist.
        if model not in gw.router.by_model or not key.allows(model):
            raise GatewayError(404, f"The model '{model}' does not exist.", code="model_not_found")
        info.model = model
        path = scope["path"]
        tasks = {e.task for e in gw.router.by_model[model]}
        if not tasks & ROUTE_TASKS[path]:
            task = "/".join(sorted(tasks))
            served = ", ".join(p for p, t in ROUTE_TASKS.items() if t & tasks) or "no route"
            raise GatewayError(
                400,
                f"The model '{model}' is a {task} model: {path} is not served for it (use {served}).",
                code="model_task_mismatch",
                param="model",
            )
        if not gw.router.any_ready(model):
            raise GatewayError(
                503,
                f"No healthy engine is serving model '{model}'.",
                "server_error",
                "no_healthy_engine",
                {"Retry-After": "1"},
            )
        choices = 1
        if isinstance(body, ChatCompletionRequest):
            prompt_tokens = estimate_chat_tokens(body.messages)
            asked = body.max_completion_tokens or body.max_tokens
            choices = body.n
        elif isinstance(body, CompletionRequest):
            prompt_tokens, asked = estimate_tokens(body.prompt), body.max_tokens
            # a list of prompts (strings, or token lists) is answered with n choices for each
            batch = len(body.prompt) if isinstance(body.prompt, list) and body.prompt and not isinstance(
                body.prompt[0], int) else 1
            choices = body.n * batch
        elif isinstance(body, ScoringRequest):
            prompt_tokens, asked = estimate_pair_tokens(*body.pairs()), 0
        else:
            prompt_tokens, asked = estimate_tokens(body.input), 0
        # The quota first: a request it refuses takes nothing from the rate limits. It may cap
        # the completion to what the quota has left (service/usage.py).
        ticket = await gw.usage.admit(key, prompt_tokens, asked, choices)
        completion_tokens = asked if asked is not None else gw.settings.limits.default_completion_reserve
        if ticket.completion_cap is not None:
            cap = completion_tokens = ticket.completion_cap
            context = gw.router.context.get(model)
            if asked is None and context is not None:
                # The client set no max_tokens, so vLLM would have fit the answer in the context
                # itself; the one the gateway sets must fit too, or vLLM refuses the request.
                cap = max(1, min(cap, context - prompt_tokens))
            if cap != asked:
                raw = _capped(body, raw, cap)
        try:
            # The request itself was charged on its headers (AdmissionMiddleware): its tokens now.
            reserved = await reserve_or_raise(
                gw.limiter, key, prompt_tokens + completion_tokens * choices, requests=0
            )
        except GatewayError:
            await gw.usage.release(key, ticket)
            raise
        resume = None
        if isinstance(body, (ChatCompletionRequest, CompletionRequest)) and body.stream:
            resume = admit(path, body, model not in gw.router.no_resume,
                           family(gw.router.resume_family.get(model)))
        raw, strip_usage = _with_usage(body, raw, info, resume)
        if gw.settings.log_prompts:
            info.prompt = _prompt(body)
        if gw.retention is not None:  # audit.retain: redacted when the record is written
            info.retained = gw.retention.start(_prompt(body) if gw.retention.prompts else None)
        session = _header(scope, self.session_header) if self.session_header else None
        return ProxyCall(
            gw.upstream, info, key, scope["path"], raw, model, strip_usage, reserved, session, ticket, resume
        )


def _prompt(body: ApiBody) -> Any:
    """What the access log records as the prompt (log_prompts): the request's input fields."""
    if isinstance(body, ScoringRequest):
        first, second = body.pairs()
        return {"queries": [_plain(q) for q in first], "documents": [_plain(d) for d in second]}
    field: str = next(f for f in ("messages", "prompt", "input") if f in type(body).model_fields)
    return body.model_dump(include={field})[field]


def _plain(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


def _capped(body: ApiBody, raw: bytes, cap: int) -> bytes:
    """The request with its completion limit set to `cap`: the field the client used
    (max_completion_tokens or max_tokens), or max_tokens when it set none."""
    if isinstance(body, (EmbeddingRequest, ScoringRequest)):
        return raw  # no completion to cap
    if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens is not None:
        body.max_completion_tokens = cap
    else:
        body.max_tokens = cap
    return body.model_dump_json(exclude_unset=True).encode()


def _with_usage(
    body: ApiBody, raw: bytes, info: RequestInfo, resume: StreamResume | None = None
) -> tuple[bytes, bool]:
    """The bytes to send upstream (the client's own, unless changed), and whether to hide
    the usage event from the client.

    A stream is accounted from its final usage event, so the engine is always asked for one;
    if the client did not ask, the gateway drops it on the way back. A stream that may be
    resumed asks for the usage in every chunk too (service/stream_resume.py says why)."""
    if isinstance(body, (EmbeddingRequest, ScoringRequest)) or not body.stream:
        return raw, False
    info.stream = True
    continuous = resume is not None and resume.resumable and not resume.client_continuous
    if "stream_options" not in body.model_fields_set:
        # The usual case, spliced into the client's bytes rather than re-serialized: they
        # were just validated as a JSON object without this key.
        options = b'{"include_usage":true,"continuous_usage_stats":true}' if continuous else b'{"include_usage":true}'
        return raw[: raw.rindex(b"}")] + b',"stream_options":' + options + b"}", True
    strip = True
    if body.stream_options is None:
        body.stream_options = StreamOptions(include_usage=True)
    elif not body.stream_options.include_usage:
        body.stream_options.include_usage = True
    elif not continuous:
        return raw, False
    else:
        strip = False
    if continuous:
        # an extra field of StreamOptions, which passes to vLLM as the client's would
        body.stream_options.continuous_usage_stats = True  # type: ignore[attr-defined]
    return body.model_dump_json(exclude_unset=True).encode(), strip


def openapi_paths() -> dict[str, Any]:
    """OpenAPI operations for the routes OpenAIRoutes serves."""
    errors = {
        str(status): {
            "description": r["description"],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        }
        for status, r in ERROR_RESPONSES.items()
    }
    ok = {
        "description": "JSON, or text/event-stream when `stream` is true",
        "content": {
            "application/json": {"schema": {}},
            "text/event-stream": {"schema": {"type": "string"}},
        },
    }
    return {
        path: {
            "post": {
                "tags": ["openai"],
                "operationId": path.strip("/").replace("/", "_"),
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": f"#/components/schemas/{model.__name__}"}
                        }
                    },
                },
                "responses": {"200": ok, **errors},
            }
        }
        for path, model in ROUTES.items()
    }
