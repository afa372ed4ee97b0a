"""Cordon's records (runs, events, datasets, audits) live here."""
