"""WSGI entry point, for tools that want one; Cordon is served by daphne (asgi.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "playground.settings")
application = get_wsgi_application()
