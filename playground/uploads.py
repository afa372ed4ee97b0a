"""Uploaded files: their size, checked in one place, and the file names clients really sent.
Django's multipart parser quietly rewrites names (`../etc/passwd` and `..&#x2f;etc&#x2f;passwd`
become `passwd`; NUL and other unprintable characters are dropped); Cordon refuses such names
instead, so it must see them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParser

from playground.errors import ServiceError
from runner.units import size_words, size_words_or_unknown


class _RecordingParser(MultiPartParser):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rewritten_names: list[str] = []

    def sanitize_file_name(self, file_name: str) -> str | None:
        sanitized = super().sanitize_file_name(file_name)
        if sanitized != file_name:
            self.rewritten_names.append(file_name)
        return sanitized


class RawUploadNamesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        def parse(meta: Any, post_data: Any) -> Any:
            parser = _RecordingParser(meta, post_data, request.upload_handlers, request.encoding)
            parsed = parser.parse()
            request.rewritten_upload_names = parser.rewritten_names  # type: ignore[attr-defined]
            return parsed

        request.parse_file_upload = parse  # type: ignore[method-assign,assignment]
        return self.get_response(request)


def check_upload_size(upload: UploadedFile, maximum: int, what: str = "the file") -> int:
    """The upload's size, or 413 too_large naming `what`, its size and the cap (an upload whose
    size is unknown is refused too: nothing is read before its size is known)."""
    if upload.size is None or upload.size > maximum:
        raise ServiceError(
            "too_large", f"{what} is {size_words_or_unknown(upload.size)}; at most {size_words(maximum)}",
            field="file", status=413,
        )  # fmt: skip
    return upload.size


def refused_upload_names(request: HttpRequest) -> list[str]:
    """The file names, as sent, that Django's parser would have rewritten: refuse, never rewrite."""
    return list(getattr(request, "rewritten_upload_names", []))
