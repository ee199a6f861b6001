"""MINT's repository (github.com/xingyaoww/mint-bench) at the commit its published results were
scored at: where easylemur reads MINT's problems (`data/processed/<task>/test_prompts.json`),
its instruction and feedback templates (`mint/prompt/templates/`), its in-context examples
(`mint/tasks/in_context_examples/`) and the texts its Python files hold. A copy is found as
`published.RepoFiles` finds one: `--data-dir D` with `D/mint/`, `--data mint=DIR`, or fetched
into `$EASYLEMUR_MINT_CACHE` (default `~/.cache/easylemur/mint/<commit>`) from
`$EASYLEMUR_MINT_URL` (default GitHub's raw files)."""

from __future__ import annotations

from easylemur.eval.benchmarks.published import Repository

COMMIT = "3f7f12c10bf763be1e6dbdeb42feb57624121f61"
MINT = Repository(name="MINT", github="xingyaoww/mint-bench", commit=COMMIT, dir_name="mint",
                  markers=("data/processed", "mint"), env="MINT")
