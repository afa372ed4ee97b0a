# cordon: {"outcome": "rejected_input", "inputs": ["fifo"], "error_code": "input_refused"}
print("never runs")
