"""The HTTP API (django-ninja) under /api/, docs at /api/docs. Thin: parse, call a service or a
selector, shape the answer. Every error is JSON {"code", "message", "field"} (apierrors.py), and each
operation lists the error statuses it can answer with in the OpenAPI document.

One module per domain: `base` (the instance, authentication, errors), `schemas` (the shapes more than
one domain answers with), then `datasets`, `runs`, `notebooks` and `service`. Importing this package
registers their operations, in that order. The classroom's operations are its own router
(playground/classroom/api.py, which builds on `base` and `schemas`); urls.py, which puts the site
together, mounts it after these: import the whole API from there (`playground.urls.api`).
"""

from playground.api import datasets, notebooks, runs, service  # noqa: F401 - each registers its operations
from playground.api.base import api

__all__ = ["api"]
