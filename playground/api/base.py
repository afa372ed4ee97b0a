"""The API's setup: the django-ninja instance under /api/ (docs at /api/docs), how a caller
authenticates (a bearer token or the browser's session), and how every error becomes JSON
{"code", "message", "field"} (apierrors.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError
from ninja.security import HttpBearer, SessionAuth
from ninja.throttling import AuthRateThrottle

from playground import throttle
from playground.apierrors import error_payload
from playground.bodies import (
    PATTERN_WORDS,
    BodyTooLarge,
    MalformedJson,
    StrictJsonParser,
)
from playground.egress import describe_validation_error as describe_egress_error
from playground.errors import ServiceError
from playground.limits import (
    describe_validation_error,
)
from playground.metrics import count_throttled
from playground.openapi import DocumentedApi
from playground.services import accounts as account_services
from runner.units import size_words


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        # Before the lookup: a flood of guesses from a locked-out address costs no query.
        throttle.check_token_address(request)
        user = account_services.token_user(token=token)
        if user is None:
            throttle.token_failed(request)
            return None
        request.user = user
        return user


class BrowserSession(SessionAuth):
    """The browser's session, CSRF-checked. A request with no logged-in session is simply not
    authenticated by it (401, "log in"), not a CSRF failure (403)."""

    def _get_key(self, request: HttpRequest) -> str | None:
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)


api = DocumentedApi(
    title="Cordon API",
    version="1",
    urls_namespace="api",
    auth=[BearerToken(), BrowserSession()],
    throttle=[AuthRateThrottle()],
    docs_url="/docs",
    parser=StrictJsonParser(),
)


def _error(
    request: HttpRequest, status: int, code: str, message: str, field: str | None = None,
    headers: dict[str, str] | None = None,
) -> HttpResponse:  # fmt: skip
    response = api.create_response(request, error_payload(code, message, field), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


@api.exception_handler(ServiceError)
def _service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
    return _error(request, exc.status, exc.code, exc.message, exc.field, headers=headers)


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    # A field it does not know first: a misspelt one is also a missing one, and its name is the clue.
    errors = sorted(exc.errors, key=lambda error: error.get("type") != "extra_forbidden")
    first = errors[0] if errors else {}
    location = [str(p) for p in first.get("loc", []) if p not in ("body", "payload", "query", "form", "file")]
    field = ".".join(location) or None
    about = describe_validation_error(first, field or "") or describe_egress_error(first, field or "")
    if about is not None:
        return _error(request, 422, *about, field)
    words = TYPE_WORDS.get(first.get("type", ""), str(first.get("msg", "invalid")))
    if first.get("type") == "string_pattern_mismatch":
        words = PATTERN_WORDS.get((first.get("ctx") or {}).get("pattern", ""), words)
    if field:
        return _error(request, 422, "invalid_request", f"{field}: {words}", field)
    # The body itself (bodies.BodyIn words its refusal "must be a JSON object, not ...").
    subject = "the request body " if words.startswith(("must", "is")) else ""
    return _error(request, 422, "invalid_request", f"{subject}{words}")


# Pydantic's refusal of a value of the wrong JSON type, in the API's words.
TYPE_WORDS = {
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be an array",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "missing": "is required",
    "extra_forbidden": "is not a field of this request (a misspelt field would take its default)",
}


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400:  # ninja's "Cannot parse request body"
        why = str(exc.__cause__) if isinstance(exc.__cause__, MalformedJson) else str(exc)
        return _error(request, 400, "malformed_body", f"the request body could not be parsed: {why}")
    if exc.status_code == 403:  # the session's CSRF check: the only 403 ninja raises here
        return _error(request, 403, "csrf_failed", "CSRF check failed: send the X-CSRFToken header of this session")
    return _error(request, exc.status_code, "http_error", str(exc))


@api.exception_handler(BodyTooLarge)
def _body_too_large(request: HttpRequest, exc: BodyTooLarge) -> HttpResponse:
    return _error(request, 413, "too_large", str(exc), exc.field)


@api.exception_handler(RequestDataTooBig)
def _data_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Django's own cap on a body's non-file data (CORDON_REQUEST_MAX_BYTES, on every route).
    cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _error(request, 413, "too_large", f"the request body is over the {size_words(cap)} limit")


@api.exception_handler(MultiPartParserError)
def _malformed_multipart(request: HttpRequest, exc: MultiPartParserError) -> HttpResponse:
    return _error(request, 400, "malformed_body", f"the multipart body could not be parsed: {exc}")


@api.exception_handler(Throttled)
def _throttled(request: HttpRequest, exc: Throttled) -> HttpResponse:
    count_throttled("api")
    headers = {"Retry-After": str(max(1, int(exc.wait) + 1))} if exc.wait else {}
    return _error(request, 429, "throttled", "too many requests; slow down", headers=headers)


@api.exception_handler(throttle.AuthThrottled)
def _auth_throttled(request: HttpRequest, exc: throttle.AuthThrottled) -> HttpResponse:
    return _error(request, 429, "throttled", exc.message, headers={"Retry-After": str(exc.retry_after_s)})


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, "not_found", str(exc) or "not found")


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _error(request, 401, "unauthorized", "log in, or send Authorization: Bearer <token>")
