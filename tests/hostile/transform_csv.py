# cordon: {"outcome": "succeeded", "inputs": ["data"], "stdout_has": ["rows 3 total 60"], "outputs": ["summary.json"]}
import json

import pandas

frame = pandas.read_csv("/input/data.csv")
print(f"rows {len(frame)} total {frame['value'].sum()}")
with open("/output/summary.json", "w") as handle:
    json.dump({"rows": len(frame), "total": int(frame["value"].sum())}, handle)
