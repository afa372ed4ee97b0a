# cordon: {"outcome": "rejected_input", "inputs": ["oversize"], "error_code": "inputs_too_large", "limits": {"input_max_bytes": 1024}}
print("never runs")
