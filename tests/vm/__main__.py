"""`python -m tests.vm` (make test-vm): see tests/vm/harness.py."""

import sys

from tests.vm.harness import main

sys.exit(main())
