"""The HTTP API (django-ninja) under /api/, docs at /api/docs. Thin: parse, call a service or a
selector, shape the answer. Every error is JSON {"code", "message", "field"} (apierrors.py), and each
operation lists the error statuses it can answer with in the OpenAPI document.

One module per domain: `base` (the instance, authentication, errors), `schemas` (the shapes more than
one domain answers with), then `datasets`, `runs`, `notebooks`, `service` and `courses` (the
classroom, a router). Importing this package registers every operation, in that order.
"""

from playground.api import datasets, notebooks, runs, service  # noqa: F401 - each registers its operations
from playground.api.base import api
from playground.api.courses import router as courses_router

api.add_router("/", courses_router)

__all__ = ["api"]
