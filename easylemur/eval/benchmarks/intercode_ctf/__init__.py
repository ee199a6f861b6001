"""InterCode-CTF (github.com/princeton-nlp/intercode) as the Lemur paper ran it, from the files of
Lemur's fork of it (github.com/OpenLemur/intercode, the copy InterCode-SQL and -Bash read): the 100
picoCTF tasks of `data/ctf/ic_ctf.json`, each on a machine built as InterCode's CTF Dockerfile builds
its image (`intercode_bash/image.py`, with the task's own files), up to 10 turns with the fork's
`hf_chat` policy and the `ctf` template, the dialogue cut to its last 7 messages, InterCode's CTF
action parser; success is submitting the task's flag. `files.py` names the files, `texts.py` reads
every word the model is told from them, `task.py` holds the tasks and what the sandbox cannot give
them (the network, above all), `parser.py` restates the parser, `environment.py` runs a task's machine
as InterCode's CTFEnv runs its container, and `protocol.py` plays the episodes (docs/design.md,
"InterCode-CTF")."""
