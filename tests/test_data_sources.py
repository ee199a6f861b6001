"""Sources: config validation, JSONL/gz/zst/Parquet/HF readers, bad-record accounting, strict mode."""

import gzip
import json
from pathlib import Path

import pytest
from ml_collections import ConfigDict

from easylemur.config import ConfigError, load_config, source_dict, validate_sources
from easylemur.data.pipeline import make_pipeline
from easylemur.data.readers import open_source
from easylemur.data.records import DataError
from easylemur.tokenizer.spm import Tokenizer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def cfg_for(sources: dict, strict=False, seq_len=64) -> ConfigDict:
    c = ConfigDict({"seq_len": seq_len, "strict": strict, "prefetch": 0, "sources": ConfigDict(sources)})
    validate_sources(c.sources, "data.sources")
    return c


def all_tokens(it) -> list[int]:
    return [int(t) for b in it for r, s in zip(b["input_ids"], b["segment_ids"]) for t in r[s > 0]]


# --- config ----------------------------------------------------------------------------------


def test_validate_fills_defaults():
    s = ConfigDict({"code": {"path": "x.jsonl", "weight": 3}})
    validate_sources(s, "data.sources")
    assert s.code.weight == 3.0 and s.code.format == "text" and s.code.kind == "auto" and s.code.field == ""


@pytest.mark.parametrize("entry,msg", [
    ({"path": "x", "wieght": 1.0}, "unknown config key 'data.sources.code.wieght'"),
    ({"path": "x", "format": "chats"}, "data.sources.code.format"),
    ({"path": "x", "weight": 0}, "data.sources.code.weight"),
    ({"path": "x", "weight": "heavy"}, "data.sources.code.weight"),
    ({"weight": 1.0}, "data.sources.code.path"),
    ({"path": "x", "kind": "csv"}, "data.sources.code.kind"),
])
def test_validate_errors(entry, msg):
    with pytest.raises(ConfigError, match=msg.replace(".", r"\.")):
        validate_sources(ConfigDict({"code": entry}), "data.sources")


def test_load_config_validates_sources(tmp_path):
    p = tmp_path / "c.py"
    p.write_text("from ml_collections import ConfigDict\n"
                 "def get_config():\n    c = ConfigDict()\n    c.data = ConfigDict()\n"
                 "    c.data.sources = ConfigDict({'a': ConfigDict({'path': 'p', 'weigth': 1.0})})\n    return c\n")
    with pytest.raises(ConfigError, match="data.sources.a.weigth"):
        load_config(p)
    cfg = load_config(ROOT / "configs" / "tiny_pretrain.py", ["data.sources.code.weight=5.0"])
    assert cfg.data.sources.code.weight == 5.0 and cfg.data.sources.text.format == "text"


def test_shipped_configs_point_at_samples(tok):
    for name, expect in (("tiny_pretrain", ["code", "text"]), ("tiny_chat", ["chat"])):
        cfg = load_config(ROOT / "configs" / f"{name}.py")
        assert list(cfg.data.sources) == expect
        for s in cfg.data.sources.values():
            assert len(open_source(source_dict(s))) > 0


# --- readers ---------------------------------------------------------------------------------

DOCS = [f"document number {i}\n\tindented  text" for i in range(9)]


