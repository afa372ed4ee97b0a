"""The one refusal every service raises: a stable code, the field at fault and the HTTP status
the API answers with (as its one error shape, apierrors.py)."""

from __future__ import annotations


class ServiceError(Exception):
    """A refusal with a stable code, the field at fault and the HTTP status it maps to."""

    def __init__(
        self, code: str, message: str, *, field: str | None = None, status: int = 400, retry_after_s: int | None = None
    ):
        super().__init__(message)
        self.code, self.message, self.field, self.status = code, message, field, status
        self.retry_after_s = retry_after_s  # a 429's Retry-After, where waiting helps
