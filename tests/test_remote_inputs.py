"""Raw JSONL (and Parquet) read straight from a bucket (any fsspec URL; data/files.py, data/streams.py): on
fsspec's own `memory://` filesystem, a URL gives exactly what the same bytes give on local
disk: records, errors, the files a prefix or glob names, the kind detected, and a token store
built from it, byte for byte; training reads a raw URL source too (ranged reads). One test
streams an object through gcsfs (the GCS emulator, tests/gcs_emulator.py) in large GETs."""

import gzip
import json
import os
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from ml_collections import ConfigDict

from easylemur.config import validate_sources
from easylemur.data import build, streams
from easylemur.data.files import JSONL_SUFFIXES, PARQUET_SUFFIXES, detect_kind, file_sizes, resolve_files
from easylemur.data.jsonl import JsonlSource, iter_jsonl_records
from easylemur.data.pipeline import make_pipeline
from easylemur.data.readers import ParquetSource
from easylemur.data.records import BadRecord, DataError
from easylemur.tokenizer.spm import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"
LINES = [json.dumps({"text": f"document {i} " + "word " * (i % 50)}).encode() for i in range(300)]
ODD = [b"", b"   ", b"{not json", b'"a string"', b'{"text": "caf\xff"}']  # blank, blank, malformed, not a dict, bad utf-8


@pytest.fixture
def mem():
    """(memory filesystem, a fresh "memory://..." prefix): memory:// is one store per process,
    so each test writes under its own prefix and removes it."""
    fs = fsspec.filesystem("memory")
    name = f"easylemur-test-{uuid.uuid4().hex[:12]}"
    yield fs, f"memory://{name}"
    if fs.exists(f"/{name}"):
        fs.rm(f"/{name}", recursive=True)


def _put(fs, url: str, data: bytes) -> str:
    fs.pipe_file(url, data)
    return url


def _content() -> bytes:
    out = []
    for i, line in enumerate(LINES):
        out.append(line)
        if i % 60 == 7:
            out.extend(ODD)
    return b"\n".join(out)  # the last line without a newline


def _compressed(data: bytes, fmt: str) -> bytes:
    """`data` as several gzip members (zero padding between) or zstd frames (with and without a
    checksum, a skippable frame between)."""
    k = len(data) // 4 + 1
    parts = [data[i : i + k] for i in range(0, len(data), k)]
    if fmt == "gzip":
        return b"\0\0".join(gzip.compress(p) for p in parts) + b"\0" * 100
    if fmt == "zstd":
        skip = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"skip"
        return skip.join(zstandard.ZstdCompressor(write_checksum=i % 2 == 0).compress(p) for i, p in enumerate(parts))
    return data


def _norm(item, local: str, url: str):
    where, v = item
    if isinstance(v, BadRecord):
        v = ("bad", v.kind, v.where.replace(local, url))
    return where.replace(local, url), v


SUFFIX = {"plain": ".jsonl", "gzip": ".jsonl.gz", "zstd": ".jsonl.zst"}


@pytest.mark.parametrize("fmt", ["plain", "gzip", "zstd"])
def test_an_object_reads_as_the_same_bytes_on_local_disk(tmp_path, mem, monkeypatch, fmt):
    monkeypatch.setattr(streams, "DECODE_CHUNK", 1024)  # many pieces and decoder parts, lines across them
    monkeypatch.setattr(streams, "OUT_CHUNK", 4096)
    monkeypatch.setattr(streams, "READ_CHUNK", 4096)
    fs, root = mem
    blob = _compressed(_content(), fmt)
    local = tmp_path / f"d{SUFFIX[fmt]}"
    local.write_bytes(blob)
    url = _put(fs, f"{root}/d{SUFFIX[fmt]}", blob)
    want = [_norm(r, str(local), url) for r in iter_jsonl_records(str(local))]
    assert len(want) == len(LINES) + 20 and want[0] == (f"{url}:1", json.loads(LINES[0]))
    assert [_norm(r, url, url) for r in iter_jsonl_records(url)] == want
    src = JsonlSource([url])
    assert len(src) == len(want)
    order = list(range(len(src)))[::-7] + list(range(len(src)))
    assert [_norm(src[i], url, url) for i in order] == [want[i] for i in order]
    # several objects in one source, the local files' records in the same places
    url2 = _put(fs, f"{root}/e{SUFFIX[fmt]}", _compressed(b"\n".join(LINES[:5]), fmt))
    both = JsonlSource([url, url2])
    assert len(both) == len(want) + 5 and both[len(want) + 4] == (f"{url2}:5", json.loads(LINES[4]))
    # the stream of an uncompressed object is read in pieces; records by one ranged read each
    if fmt == "plain":
        remote = both._open.files[0][0].fd
        assert isinstance(remote, streams._Remote) and remote.is_ranged and remote.size == len(blob)


