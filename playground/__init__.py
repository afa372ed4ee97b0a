"""Cordon's web product: the Django project and app (API, pages, Celery tasks, audit admin).

Importing the package imports nothing else: the pure modules here (markdown.py, matching.py) run in
runner.bounded's children without Django. The Celery app is created when Django starts
(PlaygroundConfig.ready) and by `celery -A playground`, which finds playground/celery.py itself."""
