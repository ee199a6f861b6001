"""What WebArena tells the model and the settings its runner plays with, read from its files by
syntax tree (never run):

- the prompt (`agent/prompts/raw/p_cot_id_actree_2s.py`, its `prompt` dict): intro, the two
  examples, the template, the answer phrase and the action splitter (``` around the action);
- `run.py`'s argument defaults: max_steps 30, parsing_failure_th 3, repeating_action_failure_th 3,
  max_obs_length 1920, viewport 1280 x 720, and the sampling (temperature 1.0, top_p 0.9,
  max_tokens 384);
- the sites (`browser_env/env_config.py`): each site's variable (SHOPPING, ...: the task file's
  `__SHOPPING__` placeholder) and the real-world URL the prompt shows in its place
  (`URL_MAPPINGS`, e.g. http://onestopmarket.com), in the file's order."""

from __future__ import annotations

import ast
import dataclasses

from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, assigned
from easylemur.eval.benchmarks.webarena.files import ENV_CONFIG, PROMPT, RUN

RUN_SETTINGS = ("max_steps", "parsing_failure_th", "repeating_action_failure_th", "max_obs_length",
                "viewport_width", "viewport_height", "temperature", "top_p", "max_tokens", "max_retry")


@dataclasses.dataclass(frozen=True)
class WebArenaTexts:
    intro: str
    examples: tuple[tuple[str, str], ...]
    template: str
    keywords: tuple[str, ...]
    answer_phrase: str
    action_splitter: str
    force_prefix: str
    run: dict  # run.py's defaults, RUN_SETTINGS
    sites: dict  # site variable (SHOPPING) -> the real-world URL the prompt shows (http://onestopmarket.com)

    def site_name(self, variable: str) -> str:
        """A task's name for a site (its `sites` list): the variable lower-cased (SHOPPING_ADMIN -> shopping_admin)."""
        return variable.lower()


def run_defaults(tree: ast.Module, where: str) -> dict:
    """The default of every `parser.add_argument("--NAME", ..., default=V)` in run.py."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument" \
                and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("--"):
            for kw in node.keywords:
                if kw.arg == "default":
                    try:
                        out[node.args[0].value[2:]] = ast.literal_eval(kw.value)
                    except ValueError:
                        pass
    missing = [k for k in RUN_SETTINGS if k not in out]
    if missing:
        raise PublishedFilesError(f"{where}: no default for --{', --'.join(missing)} (the pinned commit has them)")
    return {k: out[k] for k in RUN_SETTINGS}


def url_mappings(tree: ast.Module, where: str) -> dict:
    """env_config.py's URL_MAPPINGS: {site variable: real-world URL}, in its order."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "URL_MAPPINGS" for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            out = {}
            for k, v in zip(node.value.keys, node.value.values):
                if not isinstance(k, ast.Name) or not isinstance(v, ast.Constant) or not isinstance(v.value, str):
                    raise PublishedFilesError(f"{where}: URL_MAPPINGS maps a site variable to a URL string")
                out[k.id] = v.value
            return out
    raise PublishedFilesError(f"{where}: no URL_MAPPINGS (the pinned commit has it)")


def load_texts(files: RepoFiles) -> WebArenaTexts:
    tree, where = files.tree(PROMPT)
    prompt = assigned(tree, where, "", "prompt")
    try:
        meta = prompt["meta_data"]
        examples = tuple((str(x), str(y)) for x, y in prompt["examples"])
        texts = WebArenaTexts(
            intro=prompt["intro"], examples=examples, template=prompt["template"],
            keywords=tuple(meta["keywords"]), answer_phrase=meta["answer_phrase"],
            action_splitter=meta["action_splitter"], force_prefix=meta.get("force_prefix", ""),
            run=run_defaults(*files.tree(RUN)), sites=url_mappings(*files.tree(ENV_CONFIG)))
    except (KeyError, TypeError, ValueError) as e:
        raise PublishedFilesError(f"{where}: prompt lacks {e} (the pinned commit's has intro, examples, template "
                                  "and meta_data with keywords, answer_phrase, action_splitter)") from None
    if meta.get("prompt_constructor") != "CoTPromptConstructor" or meta.get("action_type") != "id_accessibility_tree":
        raise PublishedFilesError(f"{where}: expected the CoT prompt over the accessibility tree with id-based actions")
    return texts
