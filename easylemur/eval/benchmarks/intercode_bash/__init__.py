"""InterCode-Bash (github.com/princeton-nlp/intercode) as the Lemur paper ran it, from the files of
Lemur's fork of it (github.com/OpenLemur/intercode, the copy InterCode-SQL reads): the 200 NL2Bash
tasks of its four task files, each against the file system its setup script builds, up to 10 turns
with the fork's `hf_chat` policy and the `v2` template, the dialogue cut to its last 7 messages,
InterCode's bash action parser, and InterCode's reward after every action (the file system's git
status, the changed files' content and the output against the gold command's on a fresh copy);
success is a reward of 1. `files.py` names the files, `texts.py` reads every word the model is told
from them, `image.py` builds each file system as InterCode's Dockerfile does into a root of the
sandbox (`sandbox.RootFS`), `task.py` holds the tasks and what the sandbox cannot give them,
`parser.py` and `reward.py` restate InterCode's parser and reward, `environment.py` runs an
episode's two machines as InterCode's BashEnv runs its two containers, and `protocol.py` plays the
episodes (docs/design.md, "InterCode-Bash")."""
