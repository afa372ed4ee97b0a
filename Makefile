# Cordon: `make run` serves it, `make test` tests it. Both set up what they need, as root on Debian 12+.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.cordon-installed
# Debian packages the host needs: sandboxing, image builds, Redis, and a Python venv.
DEB_PACKAGES := bubblewrap mmdebstrap redis-server python3-venv libseccomp2 ca-certificates
# Only the tests need a browser (Debian's Chromium, driven by Playwright), PostgreSQL (the tests
# start private clusters of their own: tests/pg.py; Debian's own cluster is left as it is), ip
# and openssl (the egress tests' own test host in a network namespace, with its own certificate),
# and Node (its test runner over the browser code's pure modules: tests/js).
TEST_DEB_PACKAGES := chromium postgresql iproute2 openssl nodejs qemu-user
# The browser code's tooling (eslint) and the single sign-on tests' OpenID Provider (oidc-provider)
# are devDependencies of the package that builds the vendored CodeMirror bundle, installed from its
# lock; the stamp says it is.
FRONTEND := playground/frontend
FRONTEND_STAMP := $(FRONTEND)/node_modules/.cordon-installed

.PHONY: help system test-system node-system debs kvm-access cgroup-tuning venv images migrate run test test-hosts fuzz test-vm test-vm-system lint bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

system: ## install the Debian packages Cordon needs, if any is missing
	@$(MAKE) -s --no-print-directory debs PACKAGES="$(DEB_PACKAGES)"

test-system:
	@$(MAKE) -s --no-print-directory debs PACKAGES="$(TEST_DEB_PACKAGES)"

# Node and npm for eslint: Debian's, unless both are on PATH already (NodeSource's nodejs, for one,
# carries its own npm and conflicts with Debian's npm package).
node-system:
	@command -v node >/dev/null && command -v npm >/dev/null || \
		$(MAKE) -s --no-print-directory debs PACKAGES="nodejs npm"

debs:
	@missing=$$(for p in $(PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "missing Debian packages: $$missing (run as root)"; exit 1; fi; \
		echo "installing: $$missing"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

# smolvm runs each VMM as a per-VM uid in group kvm: /dev/kvm must be root:kvm 0660, which
# udev does on most hosts; where it is root-only (as on some cloud VMs), fix it here.
kvm-access:
	@if [ -e /dev/kvm ] && [ "$$(id -u)" = 0 ]; then \
		getent group kvm >/dev/null || groupadd --system kvm; \
		if [ "$$(stat -c %G /dev/kvm)" != kvm ] || [ $$(( 0$$(stat -c %a /dev/kvm) & 060 )) != 48 ]; then \
			echo "giving /dev/kvm to group kvm with mode 0660 (smolvm's per-VM uids open it)"; \
			chgrp kvm /dev/kvm && chmod 0660 /dev/kvm; \
		fi; \
	fi

# Each run's launcher joins its cgroups by writing cgroup.procs, which by default waits for an RCU
# grace period (7 ms median, 15 ms at p90 on a 2-vCPU host with HZ=250): most of a `python3 -c
# pass` run's overhead. `favordynmods` (Linux 6.1+) makes that write cheap, at a small cost to
# every fork and exit. It is a property of the cgroup2 mount; on Linux 6.17+ it cannot be turned
# off again until reboot (the per-threadgroup lock it enables stays). Harmless where it is absent.
cgroup-tuning: ## remount cgroup2 with favordynmods (cheap cgroup joins), where the kernel offers it
	@if [ "$$(id -u)" = 0 ] && grep -qx favordynmods /sys/kernel/cgroup/features 2>/dev/null; then \
		awk '{for (i = 7; i < NF; i++) if ($$i == "-") { \
			if ($$(i+1) == "cgroup2" && $$(i+3) !~ /favordynmods/) print $$5, $$(i+3); break }}' /proc/self/mountinfo | \
		while read -r dir opts; do \
			echo "remounting $$dir with favordynmods (keeping $$opts)"; \
			mount -o "remount,$$opts,favordynmods" "$$dir"; \
		done; \
	fi

$(STAMP): pyproject.toml | system
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

venv: $(STAMP) ## create the virtualenv and install Cordon into it

$(FRONTEND_STAMP): $(FRONTEND)/package.json $(FRONTEND)/package-lock.json | node-system
	cd $(FRONTEND) && npm ci --no-audit --no-fund
	@touch $@

images: venv ## build the guest images (cached: a no-op when recipes are unchanged)
	$(PY) -m runner images build

migrate: venv
	@$(PY) manage.py migrate --noinput -v0
	@$(PY) manage.py collectstatic --noinput -v0
	@$(PY) manage.py sync_images -v0 >/dev/null

run: images migrate kvm-access cgroup-tuning ## serve Cordon on 127.0.0.1:8000 with Redis, a Celery worker and daphne
	@$(PY) -m runner doctor || true
	@$(PY) manage.py ensure_admin
	@$(PY) manage.py serve_info
	@$(PY) manage.py metrics_reset -v0 >/dev/null
	exec $(VENV)/bin/honcho start

test: images kvm-access test-system $(FRONTEND_STAMP) ## run the test suite (node's, then pytest)
	node --test tests/js/*.test.mjs
	@$(PY) manage.py collectstatic --noinput -v0
	$(PY) -m pytest

# Several hosts: PostgreSQL, Redis, the web and two worker hosts on this machine, each in its own
# mount namespace, sharing nothing but those (tests/hosts). Prints its figures, saves var/hosts/.
# Past the 3 minutes issue 16 allowed inside `make test` (5-6 with its chaos part), so .ci/run
# calls it after `make test`.
test-hosts: images kvm-access test-system ## two worker hosts sharing only PostgreSQL and Redis: datasets, a lost host, drain, a burst, chaos (~6 min)
	$(PY) -m tests.hosts

# Redis, a Celery worker and the web server on the test database, fuzzed through the live
# OpenAPI document (tests/fuzz). Needs what `make test` needs but the browser.
fuzz: images ## fuzz every API operation with Schemathesis against a live server, then call sequences (~3 min)
	$(PY) -m pytest -m fuzz -s tests/fuzz

# The VM path, proven without usable KVM: QEMU emulates an AMD CPU with SVM, smolvm boots real
# microVMs inside it, and the hostile battery runs through them (tests/vm/harness.py): a warm
# pass (the whole battery, runs branching a frozen base VM) and a cold pass (a few cases booted
# cold), timed against each other. make exits 2 for any failed recipe, so CI runs the harness
# itself after `make images test-vm-system`, to tell the emulated host's failure (3) from Cordon's.
test-vm: images test-vm-system ## run the hostile battery through real smolvm microVMs under emulated KVM, warm and cold passes (~35-50 min)
	$(PY) -m tests.vm $(TEST_VM_ARGS)

test-vm-system:
	@$(MAKE) -s --no-print-directory debs PACKAGES="qemu-system-x86 zstd e2fsprogs"

lint: venv $(FRONTEND_STAMP) ## ruff (format and lint), mypy, the import contracts (pyproject.toml), eslint over the browser code
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports
	$(FRONTEND)/node_modules/.bin/eslint --max-warnings 0 --config $(FRONTEND)/eslint.config.mjs static/js tests/js

bench: images cgroup-tuning ## run the benchmarks; prints a table and saves JSON under var/bench/
	$(PY) -m tests.bench
