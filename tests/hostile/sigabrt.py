# cordon: {"outcome": "failed", "signal": 6}
import os

os.abort()