@pytest.mark.parametrize("fmt", ["gzip", "zstd"])
def test_a_damaged_object_is_the_local_files_error_naming_the_url(tmp_path, mem, fmt):
    fs, root = mem
    blob = _compressed(b"\n".join(LINES), fmt)
    cut = blob[: len(blob) * 2 // 3]
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0x55
    for name, data in (("cut", cut), ("flipped", bytes(flipped))):
        local = tmp_path / f"{name}{SUFFIX[fmt]}"
        local.write_bytes(data)
        url = _put(fs, f"{root}/{name}{SUFFIX[fmt]}", data)
        errors = []
        for path in (str(local), url):
            for read in (lambda p: list(iter_jsonl_records(p)), lambda p: JsonlSource([p])):
                with pytest.raises(DataError) as e:
                    read(path)
                errors.append(str(e.value).replace(path, "PATH"))
        assert len(set(errors)) == 1 and "\n" not in errors[0], errors
        assert errors[0].startswith("PATH: ") and "byte offset" in errors[0]
        if name == "cut":
            assert "truncated" in errors[0] and f"byte offset {len(cut)}" in errors[0]
    with pytest.raises(DataError, match=f"^{root}/missing.jsonl.zst: cannot read: no such object$"):
        list(iter_jsonl_records(f"{root}/missing.jsonl.zst"))


def test_prefix_glob_and_object_urls_resolve_and_detect_like_local_paths(tmp_path, mem):
    fs, root = mem
    names = ["a.jsonl", "b.jsonl.gz", "sub/c.jsonl.zst", "sub/deeper/d.json", "notes.txt", "sub/e.parquet"]
    for n in names:
        _put(fs, f"{root}/data/{n}", b'{"text": "x"}\n')
        (tmp_path / "data" / n).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / n).write_bytes(b'{"text": "x"}\n')
    loc = str(tmp_path / "data")

    def same(pattern: str, suffixes=JSONL_SUFFIXES) -> list[str]:
        got = resolve_files(f"{root}/data{pattern}", suffixes)
        want = [f"{root}/data" + f[len(loc):] for f in resolve_files(loc + pattern, suffixes)]
        assert got == want and all(f.startswith(f"{root}/data/") for f in got)
        assert detect_kind(f"{root}/data{pattern}") == detect_kind(loc + pattern)
        return got

    assert [f.rsplit("/data/", 1)[1] for f in same("")] == ["a.jsonl", "b.jsonl.gz", "sub/c.jsonl.zst",
                                                           "sub/deeper/d.json"]
    assert len(same("/*.jsonl*")) == 2 and len(same("/**/*.zst")) == 1 and len(same("/sub/*")) == 2
    assert same("/a.jsonl") == [f"{root}/data/a.jsonl"]
    assert same("/sub/e.parquet", PARQUET_SUFFIXES) == [f"{root}/data/sub/e.parquet"]
    assert detect_kind(f"{root}/data") == "jsonl" and detect_kind(f"{root}/data/sub/e.parquet") == "parquet"
    # a glob of Parquet files is Parquet (also locally, where it used to be taken for JSONL)
    assert detect_kind(f"{root}/data/**/*.parquet") == detect_kind(loc + "/**/*.parquet") == "parquet"
    # a prefix with manifest.json is a token store; one with unit files and no manifest is not finalized
    _put(fs, f"{root}/store/code/00000.ids", b"")
    _put(fs, f"{root}/store/code/00000.json", b"{}")
    with pytest.raises(DataError, match=r"^memory://\S+/store: not a finalized token store \(no manifest.json"):
        detect_kind(f"{root}/store")
    _put(fs, f"{root}/saved/dataset_info.json", b"{}")
    with pytest.raises(DataError, match=r"^memory://\S+/saved: a datasets.save_to_disk directory is not read from a bucket"):
        detect_kind(f"{root}/saved")
    _put(fs, f"{root}/store/manifest.json", b"{}")
    assert detect_kind(f"{root}/store") == detect_kind(f"{root}/store/") == "tokens"
    # nothing there: one line naming the URL
    for url, why in ((f"{root}/nothing", "no such object or prefix"),
                     (f"{root}/data/*.parquet", "the pattern matches no object")):
        with pytest.raises(DataError) as e:
            detect_kind(url)
        assert str(e.value).startswith(f"{url}: ") and why in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DataError, match="^nosuchscheme://b/x: cannot open this URL"):
        detect_kind("nosuchscheme://b/x")
    sizes = file_sizes(same(""))
    assert sizes == [14] * 4


