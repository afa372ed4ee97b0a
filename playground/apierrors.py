"""The API's one error shape, `{"code", "message", "field"}`, for every error under /api/: the
ninja handlers answer in it, and so do the body caps and, as a last resort, a middleware that
turns Django's own HTML errors there (405, unknown paths, failures) into it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

API_PREFIX = "/api/"
# The code for an error that no handler named: by status.
STATUS_CODES = {
    400: "malformed_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    411: "length_required",
    413: "too_large",
    429: "throttled",
    500: "server_error",
    503: "unavailable",
}
STATUS_MESSAGES = {
    404: "no such API route",
    405: "this method is not allowed here",
    500: "the server failed on this request; it is logged",
}
# Headers an error answer keeps when it is reshaped.
KEPT_HEADERS = ("Allow", "Retry-After")


def error_payload(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "field": field}


def error_body(code: str, message: str, field: str | None = None) -> bytes:
    return json.dumps(error_payload(code, message, field)).encode()


def error_response(status: int, code: str, message: str, field: str | None = None) -> HttpResponse:
    return HttpResponse(error_body(code, message, field), status=status, content_type="application/json")


class ApiErrorShapeMiddleware:
    """Any error under /api/ that is not already JSON becomes the JSON error shape, status kept."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            not request.path.startswith(API_PREFIX)
            or response.status_code < 400
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        status = response.status_code
        message = STATUS_MESSAGES.get(status) or (
            response.reason_phrase.lower() if response.reason_phrase else "request refused"
        )
        if status == 405 and response.get("Allow"):
            message = f"{message}; allowed: {response['Allow']}"
        reshaped = error_response(status, STATUS_CODES.get(status, "http_error"), message)
        for header in KEPT_HEADERS:
            if header in response:
                reshaped[header] = response[header]
        return reshaped
