"""Errors the server answers with, in the OpenAI error shape.

Every error a client can get is an :class:`ApiError`: an HTTP status plus the body OpenAI clients
read, ``{"error": {"message", "type", "param", "code"}}``. Example::

    >>> e = ApiError.bad_request("lookahead.w is 9, above this server's W = 4", param="lookahead.w",
    ...                          code="lookahead_not_admitted")
    >>> e.status, e.body()["error"]["type"], e.body()["error"]["param"]
    (400, 'invalid_request_error', 'lookahead.w')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from trtlade.errors import TrtladeError

if TYPE_CHECKING:
    from fastapi.responses import JSONResponse

__all__ = ["ApiError", "ERROR_TYPES", "error_response"]

#: HTTP status -> OpenAI error ``type``.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "internal_server_error",
    503: "service_unavailable_error",
}


@dataclass
class ApiError(TrtladeError):
    """An error response. ``param`` names the offending request field (dotted, e.g. ``lookahead.w``)."""

    status: int
    message: str
    param: Optional[str] = None
    code: Optional[str] = None
    headers: dict[str, str] = field(default_factory=dict)

    located = False  # the body carries the message, the field goes in ``param``

    def __post_init__(self) -> None:
        TrtladeError.__init__(self, self.message, where=self.param or "")

    @property
    def type(self) -> str:
        return ERROR_TYPES.get(self.status, "invalid_request_error" if self.status < 500
                               else "internal_server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    # ---------------------------------------------------------------- constructors by status
    @classmethod
    def bad_request(cls, message: str, *, param: Optional[str] = None, code: str = "invalid_value"
                    ) -> "ApiError":
        return cls(400, message, param=param, code=code)

    @classmethod
    def unauthorized(cls) -> "ApiError":
        return cls(401, "missing or invalid API key: send it as 'Authorization: Bearer <key>'",
                   code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    @classmethod
    def model_not_found(cls, requested: str, served: str) -> "ApiError":
        return cls(404, f"model {requested!r} is not served here; this server serves {served!r} "
                        f"(GET /v1/models lists it)", param="model", code="model_not_found")

    @classmethod
    def too_large(cls, size: int | None, limit: int) -> "ApiError":
        got = f" ({size} bytes)" if size is not None else ""
        return cls(413, f"request body too large{got}: this server accepts at most {limit} bytes "
                        f"(serve.max_body_bytes)", code="request_too_large")

    @classmethod
    def overloaded(cls, message: str, retry_after_s: int) -> "ApiError":
        return cls(429, message, code="queue_full", headers={"Retry-After": str(max(1, retry_after_s))})

    @classmethod
    def unavailable(cls, message: str, retry_after_s: int = 5) -> "ApiError":
        return cls(503, message, code="not_ready", headers={"Retry-After": str(max(1, retry_after_s))})

    @classmethod
    def stopping(cls, message: str) -> "ApiError":
        """The server is stopping and this request was not answered before its shutdown grace ended."""
        return cls(503, message, code="server_stopping", headers={"Retry-After": "5"})

    @classmethod
    def internal(cls, request_id: str) -> "ApiError":
        """An error no rule expected (a bug of ours): its text stays in the server's log, found by the id."""
        return cls(500, f"internal error; the server's log has its traceback under request id {request_id}",
                   code="internal_error")

    @classmethod
    def engine_failure(cls, message: str) -> "ApiError":
        return cls(500, f"engine failure: {message}", code="engine_error")


def error_response(err: ApiError) -> "JSONResponse":
    """``err`` as its JSON error body, status code and headers (Retry-After ...)."""
    from fastapi.responses import JSONResponse

    return JSONResponse(err.body(), status_code=err.status, headers=err.headers or None)
