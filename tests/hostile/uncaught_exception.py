# cordon: {"outcome": "failed", "exit_code": 1, "stderr_has": ["ValueError: bad data"]}
raise ValueError("bad data")
