# cordon: {"outcome": "rejected_input", "inputs": ["symlink"], "error_code": "input_refused"}
print("never runs")
