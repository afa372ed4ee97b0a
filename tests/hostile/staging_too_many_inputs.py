# cordon: {"outcome": "rejected_input", "inputs": ["too_many"], "error_code": "too_many_inputs", "limits": {"input_max_files": 3}}
print("never runs")
