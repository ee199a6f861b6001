"""Where WebArena's published files are: a copy of its repository (github.com/web-arena-x/webarena)
at the pinned commit, found under `--data-dir D` as `D/webarena/`, given as `--data webarena=DIR`,
or fetched file by file into a cache (`published.RepoFiles`: `$EASYLEMUR_WEBARENA_URL`,
`$EASYLEMUR_WEBARENA_CACHE`).

What is read from it: the 812 tasks (`config_files/test.raw.json`: intent, start URL, sites,
login state, the evaluator's configuration), the prompt WebArena's paper ran (`agent/prompts/raw/
p_cot_id_actree_2s.py`: intro, two examples, template, answer phrase), `run.py`'s defaults (steps,
early stops, viewport, sampling, the observation's length) and the sites' names and real-world
URLs (`browser_env/env_config.py`) and the LLM judge's messages and settings
(`evaluation_harness/helper_functions.py`: llm_fuzzy_match, llm_ua_match); all by syntax tree,
never run. The sites themselves are the
user's own deployment (WebArena's Docker images), given by `--webarena URL_MAP`."""

from __future__ import annotations

from easylemur.eval.benchmarks.published import Repository

COMMIT = "f62e0b99bc7d9e0cd996d0cf5ebb2225780ec279"
WEBARENA = Repository(name="WebArena", github="web-arena-x/webarena", commit=COMMIT, dir_name="webarena",
                      markers=("config_files", "browser_env"), env="WEBARENA")
TASKS = "config_files/test.raw.json"
PROMPT = "agent/prompts/raw/p_cot_id_actree_2s.py"
RUN = "run.py"
ENV_CONFIG = "browser_env/env_config.py"
HELPERS = "evaluation_harness/helper_functions.py"  # the LLM judge's messages and settings
