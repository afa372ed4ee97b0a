"""Every read Cordon makes, one module per domain: datasets, runs (with their logs and outputs),
notebooks and hosts. Keyword-only, and what a user reads is scoped to its owner, so that another
user's dataset, run, log or output is simply not found (404)."""
