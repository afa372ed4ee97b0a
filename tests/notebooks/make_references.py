"""Write the reference notebooks and run them with Jupyter itself, here, to store Jupyter's outputs.

    /usr/bin/python3 tests/notebooks/make_references.py

Run with Debian's python3 and its Jupyter (python3-ipykernel, python3-nbclient, python3-nbformat),
which has the very libraries the python image has (numpy, pandas, matplotlib, IPython from the same
Debian release), so a difference between Cordon's outputs and these is Cordon's, not a library's.
Each notebook's cells are below, separated by `# %%` lines; the .ipynb files beside this script are
what this writes, outputs and all, and what tests/playground/test_notebook_fidelity.py compares
Cordon's run of each cell with. Not run by the tests: its output is committed.
"""

import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient  # type: ignore[import-not-found]  # Debian's Jupyter, not the venv's

HERE = Path(__file__).parent

NUMPY = r"""
# %%
%matplotlib inline
import numpy as np
import matplotlib.pyplot as plt
np.random.seed(42)
# %%
x = np.random.rand(3, 4)
x.round(3)
# %%
v = x[:2]          # a view of x
v[0, 0] = 99.0
x[0, 0], v.base is x
# %%
np.random.rand(2)  # the global state carries: the numbers after the ones above
# %%
evens = np.arange(10)[::2]
evens.sum(), evens.mean()
# %%
print(np.array([1, 2]) + np.array([1, 2, 3]))
# %%
total = x.sum()
bad = np.zeros(3) @ np.zeros(4)
after = 1
# %%
print(round(total, 3), 'after' in dir())
# %%
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot(np.linspace(0, 1, 50) ** 2)
ax.set_title('square');
# %%
np.set_printoptions(precision=2)
np.linspace(0, 1, 4)
# %%
_, __
# %%
print(Out[2].shape, In[3].splitlines()[0])
"""

PANDAS = r"""
# %%
import numpy as np
import pandas as pd
rng = np.random.default_rng(7)
df = pd.DataFrame({'city': rng.choice(['Oslo', 'Lima', 'Pune'], 12), 'sales': rng.integers(10, 99, 12),
                   'cost': rng.normal(50, 5, 12).round(1)})
df.head()
# %%
df.groupby('city')[['sales', 'cost']].mean().round(2)
# %%
pd.set_option('display.max_rows', 6)
df
# %%
df['margin'] = df.sales - df.cost
display(df.describe().round(2))
print(len(df), 'rows')
# %%
%%writefile /tmp/cordon-ref-notes.txt
first line
second line
# %%
with open('/tmp/cordon-ref-notes.txt') as handle:
    notes = handle.read().splitlines()
notes
# %%
df.loc[:, 'missing']
# %%
print(df.margin.max() > 0, notes[1])
# %%
ax = df.plot.scatter(x='cost', y='sales')
# %%
import warnings
warnings.filterwarnings('ignore', category=FutureWarning)
pd.Series([1, 2, 3]).describe()
# %%
!echo shell says hello
"""

KERNEL = r"""
# %%
%matplotlib inline
import random
import matplotlib.pyplot as plt
random.seed(3)
[random.randint(1, 6) for _ in range(5)]
# %%
def mean(values):
    return sum(values) / len(values)

class Counter:
    def __init__(self):
        self.n = 0
    def bump(self):
        self.n += 1
        return self.n

counter = Counter()
counter.bump()
# %%
counter.bump(), random.random()
# %%
mean([])
# %%
_
# %%
y = 5
x = 1 / 0
# %%
y * 2
# %%
figure, axes = plt.subplots(1, 2, figsize=(6, 2))
axes[0].bar(['a', 'b'], [3, 5])
axes[1].hist([1, 2, 2, 3, 3, 3])
plt.tight_layout()
# %%
figure
# %%
plt.plot([3, 1, 2])
plt.figure()
plt.plot([1, 2, 3]);
# %%
%who
# %%
%%time
total = sum(range(1000))
# %%
display('shown', 42)
"""

NOTEBOOKS = {"numpy_views_and_seeds": NUMPY, "pandas_frames": PANDAS, "kernel_state": KERNEL}


def cells_of(script: str) -> list[str]:
    return [cell.strip("\n") for cell in script.split("# %%\n")[1:]]


def main() -> int:
    for name, script in NOTEBOOKS.items():
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells_of(script)])
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        with tempfile.TemporaryDirectory() as cwd:
            client = NotebookClient(
                notebook, timeout=120, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": cwd}}
            )
            client.execute()
        for cell in notebook.cells:
            cell.pop("id", None)
        notebook.nbformat_minor = 4  # no cell ids: the same file each time it is made
        (HERE / f"{name}.ipynb").write_text(nbformat.writes(notebook) + "\n")
        print(f"wrote {name}.ipynb: {len(notebook.cells)} cells", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.pop("MPLBACKEND", None)  # the kernel's own default, as Jupyter starts it
    raise SystemExit(main())
