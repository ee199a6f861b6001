"""A miniature of MINT's repository (github.com/xingyaoww/mint-bench), written by the tests: the
same layout, file names and Python structure (the classes and names MINT's texts live in), but
its own texts and problems, so a test can tell that every word the harness says was read from
the files. `write_mint(root)` returns the texts it used."""

from __future__ import annotations

import json
from pathlib import Path

TEXTS = {
    "invalid": "Fixture cannot parse that. Use <execute> CODE </execute> or <solution> ANSWER </solution>.\n",
    "observation": "Obs:\n",
    "wrong": "Fixture says: wrong.\n",
    "turns": "Steps left: {}, proposals left: {}.\n",
    "last": "Fixture: last step, propose now.\n",
    "feedback": "\nExpert feedback:\n",
    "tool_header": "Fixture tools (imported already):\n",
    "he_prefix": "Fixture, complete this:\n\n",
    "tq_prefix": "Fixture TheoremQA: answer with a number, a list or True/False. ",
    "no_result": "Fixture wiki has nothing",
    "no_gt": "Correct solution (fixture critic, not shown): NOT GIVEN\n",
}

TEMPLATE = """Fixture instructions. Budget: {max_total_steps} steps, {max_propose_solution} proposals.

{tool_desc}

---

{in_context_example}

---

{task_prompt}"""

FEEDBACK_TEMPLATE = """Fixture critic. Example:

{in_context_example}

---

{tool_desc}

{trajectory}

{correct_solution}

Fixture critic: give feedback.
Expert feedback:"""

SOURCES = {
    "mint/envs/general_env.py": f'''
INVALID_INPUT_MESSAGE = ({TEXTS["invalid"]!r})


class GeneralEnv:
    def reset(self):
        user_prompt = dict(task_prompt="Task:\\n" + self.task.prompt)
''',
    "mint/datatypes.py": f'''
class StepOutput:
    def to_str(self) -> str:
        output = {TEXTS["observation"]!r}
        if self.observation is not None:
            output += self.observation + "\\n"
        else:
            if self.success == False:
                output += {TEXTS["wrong"]!r}
        if self.turn_info != None:
            n_steps_left, n_propose_solution_left = self.turn_info
            output += {TEXTS["turns"]!r}.format(n_steps_left, n_propose_solution_left)
            if n_steps_left <= 1:
                output += {TEXTS["last"]!r}
        if self.feedback_type != None and self.feedback != "":
            output += {TEXTS["feedback"]!r} + self.feedback + "\\n"
        return output
''',
    "mint/tools/__init__.py": f'''
def get_toolset_description(tools):
    if len(tools) == 0:
        return ""
    output = {TEXTS["tool_header"]!r}
    return output
''',
    "mint/tools/wikipedia_search.py": f'''
WIKIPEDIA_MAX_QUERY_LENGTH = 50


class WikipediaAPIWrapper:
    top_k_results: int = 2
    doc_content_chars_max: int = 300

    def run(self, query):
        if not summaries:
            return {TEXTS["no_result"]!r}


WIKIPEDIA_DESCRIPTION = "Fixture wiki: looks things up.\\n"


class WikipediaQueryRun:
    name = "wikipedia_search"
''',
    "mint/agents/vllm_agent.py": '''
class VLLMAgent:
    def __init__(self, config):
        self.stop_words = ["\\nObservation:", "\\nExpert feedback:", "\\nTask:", "\\n---", "\\nHuman:"]
''',
    "mint/agents/openai_feedback_agent.py": f'''
class OpenAIFeedbackAgent:
    def __init__(self, config):
        self.stop_words = ["\\nObservation:", "\\nTask:", "\\nAssistant:"]

    def act(self, state, observation, form, gt, task_in_context_example, tool_desc):
        gt_solution = f"shown: {{gt}}\\n" if gt else {TEXTS["no_gt"]!r}
''',
    "mint/tasks/codegen.py": f'''
class HumanEvalTask:
    @property
    def prompt(self) -> str:
        """Docstring, not the prefix."""
        return {TEXTS["he_prefix"]!r} + self._prompt
''',
    "mint/tasks/reasoning.py": f'''
class TheoremqaTask:
    def __init__(self, id, prompt, reference, **kwargs):
        self._prompt = ({TEXTS["tq_prefix"]!r} + prompt.strip())
        self._answer_type = kwargs.get("answer_type")
''',
}

EXAMPLE = "Fixture example for {what}.\n\nTask:\nAdd 1 and 1.\n\nAssistant:\n<solution> 2 </solution>\n"

PROBLEMS = {
    "humaneval": [
        {"id": "0", "prompt": "def add(a, b):\n    \"\"\"Add a and b.\"\"\"\n",
         "reference": "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
                      "    assert candidate(-1, 1) == 0\n\n\ncheck(add)"},
    ],
    "mbpp": [
        {"id": "0", "prompt": '"""\nWrite a function to square a number.\nassert square(3) == 9\n"""\n',
         "reference": "assert square(3) == 9\nassert square(-2) == 4"},
    ],
    "gsm8k": [
        {"id": "0", "prompt": "What is six times seven? Solution output format: an integer.  ", "reference": "42"},
        {"id": "1", "prompt": "What is 2 plus 2?", "reference": "4"},
    ],
    "math": [{"id": "0", "prompt": "What is 10/4?", "reference": "2.5"}],
    "hotpotqa": [{"id": "0", "prompt": "Which city is the capital of France?", "reference": "Paris"}],
    "theoremqa": [
        {"id": "1", "prompt": "List the primes below 6.", "reference": [2, 3, 5], "answer_type": "list of integer"},
        {"id": "2", "prompt": "Is 7 prime?", "reference": True, "answer_type": "bool"},
        {"id": "3", "prompt": "What is pi to two places?", "reference": 3.14, "answer_type": "float"},
    ],
    "mmlu": [{"id": 0, "prompt": "Which is largest?\nOptions: A ) 6 , B ) 121 , C ) 18107 , D ) 54,320",
              "reference": "c"}],
}


def write_mint(root: Path) -> dict:
    """Writes the miniature under `root` (root/mint/... and root/data/processed/...); returns TEXTS."""
    for rel, text in SOURCES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text.lstrip("\n"))
    templates = root / "mint" / "prompt" / "templates"
    templates.mkdir(parents=True, exist_ok=True)
    (templates / "template_with_tool.txt").write_text(TEMPLATE)
    (templates / "template_feedback_agent.txt").write_text(FEEDBACK_TEMPLATE)
    for folder in ("humaneval", "mbpp", "reasoning"):
        d = root / "mint" / "tasks" / "in_context_examples" / folder
        d.mkdir(parents=True, exist_ok=True)
        (d / "with_tool.txt").write_text(EXAMPLE.format(what=folder))
        (d / "with_tool_and_feedback.txt").write_text(EXAMPLE.format(what=folder + " with feedback")
                                                      + "\nExpert feedback:\nFixture: good.\n")
    for task, rows in PROBLEMS.items():
        d = root / "data" / "processed" / task
        d.mkdir(parents=True, exist_ok=True)
        (d / "test_prompts.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dict(TEXTS)
