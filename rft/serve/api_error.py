"""`ApiError`: a refusal a caller of the serve endpoint gets as an OpenAI-style error body.

The body is `{"error": {"message", "type", "param", "code"}}`, the shape the `openai` client reads
into its exceptions (`BadRequestError`, `AuthenticationError`, ...), with the HTTP status that
selects the exception class. Messages name the parameter at fault and never carry a traceback.
"""

from __future__ import annotations

from typing import Any

from rft.errors import RftError

# the `type` OpenAI gives each status
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class ApiError(RftError):
    """A request refused with `status`; `param` names the field at fault, `code` the reason."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": _TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)
