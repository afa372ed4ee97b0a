"""Every write Cordon makes, one module per domain: datasets, runs (submission and the user's
actions), dispatch (queues and sending), execution (the worker's side of a run), logs,
notebooks, accounts, retention and hosts. Keyword-only and typed; callers import the module
of the domain they write to. A refusal is an errors.ServiceError."""