def _write_all_formats(d: Path) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    lines = "".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(DOCS)).encode()
    (d / "a").mkdir(parents=True)
    (d / "a" / "x.jsonl").write_bytes(lines)
    (d / "a" / "y.jsonl.gz").write_bytes(gzip.compress(lines))
    (d / "a" / "z.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    (d / "a" / "ignored.txt").write_text("not data")
    pq.write_table(pa.table({"content": DOCS, "n": list(range(9))}), d / "p.parquet")
    return {"dir": d / "a", "glob": str(d / "a" / "*.jsonl*"), "gz": d / "a" / "y.jsonl.gz", "parquet": d / "p.parquet"}


def test_jsonl_parquet_hf_sources(tok, tmp_path):
    datasets = pytest.importorskip("datasets")
    p = _write_all_formats(tmp_path)
    expect = sorted(tok.encode(t) for t in DOCS)

    def docs_of(scfg, times=1):
        it = make_pipeline(cfg_for({"s": scfg}, seq_len=4096), tok, global_batch_size=1, seed=0, shuffle=False, repeat=False)
        toks = all_tokens(it)
        out, cur = [], []
        for t in toks:
            if t == tok.bos_id:
                cur = []
            elif t == tok.eos_id:
                out.append(cur)
            else:
                cur.append(t)
        return sorted(out)

    assert docs_of({"path": str(p["dir"])}) == sorted(expect * 3)  # dir: x, y.gz, z.zst
    assert docs_of({"path": p["glob"]}) == sorted(expect * 3)
    assert docs_of({"path": str(p["gz"])}) == expect
    assert docs_of({"path": str(p["parquet"]), "field": "content"}) == expect
    ds = datasets.Dataset.from_dict({"body": DOCS})
    ds.save_to_disk(str(tmp_path / "hf"))
    assert docs_of({"path": str(tmp_path / "hf"), "field": "body"}) == expect
    assert docs_of({"path": str(p["gz"]), "kind": "hf_files"}) == expect


def _data_error(tok, scfg: dict, strict=False) -> str:
    """The one-line DataError building source 's' raises."""
    with pytest.raises(DataError) as e:
        make_pipeline(cfg_for({"s": scfg}, strict=strict), tok, global_batch_size=1, seed=0)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_missing_empty_and_unusable_sources_name_source_and_path(tok, tmp_path):
    missing = tmp_path / "nothing"
    assert _data_error(tok, {"path": str(missing)}).startswith(f"source 's': {missing}: no such file or directory")
    assert _data_error(tok, {"path": str(missing), "kind": "jsonl"}).startswith(f"source 's': {missing}: no such file")
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "empty_dir" / "notes.txt").write_text("not data")
    assert _data_error(tok, {"path": str(tmp_path / "empty_dir")}).startswith(
        f"source 's': {tmp_path / 'empty_dir'}: no data files in this directory")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert _data_error(tok, {"path": str(empty)}) == f"source 's' ({empty}) is empty: no records"
    empty_gz = tmp_path / "empty.jsonl.gz"
    empty_gz.write_bytes(gzip.compress(b""))
    assert _data_error(tok, {"path": str(empty_gz)}) == f"source 's' ({empty_gz}) is empty: no records"
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"  \n\t\n")
    assert _data_error(tok, {"path": str(blank)}).startswith(f"source 's' ({blank}) has no usable record (2 records read")
    not_parquet = tmp_path / "cut.parquet"
    not_parquet.write_bytes(b"PAR1 and then nothing")
    assert _data_error(tok, {"path": str(not_parquet)}).startswith(f"source 's': {not_parquet}: not a readable Parquet file")


def _jsonl_bytes(n_docs: int) -> bytes:
    return "".join(json.dumps({"text": f"document {i} " + "words and more words " * 20}) + "\n"
                   for i in range(n_docs)).encode()


