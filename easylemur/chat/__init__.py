"""Chat, on a floor of its own (docs/design.md, "ChatML"): what every layer that renders or writes a
conversation shares, importing nothing of easylemur but `errors` (the tokenizer, data, the
converters, generation, the server and the evals all import it; it imports none of them, and
takes a tokenizer as an argument).

- `formats.py`: the chat formats a source or a checkpoint names (`CHAT_FORMATS`) and the roles;
- `chatml.py`: ChatML, easylemur's own: the markers, the `CHAT_TEMPLATE` text, the token-level
  renderer training uses (`render_chat`, `render_prompt`, `render_truncated`);
- `template.py`: a model's own Jinja chat template (`chat_format: model`), rendered as
  transformers does, the assistant spans -> the loss mask (`ChatTemplate`);
- `renderer.py`: the chat prompts of a model (`ChatRenderer`: the server, `generate --chat`,
  lm-eval's --apply_chat_template, the task evals);
- `files.py`: reading a chat template from files (an HF directory's, a --chat-template file);
- `choice.py`: THE rule for which template a model chats with (`chat_template_for`), which
  to-hf's export follows too.
"""
