"""The benchmarks: one module each (`humaneval.py` with M-HumanEval, `mbpp.py` with M-MBPP,
`gsm8k.py`, `ds1000.py`, `multipl_e/` with its languages, `spider/` with the SQL agent), and
`registry.py`, the one table of their names, data and modules."""
