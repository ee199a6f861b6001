"""grain data pipeline: sources, ChatML rendering, packing, mixing, state."""
