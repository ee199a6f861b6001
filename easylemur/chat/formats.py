"""The chat formats and message roles, defined once.

A chat source's `chat_format` (config `data.sources.*.chat_format`) and a checkpoint's meta
`chat_format` (null: not chat-tuned) are one of `CHAT_FORMATS`: "chatml" (easylemur's ChatML,
chatml.py) or "model" (the tokenizer's own chat_template, template.py)."""

CHAT_FORMATS = ("chatml", "model")
ROLES = ("system", "user", "assistant")  # the roles a conversation's messages have
