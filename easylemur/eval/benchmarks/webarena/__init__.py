"""WebArena (github.com/web-arena-x/webarena): web tasks on a user's own deployment of its sites,
played through Debian's Chromium by WebArena's protocol and judged by its evaluators, restated
(`files.py`, `texts.py`, `task.py`, `browser.py`, `evaluators.py`, `protocol.py`)."""
