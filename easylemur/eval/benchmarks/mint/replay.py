"""An OpenAI-compatible endpoint that replays MINT's published transcripts: each conversation
is answered with the next assistant message of the transcript whose first user message it
carries, so a run through easylemur's harness against it scores exactly what MINT's harness
scored, if the two play MINT's protocol alike (docs/design.md, "MINT").

MINT publishes every episode it scored under `data/outputs/<model>/<feedback>/<budget>/<type>/
<task>/results.jsonl` (MINT's `State`: the dialogue, success, counters). Indexed here by the
first user message (which holds the turn budget and, with feedback, its own in-context
example), so one server replays every task, budget and feedback setting of a model. A
feedback request (MINT's feedback prompt, one user message) gets the expert feedback that
transcript recorded after the step the agent last replayed. A step past the transcript is
answered with an empty reply (and counted: the dialogues diverged); a transcript that ended in
an endpoint error answers that step with HTTP 400, as the model's server did.
`bench/mint_replay.py` runs it against `eval suite` and compares every episode with MINT's.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

ASSISTANT = "Assistant:\n"


def _reply_of(content: str) -> str:
    text = content[len(ASSISTANT):] if content.startswith(ASSISTANT) else content
    return text[:-1] if text.endswith("\n") else text


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class Transcript:
    def __init__(self, record: dict, feedback_header: str):
        st = record["state"]
        self.task_prompt = str(record["task"]["prompt"])
        self.error = st.get("terminate_reason") == "error"
        hist = st["history"]
        self.contents = [str(m["content"]) for m in hist]
        self.roles = [m["role"] for m in hist]
        # each message as a critic's trajectory holds it: a user message without its own feedback
        self.bare = [c.split(feedback_header, 1)[0] if r == "user" else c for c, r in zip(self.contents, self.roles)]
        self.replies: list[Optional[str]] = []  # per user message: the reply that followed it ("" when none was kept)
        self.feedback: list[str] = []  # per user message after the first: the expert feedback it carried
        for i, m in enumerate(hist):
            if m["role"] != "user":
                continue
            nxt = hist[i + 1] if i + 1 < len(hist) else None
            self.replies.append(_reply_of(nxt["content"]) if nxt is not None and nxt["role"] == "assistant"
                                else "" if nxt is not None else None)
            if i > 0:
                parts = m["content"].split(feedback_header, 1)
                self.feedback.append(parts[1][:-1] if len(parts) == 2 and parts[1].endswith("\n") else
                                     parts[1] if len(parts) == 2 else "")


class Replayer:
    """The transcripts of one model's outputs directory, and what the replay has served.

    Several episodes can open with the same message (ALFWorld's trials of one task in one room
    differ only in where things lie), so a conversation is matched to the transcript whose
    dialogue it repeats longest (its observations tell the trials apart), and a critic's request
    to the transcript whose dialogue its trajectory holds longest."""

    def __init__(self, outputs: Path, feedback_header: str = "\nExpert feedback:\n"):
        self.by_first: dict[str, list[Transcript]] = {}
        self.feedback_runs: list[Transcript] = []
        for path in sorted(Path(outputs).rglob("results.jsonl")):
            is_feedback = "PHF=" in str(path)
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    rec = json.loads(line)
                    t = Transcript(rec, feedback_header)
                    self.by_first.setdefault(rec["state"]["history"][0]["content"], []).append(t)
                    if is_feedback:
                        self.feedback_runs.append(t)
        self.unknown = self.past_end = 0
        self.lock = threading.Lock()

    def answer(self, messages: Sequence[dict]) -> tuple[int, str]:
        """(HTTP status, reply text) for a chat request."""
        users = [m for m in messages if m.get("role") == "user"]
        if not users:
            return 400, "no user message"
        candidates = self.by_first.get(users[0]["content"])
        if candidates is None:
            if len(users) == 1:
                return self._feedback(users[0]["content"])
            with self.lock:
                self.unknown += 1
            return 400, "no transcript starts with this conversation's first message"
        sent = [str(m.get("content")) for m in messages]
        t = max(candidates, key=lambda c: _common_prefix(c.contents, sent))
        j = len(users) - 1
        if j >= len(t.replies) or t.replies[j] is None:
            if t.error and j == len(t.replies) - 1:
                return 400, "This model's maximum context length is exceeded (as the transcript's run ended)"
            with self.lock:
                self.past_end += 1
            return 200, ""
        return 200, t.replies[j] or ""

    def _feedback(self, prompt: str) -> tuple[int, str]:
        hits = [t for t in self.feedback_runs if t.task_prompt and t.task_prompt in prompt]
        if not hits:
            with self.lock:
                self.unknown += 1
            return 400, "no transcript for this conversation"
        longest = max(len(h.task_prompt) for h in hits)

        def held(t: Transcript) -> int:  # how many of its messages after the first the trajectory holds, in order
            n = 0
            while 1 + n < len(t.bare) and t.bare[1 + n] in prompt:
                n += 1
            return n
        t, n = max(((h, held(h)) for h in hits if len(h.task_prompt) == longest), key=lambda x: x[1])
        # the feedback asked for is the one that came with the observation the trajectory ends with:
        # the last user message it holds, or the next one where the observations parted
        j = t.roles[1:1 + n].count("user") - (1 if n and t.roles[n] == "user" else 0)
        return 200, t.feedback[j] if 0 <= j < len(t.feedback) else ""


def serve(replayer: Replayer, port: int = 0, model: str = "mint-replay") -> http.server.ThreadingHTTPServer:
    """A started server on 127.0.0.1:`port` (0: a free one); its base URL is http://127.0.0.1:PORT/v1."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": "only /v1/chat/completions is replayed"}})
                return
            status, text = replayer.answer(body.get("messages") or [])
            if status != 200:
                self._send(status, {"error": {"message": text, "type": "invalid_request_error"}})
                return
            self._send(200, {"object": "chat.completion", "model": model, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