def _broken_files(d: Path) -> dict:
    """Each broken compressed file, with the first byte at which a decoder can notice."""
    import zstandard

    zst = zstandard.ZstdCompressor().compress(_jsonl_bytes(400))
    gz = gzip.compress(_jsonl_bytes(400))
    cut = len(zst) // 25  # 96% of the file lost
    files = {
        "truncated.jsonl.zst": (zst[:cut], cut),
        "truncated.jsonl.gz": (gz[: len(gz) // 2], len(gz) // 2),
        "bad_magic.jsonl.gz": (b"\x1f\x8c" + gz[2:], 1),
        "corrupt.jsonl.gz": (gz[:200] + bytes([gz[200] ^ 0x55]) + gz[201:], 200),  # a bit flip inside the data
        "garbage_after.jsonl.zst": (zst + b"not a zstd frame", len(zst)),
    }
    out = {}
    for name, (data, first) in files.items():
        (d / name).write_bytes(data)
        out[name] = (d / name, first, len(data))
    return out


@pytest.mark.parametrize("strict", [False, True])
def test_broken_compressed_files_are_errors_naming_file_and_offset(tok, tmp_path, strict):
    # a broken file is not a bad record: an error in default and strict mode alike
    for name, (path, first, size) in _broken_files(tmp_path).items():
        msg = _data_error(tok, {"path": str(path)}, strict=strict)
        assert msg.startswith(f"source 's': {path}: "), msg
        kind = "truncated" if name.startswith("truncated") else "corrupt"
        assert f": {kind} {'zstd' if name.endswith('zst') else 'gzip'} " in msg, msg
        offset = int(msg.split("byte offset ")[1].split()[0])
        assert first <= offset <= size, msg  # where the decoder stopped, not before the damage
        if kind == "truncated":
            assert offset == size


def test_gzip_members_and_zstd_frames_read_whole(tok, tmp_path):
    import zstandard

    docs = [f"doc {i} text" for i in range(6)]
    lines = [json.dumps({"text": d}).encode() + b"\n" for d in docs]
    # concatenated gzip members with zero padding after them (gzip and Python's gzip accept both)
    (tmp_path / "m.jsonl.gz").write_bytes(gzip.compress(b"".join(lines[:2])) + gzip.compress(b"".join(lines[2:]))
                                          + b"\0" * 600)
    c = zstandard.ZstdCompressor()
    (tmp_path / "f.jsonl.zst").write_bytes(c.compress(b"".join(lines[:3])) + c.compress(b"".join(lines[3:])))
    for name in ("m.jsonl.gz", "f.jsonl.zst"):
        src = open_source(source_dict({"path": str(tmp_path / name)}))
        assert [src[i][1]["text"] for i in range(len(src))] == docs


# --- bad records -----------------------------------------------------------------------------

GOOD = json.dumps({"text": "a good document"}).encode()
TEXT_BAD = [
    (b"{not json", "malformed_json"),
    (json.dumps({"body": "no text field"}).encode(), "missing_field"),
    (json.dumps({"text": 42}).encode(), "not_a_string"),
    (b'{"text": "caf\xe9 latin-1"}', "invalid_utf8"),
    (b'{"text": "lone \\ud800 surrogate"}', "invalid_utf8"),
    (json.dumps({"text": "   \n "}).encode(), "empty"),
    (b"[1, 2]", "malformed_json"),
]


def _bad_file(path: Path, bad_lines) -> Path:
    lines = []
    for raw, _ in bad_lines:
        lines += [GOOD, raw]
    lines.append(GOOD)
    path.write_bytes(b"\n".join(lines) + b"\n\n")  # a trailing blank line is not a record
    return path


def test_bad_text_records_skipped_and_counted(tok, tmp_path, capsys):
    path = _bad_file(tmp_path / "bad.jsonl", TEXT_BAD)
    it = make_pipeline(cfg_for({"t": {"path": str(path)}}), tok, global_batch_size=2, seed=0, shuffle=False, repeat=False)
    toks = all_tokens(it)
    assert toks.count(tok.bos_id) == len(TEXT_BAD) + 1  # only the good documents
    counts = it.bad_records()["t"]
    expected = {}
    for _, kind in TEXT_BAD:
        expected[kind] = expected.get(kind, 0) + 1
    assert counts == expected
    err = capsys.readouterr().err
    assert f"{path}:2: malformed_json" in err  # file:line of the first few
    assert f"{path}:4: missing_field" in err
    assert "further bad records of 't' are counted" in err
    assert "bad records skipped: 't': 7" in err  # totals at the end


def test_bad_chat_records(tok, tmp_path):
    bad = [
        (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(), "unknown_role"),
        (json.dumps({"conversations": [{"from": "human", "value": 5}]}).encode(), "not_a_string"),
        (json.dumps({"other": 1}).encode(), "missing_field"),
        (json.dumps({"messages": [{"role": "user", "content": "only a question"}]}).encode(), "no_trained_tokens"),
        (json.dumps({"messages": [{"role": "user", "content": "long " * 300},
                                  {"role": "assistant", "content": "x"}]}).encode(), "no_trained_tokens"),
        (b"\xff\xfe", "invalid_utf8"),
    ]
    good = json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}).encode()
    path = tmp_path / "chat.jsonl"
    path.write_bytes(b"\n".join(sum(([good, raw] for raw, _ in bad), []) + [good]) + b"\n")
    it = make_pipeline(cfg_for({"c": {"path": str(path), "format": "chat"}}, seq_len=64), tok,
                       global_batch_size=2, seed=0, shuffle=False, repeat=False)
    toks = all_tokens(it)
    assert toks.count(tok.bos_id) == len(bad) + 1
    kinds = {}
    for _, k in bad:
        kinds[k] = kinds.get(k, 0) + 1
    assert it.bad_records()["c"] == kinds


@pytest.mark.parametrize("line,kind", [(i, k) for i, (_, k) in enumerate(TEXT_BAD[:4])])
def test_strict_names_file_and_line(tok, tmp_path, line, kind):
    path = _bad_file(tmp_path / "bad.jsonl", [TEXT_BAD[line]])
    with pytest.raises(DataError, match=rf"{path}:2: {kind}"):
        it = make_pipeline(cfg_for({"t": {"path": str(path)}}, strict=True), tok, global_batch_size=1, seed=0,
                           shuffle=False, repeat=False)
        list(it)


def test_strict_raises_through_prefetch_threads(tok, tmp_path):
    path = _bad_file(tmp_path / "bad.jsonl", TEXT_BAD[:1])
    cfg = cfg_for({"t": {"path": str(path)}}, strict=True)
    cfg.prefetch = 2  # the record is tokenized in a read thread, the row packed in the prefetch thread
    with pytest.raises(DataError, match=r"bad\.jsonl:2: malformed_json"):
        with make_pipeline(cfg, tok, global_batch_size=1, seed=0, shuffle=False, repeat=False) as it:
            list(it)


def test_source_without_usable_record_is_an_error(tok, tmp_path):
    path = tmp_path / "allbad.jsonl"
    path.write_bytes(b"{oops\n" + json.dumps({"text": ""}).encode() + b"\n")
    with pytest.raises(DataError, match=rf"source 't' \({path}\) has no usable record .*empty 1, malformed_json 1"):
        make_pipeline(cfg_for({"t": {"path": str(path)}}), tok, global_batch_size=1, seed=0)
