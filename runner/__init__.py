"""Cordon's supervisor: runs untrusted code in a disposable sandbox and watches it from outside.

Pure Python; it never imports Django. Use it as `python -m runner ...` or from Celery tasks.
"""

__version__ = "0.1.0"
