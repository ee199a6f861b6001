"""Spider and the InterCode-SQL-style agent: `task.py` (the benchmarks), `sql.py` (the SQL engine,
the data, the sandbox programs)."""
