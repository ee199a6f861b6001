"""Rebuilds data/samples/ from licence-clean files found on a standard dev machine.

Deterministic: the same inputs give byte-identical outputs. Run from the repo root:

    python data/samples/build_samples.py [--cpython /path/to/lib/python3.11]

Sources (see README.md for the licences):
  code/python.jsonl.zst   CPython 3.11 standard-library modules (PSF-2.0)
  code/c.jsonl.zst        CPython 3.11 public C headers (PSF-2.0)
  code/shell.jsonl.zst    pyenv's bash scripts (MIT)
  code/tcl.jsonl.zst      Tcl 8.6 script library (Tcl/Tk licence, BSD-style)
  code/javascript.jsonl.zst  jQuery 3 (MIT), split at top-level sections
  text/python_reference.jsonl   the Python Language Reference topics shipped in
                               CPython's Lib/pydoc_data/topics.py (PSF-2.0)
  chat/*.jsonl            conversations constructed from the two above (see README.md)
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import random
import re
import runpy
import textwrap
from pathlib import Path

import zstandard

HERE = Path(__file__).resolve().parent
CODE_BUDGET = {"python": 2_600_000, "c": 450_000, "shell": 150_000, "tcl": 250_000, "javascript": 300_000}
MAX_FILE = 60_000  # bytes; keeps the sample varied instead of a few huge modules


def _write_jsonl(path: Path, records: list[dict], compress: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    if compress:
        # level 19 and no content checksum variance: output is deterministic
        data = zstandard.ZstdCompressor(level=19).compress(data)
    path.write_bytes(data)
    print(f"{path.relative_to(HERE)}: {len(records)} records, {len(data)} bytes on disk")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def _pick(files: list[str], budget: int, root: str, language: str, license: str, seed: int) -> list[dict]:
    files = sorted(files)
    random.Random(seed).shuffle(files)
    out, total = [], 0
    for f in files:
        text = _read(f)
        if not text or not text.strip() or len(text.encode()) > MAX_FILE:
            continue
        if total + len(text.encode()) > budget:
            continue
        total += len(text.encode())
        out.append({"text": text, "path": os.path.relpath(f, root), "language": language, "license": license})
    out.sort(key=lambda r: r["path"])
    return out


def code_records(cpython: str, include: str) -> dict[str, list[dict]]:
    py_files = [
        f
        for f in glob.glob(os.path.join(cpython, "**", "*.py"), recursive=True)
        if not re.search(r"/(test|tests|site-packages|idlelib/idle_test|lib2to3/tests|__pycache__)/", f)
    ]
    out = {
        "python": _pick(py_files, CODE_BUDGET["python"], os.path.dirname(cpython), "python", "PSF-2.0", 1),
        "c": _pick(glob.glob(os.path.join(include, "**", "*.h"), recursive=True), CODE_BUDGET["c"],
                   os.path.dirname(include), "c", "PSF-2.0", 2),
    }
    pyenv = os.path.expanduser("~/.pyenv")
    sh = [f for f in glob.glob(os.path.join(pyenv, "libexec", "*")) + glob.glob(os.path.join(pyenv, "plugins", "*", "bin", "*"))
          if os.path.isfile(f) and (_read(f) or "").startswith("#!") and "bash" in (_read(f) or "").split("\n", 1)[0]]
    out["shell"] = _pick(sh, CODE_BUDGET["shell"], pyenv, "shell", "MIT", 3)
    tcl = glob.glob("/usr/share/tcltk/tcl8.6/**/*.tcl", recursive=True)
    out["tcl"] = _pick(tcl, CODE_BUDGET["tcl"], "/usr/share/tcltk", "tcl", "TCL", 4)
    # jQuery is one big file: split it at blank-line-separated top-level blocks into ~8 KB documents.
    js = _read("/usr/share/javascript/jquery/jquery.js") or ""
    docs, cur = [], ""
    for block in re.split(r"(?<=\n)(?=\n)", js):
        cur += block
        if len(cur) > 8000:
            docs.append(cur)
            cur = ""
    if cur:
        docs.append(cur)
    total, js_recs = 0, []
    for i, d in enumerate(docs):
        if total + len(d) > CODE_BUDGET["javascript"]:
            break
        total += len(d)
        js_recs.append({"text": d, "path": f"javascript/jquery/jquery.js#part{i}", "language": "javascript", "license": "MIT"})
    out["javascript"] = js_recs
    return out


def reference_topics(cpython: str) -> dict[str, str]:
    return runpy.run_path(os.path.join(cpython, "pydoc_data", "topics.py"))["topics"]


def text_records(topics: dict[str, str]) -> list[dict]:
    return [
        {"text": topics[k], "topic": k, "source": "CPython 3.11 Lib/pydoc_data/topics.py", "license": "PSF-2.0"}
        for k in sorted(topics)
    ]


# --- chat ------------------------------------------------------------------------------------

SYSTEM_PROMPTS = [
    "You are a helpful programming assistant.",
    "You are an expert Python developer. Answer concisely.",
    "You are a knowledgeable assistant who explains Python clearly.",
]


def _functions(cpython: str, rng: random.Random) -> list[dict]:
    """Small documented top-level functions from the stdlib: (module, signature, doc, source)."""
    out = []
    for f in sorted(glob.glob(os.path.join(cpython, "*.py"))):
        src = _read(f)
        if not src:
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            seg = ast.get_source_segment(src, node)
            if not doc or not seg or len(seg) > 1100 or len(doc) < 30:
                continue
            sig = f"{node.name}({ast.unparse(node.args)})"
            out.append({"module": Path(f).stem, "name": node.name, "sig": sig, "doc": doc, "source": seg})
    rng.shuffle(out)
    return out


def _sections(topics: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(heading, paragraphs) pairs from the reference text (headings are underlined with *, = or -)."""
    out = []
    for key in sorted(topics):
        lines = topics[key].split("\n")
        heading, body = None, []
        for i, line in enumerate(lines):
            if i + 1 < len(lines) and re.fullmatch(r"[*=\-^~]{3,}", lines[i + 1]) and line.strip():
                if heading and body:
                    out.append((heading, body))
                heading, body = line.strip(), []
            elif re.fullmatch(r"[*=\-^~]{3,}", line):
                continue
            else:
                body.append(line)
        if heading and body:
            out.append((heading, body))
    result = []
    for heading, body in out:
        paras = [p.strip("\n") for p in "\n".join(body).split("\n\n") if p.strip()]
        paras = [textwrap.dedent(p) for p in paras]
        if paras and sum(map(len, paras)) > 200:
            result.append((heading, paras))
    return result


