# cordon: {"outcome": "succeeded", "egress": ["allowed.test:8080", "meta.test:80"], "stdout_has": ["redirect to meta.test: 403", "redirect to 169.254.169.254: 403"], "egress_refused": 2, "egress_allowed": 2, "egress_reasons_have": ["meta.test resolves to 169.254.169.254, the cloud metadata address", "not in the run's egress policy"]}
# A redirect to an internal address: the allowed host answers 302 to the cloud metadata service,
# once by a name in the policy that resolves there (meta.test) and once by address. The proxy
# follows no redirect; the client's second request is checked anew and refused.
import urllib.error
import urllib.request

TARGETS = {
    "meta.test": "http://meta.test/latest/meta-data/",
    "169.254.169.254": "http://169.254.169.254/latest/meta-data/",
}
for label, target in TARGETS.items():
    try:
        urllib.request.urlopen(f"http://allowed.test:8080/redirect?to={target}", timeout=10)
        print(f"redirect to {label}: FOLLOWED")
    except urllib.error.HTTPError as exc:
        print(f"redirect to {label}: {exc.code} {exc.read().decode().strip()}")
