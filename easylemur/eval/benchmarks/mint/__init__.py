"""MINT's seven tasks (github.com/xingyaoww/mint-bench: M-HumanEval, M-MBPP, M-GSM8K, M-MATH,
M-TheoremQA, M-MMLU, M-HotpotQA) run by MINT's own protocol from MINT's own files, so a score
can be set beside the Lemur paper's: `files.py` finds or fetches the files, `source.py` and
`texts.py` read every word the model is told from them, `tasks.py` forms problems as MINT's task
classes do, `checks.py` judges by MINT's rules, `protocol.py` plays an episode as MINT's
environment does (a live interpreter per episode, `sandbox.Session`), `wikipedia.py` answers
MINT's search tool, and `replay.py` replays MINT's published transcripts (docs/design.md, "MINT")."""
