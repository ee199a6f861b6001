"""What a run reports as it goes: `writer.py` (MetricsWriter: metrics.jsonl, TensorBoard, W&B),
shared by the train loop and `eval watch`. Below the run and the evals; imports no model."""
