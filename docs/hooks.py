"""mkdocs hooks (mkdocs.yml `hooks:`): the Benchmarks page is BENCHMARKS.md itself (the file the
bench scripts and docs/design.md name), its plot included; the config reference must be current
(docs/gen_config_reference.py), else a warning, which `mkdocs build --strict` turns into a failure;
its keys wrap at their dots only."""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("mkdocs.hooks.easylemur")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", ROOT / "docs" / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# files at the root shown as site pages: (file, page); their links into docs/ are rewritten
ROOT_PAGES = (("BENCHMARKS.md", "benchmarks.md"), ("CONTRIBUTING.md", "contributing.md"))


def _site_links(text: str) -> str:
    """A root file's links as seen from docs/: docs/X -> X, a root page -> its site page."""
    text = text.replace("](docs/", "](")
    for name, page in ROOT_PAGES:
        text = text.replace(f"]({name}", f"]({page}")
    return text


def on_files(files, config):
    for name, page in ROOT_PAGES:
        text = (ROOT / name).read_text()
        for image in re.findall(r"\]\((bench/plots/[^)\s]+\.png)\)", text):
            files.append(File.generated(config, f"assets/{Path(image).name}", abs_src_path=str(ROOT / image)))
            text = text.replace(f"]({image})", f"](assets/{Path(image).name})")
        files.append(File.generated(config, page, content=_site_links(text)))
    gen = _generator()
    if not gen.PAGE.is_file() or gen.PAGE.read_text() != gen.render():
        log.warning("docs/reference/config.md is not current: run python docs/gen_config_reference.py")
    return files


# a key cell of the config reference's tables: the row's first cell, one inline code
KEY_CELL = re.compile(r"(<tr>\s*<td>)<code>([^<]*)</code>(</td>)")


def on_page_content(html, page, config, files):
    """The config reference's keys may wrap after a dot and nowhere else (docs/assets/extra.css
    styles code.config-key; the Markdown keeps plain `key` cells)."""
    if page.file.src_uri != "reference/config.md":
        return html
    return KEY_CELL.sub(lambda m: f'{m.group(1)}<code class="config-key">{m.group(2).replace(".", ".<wbr>")}</code>{m.group(3)}',
                        html)
