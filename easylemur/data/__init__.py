"""grain data pipeline: sources, conversation records (rendered by easylemur.chat), packing, mixing, state."""
