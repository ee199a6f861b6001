"""The benchmarks: one module each (`humaneval.py`, `mbpp.py`, `ds1000.py`, `multipl_e/` with its
languages, `spider/` with the SQL agent, `mint/` with MINT's seven multi-turn tasks by MINT's
protocol), and `registry.py`, the one table of their names, data and modules."""
