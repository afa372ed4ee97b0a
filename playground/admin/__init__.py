"""The Django admin is Cordon's audit console: read-only run records (a run's audit page shows its
code, inputs, outputs, network attempts, logs and timeline, and opening it is itself recorded),
staff reads of user data, an overview of the last 7 days (/admin/overview/) and a CSV export of the
filtered run list; filters for outcome, engine, isolation, runtime, network, image digest and
incomplete cleanup; actions that say what they did.

`runs` the run list and a run's audit page, `records` the other records (staff reads, datasets,
courses, images, hosts, tokens, invites, accounts), `overview` the 7-day overview, `display` how
they all show a record's facts. Django's admin imports this package; each module registers its own.
"""

from __future__ import annotations

from django.contrib import admin

admin.site.site_header = "Cordon audit console"
admin.site.site_title = "Cordon"
admin.site.index_title = "Runs, datasets and hosts"
# No nav sidebar beside every page: the run list's columns and its filters need the width (the
# index and the breadcrumbs lead everywhere it did).
admin.site.enable_nav_sidebar = False

from playground.admin import overview, records, runs  # noqa: E402, F401 - each registers its pages
