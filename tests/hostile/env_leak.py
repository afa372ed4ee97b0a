# cordon: {"outcome": "succeeded", "stdout_has": ["env: HOME,LANG,NODE_PATH,OMP_NUM_THREADS,PATH,PWD,PYTHONDONTWRITEBYTECODE,PYTHONUNBUFFERED,TMPDIR"]}
import os

print("env: " + ",".join(sorted(os.environ)))
