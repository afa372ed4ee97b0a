"""Scoped egress: `policy` (a run's allow-list and the ceilings over it; the web's only import of
egress) and `proxy` (the per-run proxy that enforces it, from outside the sandbox)."""
