"""Errors as OpenAI shapes them: ``{"error": {"message", "type", "param", "code"}}``, never a traceback."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import one_line

logger = logging.getLogger("kokoro_gpu.server")

_TYPES = {401: "invalid_request_error", 429: "rate_limit_error", 503: "server_error", 504: "server_error"}


class ApiError(Exception):
    """A request that fails with ``status``; ``message`` says what is wrong and what to do."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = one_line(message)
        self.param = param
        self.code = code
        self.retry_after = retry_after


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(error: ApiError) -> JSONResponse:
    headers = {"Retry-After": str(error.retry_after)} if error.retry_after is not None else None
    if error.status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return JSONResponse(error_body(error.status, error.message, error.param, error.code),
                        status_code=error.status, headers=headers)


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = {404: f"no route {request.url.path}; see /v1/audio/speech, /v1/audio/voices, /v1/models",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(
                       exc.status_code, one_line(str(exc.detail)))
        return JSONResponse(error_body(exc.status_code, message, None, code), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        message = one_line(f"{param or 'request'}: {first.get('msg', 'invalid')}")
        return JSONResponse(error_body(400, message, param, "invalid_value"), status_code=400)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("kokoro_gpu: %s %s failed", request.method, request.url.path)
        return JSONResponse(error_body(500, "internal server error; the server log has the details"),
                            status_code=500)
