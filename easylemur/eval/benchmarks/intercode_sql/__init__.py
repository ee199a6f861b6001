"""InterCode-SQL (github.com/princeton-nlp/intercode) as the Lemur paper ran it, from the files of
Lemur's fork of it (github.com/OpenLemur/intercode): Spider's dev set as InterCode's
`ic_spider_dev.json`, up to 10 turns, the `game_sql` template with the handicap (the tables and
their columns given up front), the dialogue cut to its last 5 messages, InterCode's SQL action
parser, and every executed query scored at once by InterCode's reward function; success is a
reward of 1 within the episode. `files.py` finds or fetches the files, `texts.py` reads every
word the model is told from them, `task.py` holds the tasks, `reward.py` and `parser.py` restate
InterCode's reward and parser, `server.py` runs a private MariaDB server (InterCode's engine was
MySQL 8), `engines.py` runs queries on it or, faster, on Spider's SQLite files in the sandbox, and
`protocol.py` plays the episodes with the fork's `hf_chat` policy (Lemur's rows) or InterCode's
chat policy (GPT-3.5's) (docs/design.md, "InterCode-SQL")."""
