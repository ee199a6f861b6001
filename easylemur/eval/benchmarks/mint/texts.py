"""What MINT's environment, tools and agents say, read from one copy of its repository: the
instruction and feedback templates, the in-context examples, and the texts its Python files
hold (the invalid-action message, the observation's lines, the tool header, the stop words).
One `MintTexts` per copy; a task reads its own in-context examples through it."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from easylemur.eval.benchmarks.mint.files import MINT
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, assigned, strings, the_string

TEMPLATES = "mint/prompt/templates"
EXAMPLES = "mint/tasks/in_context_examples"


@dataclasses.dataclass(frozen=True)
class Wikipedia:
    """MINT's `wikipedia_search` tool: how it is described to the model and what it answers."""

    name: str
    signature: str
    description: str
    no_result: str  # what it answers when no page is found
    top_k: int
    chars: int  # its answer is cut to this many characters
    query_chars: int  # the query is cut to this many


@dataclasses.dataclass(frozen=True)
class MintTexts:
    template: str  # the one user message: instructions, tools, example, task
    feedback_template: str  # what the feedback model is asked
    task_header: str  # put before the task's prompt ("Task:\n")
    invalid_input: str  # the observation of an action with no closed <execute>/<solution>
    observation: str  # the observation's first line
    wrong_answer: str
    turns_left: str  # "{} ... {}": steps left, proposals left
    last_step: str
    feedback_header: str
    tool_header: str
    stop_words: tuple  # what ends the agent's reply (its vLLM agent's list)
    feedback_stop_words: tuple
    no_ground_truth: str  # the feedback prompt's line when the feedback model is not shown the answer
    humaneval_prefix: str
    theoremqa_prefix: str
    wikipedia: Wikipedia
    files: RepoFiles = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    def example(self, folder: str, feedback: bool) -> str:
        """A task's in-context example: with the expert's feedback in it when the run has feedback."""
        return self.files.text(f"{EXAMPLES}/{folder}/{'with_tool_and_feedback' if feedback else 'with_tool'}.txt")

    def tool_description(self, tools: tuple) -> str:
        """The tool lines of the instruction for MINT's tools named `tools` (its reasoning tasks' one)."""
        for name in tools:
            if name != self.wikipedia.name:
                raise PublishedFilesError(f"MINT has no tool {name!r} (its reasoning tasks use {self.wikipedia.name})")
        return self.tool_lines([(self.wikipedia.signature, self.wikipedia.description) for _ in tools])

    def tool_lines(self, tools: list) -> str:
        """MINT's get_toolset_description over (signature, description) pairs; "" without tools."""
        if not tools:
            return ""
        out = self.tool_header
        for i, (signature, description) in enumerate(tools):
            out += f"[{i + 1}] {signature}\n{description}\n"
        return out


@functools.lru_cache(maxsize=8)
def _load(root: str, url: str) -> MintTexts:
    files = RepoFiles(MINT, Path(root), url or None)
    env, env_at = files.tree("mint/envs/general_env.py")
    types, types_at = files.tree("mint/datatypes.py")
    obs = strings(types, types_at, "StepOutput.to_str")
    if len(obs) != 8:
        raise PublishedFilesError(f"{types_at}: StepOutput.to_str has {len(obs)} strings, MINT's pinned commit 8")
    tools, tools_at = files.tree("mint/tools/__init__.py")
    wiki, wiki_at = files.tree("mint/tools/wikipedia_search.py")
    vllm, vllm_at = files.tree("mint/agents/vllm_agent.py")
    fb, fb_at = files.tree("mint/agents/openai_feedback_agent.py")
    code, code_at = files.tree("mint/tasks/codegen.py")
    reason, reason_at = files.tree("mint/tasks/reasoning.py")
    name = assigned(wiki, wiki_at, "WikipediaQueryRun", "name")
    return MintTexts(
        template=files.text(f"{TEMPLATES}/template_with_tool.txt"),
        feedback_template=files.text(f"{TEMPLATES}/template_feedback_agent.txt"),
        task_header=the_string(env, env_at, "GeneralEnv.reset", starting="Task:"),
        invalid_input=assigned(env, env_at, "", "INVALID_INPUT_MESSAGE"),
        observation=obs[0], wrong_answer=obs[2], turns_left=obs[3], last_step=obs[4], feedback_header=obs[6],
        tool_header=the_string(tools, tools_at, "get_toolset_description", first=True),
        stop_words=tuple(assigned(vllm, vllm_at, "VLLMAgent.__init__", "self.stop_words")),
        feedback_stop_words=tuple(assigned(fb, fb_at, "OpenAIFeedbackAgent.__init__", "self.stop_words")),
        no_ground_truth=the_string(fb, fb_at, "OpenAIFeedbackAgent.act", ending="NOT GIVEN\n"),
        humaneval_prefix=the_string(code, code_at, "HumanEvalTask.prompt"),
        theoremqa_prefix=the_string(reason, reason_at, "TheoremqaTask.__init__", first=True),
        wikipedia=Wikipedia(
            name=name, signature=f"{name}(query: str) -> str",
            description=assigned(wiki, wiki_at, "", "WIKIPEDIA_DESCRIPTION"),
            no_result=the_string(wiki, wiki_at, "WikipediaAPIWrapper.run", first=True),
            top_k=assigned(wiki, wiki_at, "WikipediaAPIWrapper", "top_k_results"),
            chars=assigned(wiki, wiki_at, "WikipediaAPIWrapper", "doc_content_chars_max"),
            query_chars=assigned(wiki, wiki_at, "", "WIKIPEDIA_MAX_QUERY_LENGTH")),
        files=files)


def load_texts(files: RepoFiles) -> MintTexts:
    """MINT's texts from `files` (read once per copy)."""
    return _load(str(files.root), files.url or "")
