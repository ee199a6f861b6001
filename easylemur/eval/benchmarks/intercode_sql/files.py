"""InterCode's files: a copy of the repository the Lemur paper ran (Lemur's fork of InterCode,
github.com/OpenLemur/intercode, which adds the `hf_chat` policy Lemur-70B-Chat was run with; its
SQL tasks, databases, templates and environment are InterCode's own, github.com/princeton-nlp/intercode,
byte for byte), laid out as the repository is, found under `--data-dir D` as `D/intercode/`, given as
`--data intercode_sql=DIR`, or fetched file by file from the fork at the pinned commit into a cache
directory (`published.RepoFiles`: `$EASYLEMUR_INTERCODE_URL`, `$EASYLEMUR_INTERCODE_CACHE`).

What is read from it: the tasks (`data/sql/spider/ic_spider_dev.json`), the Spider dev databases
as a MySQL dump (`data/sql/spider/ic_spider_dbs.sql`), and the texts of its Python files (the
prompt template, the handicap, the parser's keywords; read by `texts.py` from their syntax
trees, never run).
"""

from __future__ import annotations

from easylemur.eval.benchmarks.published import Repository

COMMIT = "d5a113695cec6ff7dec3ef245f04707a74cc8894"  # Lemur's fork of InterCode (OpenLemur/intercode), as the paper ran it
INTERCODE = Repository(name="InterCode", github="OpenLemur/intercode", commit=COMMIT, dir_name="intercode",
                       markers=("data/sql", "experiments"), env="INTERCODE")
TASKS = "data/sql/spider/ic_spider_dev.json"
DUMP = "data/sql/spider/ic_spider_dbs.sql"
PROMPTS = "experiments/utils/prompts.py"
UTILS = "experiments/utils/utils.py"
RUNNER = "experiments/eval_n_turn.py"
POLICIES = "experiments/policies.py"
SQL_ENV = "intercode/envs/sql/sql_env.py"
