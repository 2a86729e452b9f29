"""The one error body of the gateway, OpenAI's: {"error": {"message", "type", "param", "code"}}."""

import json
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import Send


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class GatewayError(Exception):
    """Raised anywhere in a request; rendered as an OpenAI error body with its status."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.headers = headers
        self.param = param


def invalid_request(errors: Sequence[Any]) -> GatewayError:
    """400 from pydantic's errors: the first one, with the parameter it is about."""
    first = errors[0]
    param = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
    if first.get("type") == "json_invalid":
        return GatewayError(400, "The request body is not valid JSON.", code="invalid_json")
    return GatewayError(
        400, f"{param or 'body'}: {first.get('msg')}", code="invalid_request", param=param
    )


def error_bytes(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return json.dumps(body).encode()


def error_response(exc: GatewayError) -> Response:
    return Response(
        error_bytes(exc.message, exc.type, exc.code, exc.param),
        status_code=exc.status,
        media_type="application/json",
        headers=exc.headers,
    )


async def send_error(send: Send, exc: GatewayError) -> None:
    """The error response written on the ASGI channel, for layers outside FastAPI's handlers."""
    headers = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode(), v.encode()) for k, v in (exc.headers or {}).items()]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send(
        {
            "type": "http.response.body",
            "body": error_bytes(exc.message, exc.type, exc.code, exc.param),
        }
    )


# Declared on every API route so the OpenAPI schema tells clients what errors look like.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "malformed request",
        401: "missing, wrong, revoked or expired API key",
        404: "unknown model",
        408: "the request body did not arrive in time",
        413: "request body too large",
        429: "per-key rate limit or token quota, or too many connections from one address; see Retry-After",
        502: "the engine failed",
        503: "saturated, draining, or no healthy engine; see Retry-After",
        504: "the engine did not answer in time",
    }.items()
}

_STATUS_TYPES = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error"}


def install_error_handlers(app: FastAPI) -> None:
    async def on_gateway_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        return error_response(exc)

    async def on_http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        type_ = _STATUS_TYPES.get(exc.status_code, "invalid_request_error")
        if exc.status_code >= 500:
            type_ = "server_error"
        return error_response(
            GatewayError(
                exc.status_code,
                str(exc.detail),
                type_,
                headers=dict(exc.headers) if exc.headers else None,
            )
        )

    async def on_validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(invalid_request(exc.errors()))

    async def on_unexpected(_: Request, exc: Exception) -> Response:
        # The traceback goes to the server log through Starlette; the client gets no internals.
        return error_response(GatewayError(500, "internal gateway error", "server_error"))

    app.add_exception_handler(GatewayError, on_gateway_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(Exception, on_unexpected)
