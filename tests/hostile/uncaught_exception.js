// cordon: {"outcome": "failed", "exit_code": 1, "stderr_has": ["Error: bad data"]}
throw new Error("bad data");
