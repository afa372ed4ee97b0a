"""The HTTP API (django-ninja) under /api/, docs at /api/docs. Thin: parse, call a service or a
selector, shape the answer. Every error is JSON {"code", "message", "field"} (apierrors.py), and each
operation lists the error statuses it can answer with in the OpenAPI document.

One module per domain, each a ninja `Router` with its operations: `datasets`, `runs`, `notebooks`
(its bodies in `notebook_schemas`) and `service`; `base` is the instance (authentication, errors),
`schemas` the shapes more than one domain answers with. The classroom's router is its own
(playground/classroom/api.py). Nothing registers itself on import: urls.py, which puts the site
together, mounts ROUTERS and then the classroom's, in that order (a path two could match is the
first's); import the whole API from there (`playground.urls.api`).
"""

from playground.api import datasets, notebooks, runs, service
from playground.api.base import api

ROUTERS = (datasets.router, notebooks.router, runs.router, service.router)

__all__ = ["ROUTERS", "api"]
