"""WebArena's tasks (`config_files/test.raw.json`, in file order, each known by its task_id) on the
user's deployment of its sites, and what keeps a task from running here.

The deployment is `--webarena URL_MAP`: a JSON file (or `site=URL,site=URL`) mapping each site of
env_config.py (shopping, shopping_admin, reddit, gitlab, wikipedia, map, homepage) to its base URL,
and optionally `auth` to a folder of login states (the `<sites>_state.json` files WebArena's
`browser_env/auto_login.py --auth_folder DIR` writes for the deployment). A task's placeholders
(`__SHOPPING__`, ...) are replaced by those URLs over its whole configuration, as WebArena's
`scripts/generate_test_data.py` writes its per-task config files.

A task is skipped, counted with the reason, when a site it uses is not in the map; when it starts
logged in and the map gives no login state for it; when it is judged by an LLM (WebArena's
`fuzzy_match`: GPT-4) and no judge is given (`judge`); or when its judge calls a helper of
`evaluation_harness/helper_functions.py` (`func:` in the configuration, `helpers.py`) that is not
known here (the shop's helpers need the shopping site in the map)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any, Optional

from easylemur.errors import InputError
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, json_list
from easylemur.eval.benchmarks.webarena.files import TASKS, WEBARENA
from easylemur.eval.benchmarks.webarena.texts import WebArenaTexts, load_texts

URL_MAP_ENV = "EASYLEMUR_WEBARENA"  # the default of --webarena
_FUNC = re.compile(r"func:\s*([A-Za-z_]\w*)")


@dataclasses.dataclass(frozen=True)
class WebArenaProblem:
    task_id: int
    intent: str
    config: dict  # the task's configuration as in the file (placeholders unreplaced)

    @property
    def sites(self) -> list[str]:
        return list(self.config.get("sites") or [])


def _problems(text: str, where: str) -> list[WebArenaProblem]:
    out = []
    for i, row in enumerate(json_list(text, where)):
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), int) or not isinstance(row.get("intent"), str) \
                or not isinstance(row.get("eval"), dict) or not isinstance(row.get("start_url"), str):
            raise PublishedFilesError(f"{where}: task {i} lacks its task_id, intent, start_url or eval")
        out.append(WebArenaProblem(row["task_id"], row["intent"], row))
    return out


def parse_url_map(value: str, sites: list[str]) -> dict:
    """--webarena's value: a JSON file, or `site=URL,site=URL`; its keys are `sites` and `auth`."""
    value = value.strip()
    if not value:
        return {}
    path = Path(os.path.expanduser(value))
    if path.is_file():
        try:
            out = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"--webarena {value}: not JSON ({e})") from None
        if not isinstance(out, dict) or not all(isinstance(v, str) for v in out.values()):
            raise InputError(f"--webarena {value}: expected a JSON object of site -> URL (and auth -> folder)")
    elif "=" in value and not value.startswith(("{", "/", ".")):
        out = {}
        for part in value.split(","):
            key, sep, url = part.partition("=")
            if not sep or not url.strip():
                raise InputError(f"--webarena: {part!r} is not site=URL")
            out[key.strip()] = url.strip()
    else:
        raise InputError(f"--webarena {value}: no such file (expected a JSON file of site -> URL, or site=URL,...)")
    unknown = sorted(set(out) - set(sites) - {"auth"})
    if unknown:
        raise InputError(f"--webarena: unknown site {', '.join(unknown)} (WebArena's sites: {', '.join(sites)}; "
                         "and auth for the login states' folder)")
    return {k: (v.rstrip("/") if k != "auth" else os.path.expanduser(v)) for k, v in out.items()}


class WebArenaTask:
    """WebArena on one copy of its files and one deployment (`url_map`, parse_url_map's)."""

    name = "webarena"

    def __init__(self, files: RepoFiles, url_map: Optional[dict] = None):
        self.files = files
        self.texts: WebArenaTexts = load_texts(files)
        self.problems: list[Any] = _problems(files.text(TASKS), files.where(TASKS))
        self.url_map = dict(url_map or {})
        self.judge: Any = None  # judge.make_judge's function, where a judge endpoint is given
        self._shop: Any = None

    @property
    def site_names(self) -> list[str]:
        return [self.texts.site_name(v) for v in self.texts.sites]

    def deployment(self) -> dict:
        """{site variable (SHOPPING): the deployment's URL} for the sites the map gives."""
        return {v: self.url_map[self.texts.site_name(v)] for v in self.texts.sites
                if self.texts.site_name(v) in self.url_map}

    def configured(self, p: WebArenaProblem) -> dict:
        """The task's configuration with its placeholders replaced by the deployment's URLs."""
        text = json.dumps(p.config)
        for variable, url in self.deployment().items():
            text = text.replace(f"__{variable}__", url)
        config = json.loads(text)
        if config.get("storage_state"):
            config["storage_state"] = str(Path(self.url_map.get("auth", "")) / os.path.basename(config["storage_state"]))
        return config

    def skip_reason(self, p: WebArenaProblem) -> Optional[str]:
        """Why task `p` cannot be played and judged here (None: it can)."""
        missing = [s for s in p.sites if s not in self.url_map]
        if missing:
            return f"its site {', '.join(missing)} is not in --webarena's map"
        state = p.config.get("storage_state")
        if state:
            if "auth" not in self.url_map:
                return "it starts logged in, and --webarena's map names no auth folder of login states"
            if not (Path(self.url_map["auth"]) / os.path.basename(state)).is_file():
                return f"its login state {os.path.basename(state)} is not in the auth folder"
        answers = p.config["eval"].get("reference_answers") or {}
        if "fuzzy_match" in answers and self.judge is None:
            return "it is judged by an LLM (WebArena's fuzzy_match: GPT-4), and no judge was given (--feedback-endpoint)"
        known = self.helpers()
        missing = sorted({m.group(1) for target in p.config["eval"].get("program_html") or []
                          for m in _FUNC.finditer(f"{target.get('url', '')} {target.get('locator', '')}")} - set(known))
        if missing:
            return (f"its judge calls WebArena's helper {', '.join(missing)}, not known here (the shop's helpers need "
                    "the shopping site in the map)")
        return None

    def helpers(self) -> dict:
        """The functions a `func:` target may call (helpers.py); the shop's need its URL."""
        from easylemur.eval.benchmarks.webarena.helpers import Shop, functions, shop_admin

        if "shopping" not in self.url_map:
            return functions(None)
        if self._shop is None:
            self._shop = Shop(self.url_map["shopping"], shop_admin(self.files))
        return functions(self._shop)


def build(data: Optional[str], variant: str = "", prompt_format: str = "base", url_map: str = "") -> Any:
    """The registry's factory: WebArena from the copy of its repository at `data` (None: the fetch
    cache), on the deployment `url_map` (--webarena's value; default $EASYLEMUR_WEBARENA)."""
    task = WebArenaTask(RepoFiles.locate(WEBARENA, data))
    task.url_map = parse_url_map(url_map or os.environ.get(URL_MAP_ENV, ""), task.site_names)
    return task
