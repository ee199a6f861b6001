"""The evaluation's contracts, above the sandbox and below every benchmark: the single-turn
`Task[P]` with its `Problem` and `Prompt` (`task.py`), pass@k and the k lists (`passk.py`), JSONL
in and out (`jsonl.py`), an endpoint's refusal and lost request (`faults.py`), what the commands
print on stderr besides results: progress lines and each log record once (`console.py`). This
file is the floor's door."""

from easylemur.eval.api.console import Progress, one_line_per_record
from easylemur.eval.api.faults import EndpointError, EndpointLost
from easylemur.eval.api.jsonl import read_jsonl, read_samples, write_jsonl
from easylemur.eval.api.passk import mean_pass_at_k, parse_ks, pass_at_k
from easylemur.eval.api.task import FORMATS, EvalDataError, MissingData, Problem, Prompt, Task

__all__ = ["FORMATS", "EndpointError", "EndpointLost", "EvalDataError", "MissingData", "Problem", "Progress", "Prompt",
           "Task", "mean_pass_at_k", "one_line_per_record", "parse_ks", "pass_at_k", "read_jsonl", "read_samples",
           "write_jsonl"]
