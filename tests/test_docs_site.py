"""The docs site as a newcomer reads it, from the rendered HTML of the one strict build
(tests/test_readme.py's `built_site`, built once per process), parsed with html.parser:

- every numbered list is one <ol> holding all its items: a step list of a guide ("1. ... 2. ...
  3.") whose code blocks or paragraphs are indented less than Python-Markdown's 4 columns breaks
  into several lists, or runs its later items into a paragraph as text ("... safe. 3. Check");
- no bullet list is swallowed by the paragraph above it (a list needs a blank line before it) and
  no paragraph indented for a list item is left outside its list;
- the config reference describes every key, and its key cells wrap at dots only;
- the header links the repository, and the home page leads to reproducing Lemur and to a launch
  on a TPU pod."""

import importlib.util
import re
from html.parser import HTMLParser
from pathlib import Path

from test_readme import built_site

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REPO_URL = "https://github.com/easylemur/easylemur"

# elements whose text is read as one block; <pre> (code) is never read
BLOCKS = {"p", "li", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "div", "dd", "dt", "blockquote", "ol", "ul",
          "table", "pre", "details", "summary"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Article(HTMLParser):
    """One page's content (its <article>): `ols`, each ordered list as [start, number of items],
    in document order; `blocks`, each text block outside <pre> with the elements it sits in."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []  # the elements open inside the article
        self.inside = False
        self.ols: list[list] = []
        self.open_ols: list[list] = []
        self.blocks: list[tuple[str, tuple[str, ...]]] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def _flush(self) -> None:
        text, self.text = "".join(self.text), []
        if text.strip() and "pre" not in self.stack:
            self.blocks.append((text, tuple(self.stack)))

    def handle_starttag(self, tag, attrs):
        if tag == "article" and not self.inside:
            self.inside, self.stack = True, []
            return
        if not self.inside:
            return
        if tag in BLOCKS:
            self._flush()
        if tag == "li" and self.stack and self.stack[-1] == "ol":
            self.open_ols[-1][1] += 1
        if tag == "ol":
            self.ols.append([dict(attrs).get("start") or "1", 0])
            self.open_ols.append(self.ols[-1])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.inside:
            return
        if tag == "article":
            self._flush()
            self.inside = False
            return
        if tag in BLOCKS:
            self._flush()
        if tag in self.stack:
            closed = self.stack[len(self.stack) - 1 - self.stack[::-1].index(tag):]
            del self.stack[len(self.stack) - len(closed):]
            for _ in range(closed.count("ol")):
                self.open_ols.pop()

    def handle_data(self, data):
        if self.inside:
            self.text.append(data)


def _pages(site: Path) -> dict[str, Article]:
    """Every page of the site by its path (guides/training/index.html), parsed."""
    return {str(p.relative_to(site)): Article(p.read_text()) for p in sorted(site.rglob("index.html"))
            if p.parent.name != "search"}


def _sources() -> dict[str, Path]:
    """The Markdown behind each page: docs/**/*.md, and the root files docs/hooks.py shows as
    pages (BENCHMARKS.md, CONTRIBUTING.md). Not the API reference: its lists are docstrings."""
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    pairs = [(p.relative_to(DOCS).as_posix(), p) for p in DOCS.rglob("*.md")]
    pairs += [(page, ROOT / name) for name, page in hooks.ROOT_PAGES]
    out = {}
    for rel, path in pairs:
        if rel == "reference/api.md":
            continue
        stem = rel.removesuffix(".md")
        out["index.html" if stem == "index" else f"{stem.removesuffix('/index')}/index.html"] = path
    return out


def _numbered_sequences(text: str) -> list[int]:
    """The lengths of the numbered lists of a Markdown text, as written: items `1.`, `2.`, ...
    at one indentation, outside code fences; a number other than the next one starts a list."""
    lengths: list[int] = []
    last: dict[int, tuple[int, int]] = {}  # indentation -> (its list's index in lengths, its last number)
    fence = None
    for line in text.splitlines():
        m = re.match(r"( *)(`{3,}|~{3,})", line)
        if fence:
            fence = None if m and m.group(2).startswith(fence) else fence
            continue
        if m:
            fence = m.group(2)
            continue
        item = re.match(r"( *)(\d+)\.\s+\S", line)
        if not item:
            continue
        indent, number = len(item.group(1)), int(item.group(2))
        for deeper in [i for i in last if i > indent]:
            del last[deeper]
        if indent in last and number == last[indent][1] + 1:
            index = last[indent][0]
            lengths[index] += 1
        else:
            index = len(lengths)
            lengths.append(1)
        last[indent] = (index, number)
    return lengths


def test_numbered_lists_are_one_list_each():
    """On every page each numbered list is one <ol> starting at 1 (mkdocs.yml's sane_lists: a
    list broken apart shows `<ol start="2">`), and no item's text "2. ..." sits outside its list;
    each page's <ol>s are its Markdown's numbered lists, item for item."""
    site = built_site()
    pages, wrong = _pages(site), []
    assert len(pages) >= 14 and "guides/tpu-pods/index.html" in pages and "reference/api/index.html" in pages
    for name, page in pages.items():
        wrong += [f"{name}: an <ol> starting at {start} (a list broken apart)" for start, _ in page.ols if start != "1"]
        for text, _ in page.blocks:
            lost = [line.strip() for line in text.split("\n") if re.match(r"\s*\d+\.\s+\S", line)]
            wrong += [f"{name}: a numbered item outside its list: {line[:80]!r}" for line in lost]
    for name, source in _sources().items():
        written = sorted(_numbered_sequences(source.read_text()))
        rendered = sorted(items for _, items in pages[name].ols)
        if written != rendered:
            wrong.append(f"{name}: numbered lists of {written} items in {source.relative_to(ROOT)}, "
                         f"<ol>s of {rendered} on the page")
    assert not wrong, "\n".join(wrong)
    # the step lists of the guides, whole
    assert 7 in [items for _, items in pages["guides/tpu-pods/index.html"].ols]  # TPU pods, step by step
    assert 6 in [items for _, items in pages["guides/training/index.html"].ols]  # continued pre-training


def test_list_content_stays_in_its_list():
    """No bullet list runs into the paragraph above it as text (Python-Markdown needs a blank line
    before a list), and no paragraph indented as a list item's content (less than 4 columns) is
    left outside the list. The API reference is left out: its text is the code's docstrings."""
    site = built_site()
    wrong = []
    for name, page in _pages(site).items():
        if name == "reference/api/index.html":
            continue
        for text, where in page.blocks:
            if where[-1:] != ("p",):
                continue
            lines = text.strip().split("\n")
            wrong += [f"{name}: a list item inside a paragraph: {line.strip()[:80]!r}"
                      for line in lines[1:] if re.match(r"\s*[-*+]\s+\S", line)]
            if "li" not in where and any(re.match(r" +\S", line) for line in lines[1:]):
                wrong.append(f"{name}: a list item's paragraph outside its list: {text.strip()[:80]!r}")
    assert not wrong, "\n".join(wrong)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", DOCS / "gen_config_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_config_reference_describes_every_key():
    """Every key of default_config() (and every per-source key) has a description in the
    reference: the comment beside it in easylemur/config/schema.py."""
    from easylemur.config import default_config, reference

    gen = _generator()
    described = gen.descriptions()
    keys = [k for k, _ in reference.flat(default_config())]
    assert len(keys) > 60 and set(keys) == set(described)
    missing = [k for k in keys if not described[k].strip()]
    assert not missing, f"keys without a comment in easylemur/config/schema.py: {', '.join(missing)}"
    import easylemur.config.schema as schema

    import dataclasses

    from easylemur.model.config import LlamaConfig

    fields = reference.field_comments(LlamaConfig)  # model.<field>: config keys too
    assert not [f.name for f in dataclasses.fields(LlamaConfig) if not fields.get(f.name, "").strip()]
    per_source = reference.dict_comments(schema, "SOURCE_DEFAULTS")
    assert set(per_source) == set(schema.SOURCE_DEFAULTS)
    assert not [k for k, v in per_source.items() if not v.strip()]
    page = gen.PAGE.read_text()
    for key, text in described.items():  # the page shows them (tests/test_readme.py: it is current)
        assert re.search(rf"^\| `{re.escape(key)}` \| .* \| {re.escape(gen._cell(text))} \|$", page, re.M), key


def test_config_reference_keys_wrap_at_dots_only():
    """The key cells of the config reference (docs/hooks.py) may break after a dot and nowhere
    else (docs/assets/extra.css): `data.seq_len` never shows as `data.seq_le n`."""
    site = built_site()
    html = (site / "reference/config/index.html").read_text()
    keys = re.findall(r'<tr>\s*<td><code class="config-key">([^<]*(?:<wbr>[^<]*)*)</code></td>', html)
    assert len(keys) > 60
    assert "data.<wbr>seq_len" in keys and "seed" in keys
    # a break after every dot, and after dots only
    assert not [k for k in keys if re.search(r"\.(?!<wbr>)", k) or "<wbr>" in k.replace(".<wbr>", ".")]
    css = (site / "assets/extra.css").read_text()
    assert 'href="../../assets/extra.css"' in html
    assert re.search(r"code\.config-key\s*\{[^}]*word-break:\s*normal", css)


def test_header_links_the_repository_and_home_leads_to_lemur_and_a_pod():
    """Every page's header links the repository (mkdocs.yml repo_url); the home page opens with
    two entry points, before its guide table: reproducing Lemur (continued pre-training, chat
    fine-tuning, Lemur's table) and launching on a TPU pod, each link to a real anchor."""
    site = built_site()
    home = (site / "index.html").read_text()
    assert f'href="{REPO_URL}"' in home and f'href="{REPO_URL}"' in (site / "guides/data/index.html").read_text()
    content = home[home.index("<article"):]
    lemur, pod, guides = content.index("Reproduce Lemur"), content.index("Launch on a TPU pod"), content.index('id="guides"')
    assert lemur < pod < guides
    links = {"guides/training/#continued-pre-training-from-llama-2-step-by-step": lemur,
             "guides/training/#chat-fine-tuning": lemur,
             "guides/evaluation/#reproduce-lemurs-table": lemur,
             "guides/tpu-pods/#step-by-step": pod}
    for link, after in links.items():
        at = content.index(f'href="{link}"')
        assert after < at < guides and (at < pod) == (after == lemur), link
        page, anchor = link.split("#")
        assert f'id="{anchor}"' in (site / page / "index.html").read_text(), link
