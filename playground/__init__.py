"""Cordon's web product: the Django project and app (API, pages, Celery tasks, audit admin)."""

from playground.celery import app as celery_app

__all__ = ["celery_app"]