def test_parquet_objects_read_as_local_files(tmp_path, mem):
    fs, root = mem
    table = pa.table({"text": [f"row {i}" for i in range(50)], "n": list(range(50))})
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=16)
    url = _put(fs, f"{root}/p.parquet", (tmp_path / "p.parquet").read_bytes())
    local, remote = ParquetSource([str(tmp_path / "p.parquet")], ["text"]), ParquetSource([url], ["text"])
    assert len(remote) == len(local) == 50
    assert [remote[i] for i in range(50)] == [(w.replace(str(tmp_path / "p.parquet"), url), r)
                                              for w, r in (local[i] for i in range(50))]


def _sources(**kw) -> ConfigDict:
    s = ConfigDict(kw)
    validate_sources(s, "data.sources")
    return s


def _inputs(tmp_path: Path, fs, root: str) -> tuple[dict[str, str], dict[str, str]]:
    """The same input files on local disk and under `root`: .jsonl.zst (several frames), a
    multi-member .jsonl.gz, plain .jsonl; (source -> local dir, source -> URL prefix)."""
    code = zstandard.ZstdDecompressor()
    files = {}
    for name in ("shell", "tcl"):
        raw = code.decompressobj().decompress((SAMPLES / "code" / f"{name}.jsonl.zst").read_bytes())
        files[f"code/{name}.jsonl.zst"] = _compressed(raw, "zstd")
    files["code/sub/shell.jsonl.gz"] = _compressed(raw, "gzip")
    chat = (SAMPLES / "chat" / "openorca.jsonl").read_bytes()
    files["chat/openorca.jsonl"] = chat[: len(chat) // 3].rsplit(b"\n", 1)[0] + b"\n"
    for rel, data in files.items():
        (tmp_path / "in" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / rel).write_bytes(data)
        _put(fs, f"{root}/in/{rel}", data)
    local = {s: str(tmp_path / "in" / s) for s in ("code", "chat")}
    return local, {s: f"{root}/in/{s}" for s in ("code", "chat")}


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def test_a_store_built_from_urls_equals_one_built_from_local_files(tmp_path, mem, tok):
    fs, root = mem
    local, remote = _inputs(tmp_path, fs, root)
    mans = {}
    for where, paths in (("local", local), ("remote", remote)):
        srcs = _sources(code={"path": paths["code"], "format": "text"}, chat={"path": paths["chat"], "format": "chat"})
        out = tmp_path / f"store-{where}"
        for w in range(2):
            build.tokenize(srcs, tok, str(out), seq_len=128, strict=False, worker=w, workers=2, log=lambda m: None)
        mans[where] = build.finalize(srcs, tok, str(out), seq_len=128)
    a, b = tmp_path / "store-local", tmp_path / "store-remote"
    data_files = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.suffix in (".ids", ".docs", ".mask"))
    assert len(data_files) == 3 * 2 + 3 and data_files == sorted(
        str(p.relative_to(b)) for p in b.rglob("*") if p.suffix in (".ids", ".docs", ".mask"))
    for f in data_files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    # the manifests agree but for the inputs' paths, which are the URLs (sizes the objects')
    for name in ("code", "chat"):
        ea, eb = mans["local"]["sources"][name], mans["remote"]["sources"][name]
        assert ea["documents"] == eb["documents"] > 0 and ea["tokens"] == eb["tokens"] > 0
        ins = [u["input"] for u in eb["units"]]
        assert [i["path"] for i in ins] == [remote[name] + p[len(local[name]):] for p in
                                            (u["input"]["path"] for u in ea["units"])]
        assert [i["size"] for i in ins] == [fs.size(i["path"]) for i in ins]
        for u in (*ea["units"], *eb["units"]):
            u["input"]["path"] = "X"
        ea["path"] = eb["path"] = "X"
    assert mans["local"] == mans["remote"]
    # the unit markers record the URL; a rerun finds every unit done
    marker = json.loads((b / "code" / "00000.json").read_text())
    assert marker["input"]["path"] == f"{remote['code']}/shell.jsonl.zst"
    srcs = _sources(code={"path": remote["code"]}, chat={"path": remote["chat"], "format": "chat"})
    again = build.tokenize(srcs, tok, str(b), seq_len=128, strict=False, log=lambda m: None)
    assert again["tokenized"] == 0 and again["done_before"] == 4


