"""`python -m tests.hosts` (make test-hosts): see tests/hosts/harness.py."""

import sys

from tests.hosts.harness import main

sys.exit(main())
