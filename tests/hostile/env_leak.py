# cordon: {"outcome": "succeeded", "stdout_has": ["env: HOME,LANG,PATH,PWD,PYTHONDONTWRITEBYTECODE,PYTHONUNBUFFERED,TMPDIR"]}
import os

print("env: " + ",".join(sorted(os.environ)))
