# cordon: {"outcome": "succeeded", "image": "python-data", "inputs": ["data"], "limits": {"memory_mib": 512}, "stdout_has": ["polars rows 3 total 60", "duckdb total 60", "arrow rows 3"], "outputs": ["summary.parquet"]}
# An environment's wheels in the sandbox (python-data: polars, DuckDB and pyarrow, unpacked at build
# from wheels pinned by hash): the same transform as transform_csv.py, in each, written as Parquet.
import duckdb
import polars as pl
import pyarrow.parquet as pq

frame = pl.read_csv("/input/data.csv")
print(f"polars rows {frame.height} total {frame['value'].sum()}")
print(f"duckdb total {duckdb.sql('select sum(value)::bigint from frame').fetchall()[0][0]}")
frame.write_parquet("/output/summary.parquet")
print(f"arrow rows {pq.read_table('/output/summary.parquet').num_rows}")