def _take(paras: list[str], limit: int) -> tuple[str, list[str]]:
    taken, rest = [], list(paras)
    while rest and (not taken or sum(map(len, taken)) + len(rest[0]) <= limit):
        taken.append(rest.pop(0))
    return "\n\n".join(taken), rest


def chat_records(cpython: str, topics: dict[str, str]) -> dict[str, list[dict]]:
    rng = random.Random(5)
    convs = []  # list of message lists
    for fn in _functions(cpython, rng)[:420]:
        summary = fn["doc"].split("\n\n")[0].replace("\n", " ")
        ask = rng.choice([
            f"Write a Python function `{fn['sig']}`. {summary}",
            f"Implement `{fn['name']}` in Python with the signature `{fn['sig']}`: {summary}",
            f"How would the `{fn['module']}` module implement `{fn['sig']}`? It should do this: {summary}",
        ])
        msgs = [{"role": "user", "content": ask},
                {"role": "assistant", "content": f"Here is the implementation from the standard library's `{fn['module']}` module:\n\n```python\n{fn['source']}\n```"}]
        rest = fn["doc"].split("\n\n", 1)
        if len(rest) > 1 and rest[1].strip() and rng.random() < 0.5:
            msgs += [{"role": "user", "content": "Can you say more about how it behaves?"},
                     {"role": "assistant", "content": textwrap.dedent(rest[1]).strip()}]
        convs.append(("code", msgs))
    for heading, paras in _sections(topics)[:260]:
        ask = rng.choice([f"Explain \"{heading}\" in Python.", f"What does the Python reference say about {heading.lower()}?",
                          f"Can you describe {heading.lower()} in Python?"])
        first, rest = _take(paras, 900)
        msgs = [{"role": "user", "content": ask}, {"role": "assistant", "content": first}]
        if rest and rng.random() < 0.5:
            more, _ = _take(rest, 700)
            msgs += [{"role": "user", "content": "Please go on."}, {"role": "assistant", "content": more}]
        convs.append(("text", msgs))
    rng.shuffle(convs)
    openai, sharegpt, orca = [], [], []
    for i, (task, msgs) in enumerate(convs):
        meta = {"task": task, "origin": "constructed"}
        if i % 3 == 2 and len(msgs) == 2:
            orca.append({"id": f"orca-{i}", "system_prompt": rng.choice(SYSTEM_PROMPTS) if rng.random() < 0.7 else "",
                         "question": msgs[0]["content"], "response": msgs[1]["content"], **meta})
        elif i % 3 == 1:
            role = {"user": "human", "assistant": "gpt"}
            conv = [{"from": role[m["role"]], "value": m["content"]} for m in msgs]
            if rng.random() < 0.3:
                conv.insert(0, {"from": "system", "value": rng.choice(SYSTEM_PROMPTS)})
            sharegpt.append({"id": f"sharegpt-{i}", "conversations": conv, **meta})
        else:
            if rng.random() < 0.5:
                msgs = [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)}] + msgs
            openai.append({"id": f"openai-{i}", "messages": msgs, **meta})
    return {"openai_messages": openai, "sharegpt": sharegpt, "openorca": orca}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpython", default=os.path.expanduser("~/.pyenv/versions/3.11.7/lib/python3.11"))
    ap.add_argument("--include", default=os.path.expanduser("~/.pyenv/versions/3.11.7/include/python3.11"))
    args = ap.parse_args()
    for lang, recs in code_records(args.cpython, args.include).items():
        _write_jsonl(HERE / "code" / f"{lang}.jsonl.zst", recs, compress=True)
    topics = reference_topics(args.cpython)
    _write_jsonl(HERE / "text" / "python_reference.jsonl", text_records(topics), compress=False)
    for name, recs in chat_records(args.cpython, topics).items():
        _write_jsonl(HERE / "chat" / f"{name}.jsonl", recs, compress=False)


if __name__ == "__main__":
    main()