def test_training_reads_a_raw_url_source_as_the_local_files(tmp_path, mem, tok):
    fs, root = mem
    local, remote = _inputs(tmp_path, fs, root)
    got = {}
    for where, paths in (("local", local), ("remote", remote)):
        cfg = ConfigDict({"seq_len": 64, "strict": False, "prefetch": 0, "eval_sources": ConfigDict(),
                          "sources": _sources(code={"path": paths["code"], "weight": 2.0},
                                              chat={"path": paths["chat"], "format": "chat"})})
        with make_pipeline(cfg, tok, global_batch_size=4, seed=5) as it:
            got[where] = [{k: v.copy() for k, v in next(it).items() if k != "_bad"} for _ in range(6)]
    for x, y in zip(got["local"], got["remote"]):
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)


def test_a_gs_object_streams_in_large_gets(request, monkeypatch):
    """Through gcsfs (a GCS emulator): reading a .jsonl.zst front to back in DECODE_CHUNK pieces
    asks for REMOTE_BLOCK bytes at a time, not a request per piece."""
    try:
        bucket = request.getfixturevalue("gcs_bucket")
    except pytest.FixtureLookupError:
        pytest.skip("no gcs_bucket fixture (tests/gcs_emulator.py)")
    import gcsfs

    rng = np.random.default_rng(0)
    data = b"\n".join(json.dumps({"text": rng.bytes(600).hex()}).encode() for _ in range(2000))  # ~2.4 MB
    blob = _compressed(data, "zstd")
    url = f"{bucket}/raw/x.jsonl.zst"
    monkeypatch.setattr(streams, "REMOTE_BLOCK", 256 << 10)
    fetches = []
    real = gcsfs.GCSFileSystem._cat_file

    async def counted(self, path, start=None, end=None, **kw):
        fetches.append((start, end))
        return await real(self, path, start=start, end=end, **kw)

    # before the filesystem object is made: it binds its sync methods to the async ones then
    monkeypatch.setattr(gcsfs.GCSFileSystem, "_cat_file", counted)
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(path, blob)
    recs = list(iter_jsonl_records(url))
    assert len(recs) == 2000 and recs[-1][0] == f"{url}:2000"
    assert len(blob) > 1 << 20 and 0 < len(fetches) <= len(blob) // (256 << 10) + 1, (len(blob), fetches)
    assert sum(b - a for a, b in fetches) < 1.1 * len(blob), fetches
    assert resolve_files(f"{bucket}/raw", JSONL_SUFFIXES) == [url] and detect_kind(f"{bucket}/raw") == "jsonl"
    assert build.plan_units({"s": {"path": f"{bucket}/raw"}})[0].size == len(blob)
    assert os.environ.get("STORAGE_EMULATOR_HOST")  # (the emulator, never a real bucket)
