# cordon: {"outcome": "egress_limit", "egress": ["allowed.test:8080"], "limits": {"egress_max_bytes_in": 262144}, "reason_has": ["more than 256 KiB in"], "egress_refused": 0, "egress_allowed": 1, "max_wall_s": 8}
# A download past the run's egress cap (256 KiB in): the proxy cuts the connection at the cap
# and the supervisor stops the run at once as egress_limit, although the program would wait.
import time
import urllib.request

try:
    data = urllib.request.urlopen("http://allowed.test:8080/bytes/4194304", timeout=20).read()
    print("read", len(data))
except Exception as exc:  # the cut connection: the run is being stopped
    print("cut:", type(exc).__name__)
time.sleep(60)
