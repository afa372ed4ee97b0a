"""Cordon's notebook cell program (cordon_cell has it all: this file is compiled at every start,
the modules beside it are byte-compiled in the image).

    /usr/bin/python3 /usr/lib/cordon/cell.py SCRIPT [ARGS...]
"""

import sys

import cordon_cell

if __name__ == "__main__":
    raise SystemExit(cordon_cell.main(sys.argv))
