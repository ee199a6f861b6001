"""JSONL sources in constant memory (data/jsonl.py, data/streams.py): a compressed file is decompressed as a
stream into a private temporary file (random access, `JsonlSource`) or straight into records
(`iter_jsonl_records`), so peak memory does not grow with the file; the two paths give the same
records, and a damaged file the same error."""

import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest
import zstandard

from easylemur.data import streams
from easylemur.data.jsonl import JsonlSource, iter_jsonl_records
from easylemur.data.records import BadRecord, DataError

ROOT = Path(__file__).resolve().parents[1]
TEXT = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 140  # ~8 KB lines, compress ~1000x
PER_BLOCK = 128  # lines of a ~1 MiB block, repeated


def _block() -> bytes:
    return "".join(json.dumps({"id": i, "text": TEXT}) + "\n" for i in range(PER_BLOCK)).encode()


def _write_big_zst(path: Path, blocks: int) -> int:
    """A .jsonl.zst of `blocks` ~1 MiB blocks (a few hundred KB on disk); its line count."""
    block = _block()
    with open(path, "wb") as f, zstandard.ZstdCompressor(level=1).stream_writer(f) as w:
        for _ in range(blocks):
            w.write(block)
    return blocks * PER_BLOCK


def _peak_rss_mb(cmd: list[str], env: dict) -> float:
    """The peak RSS of the process `cmd` runs, in MiB (wait4's rusage of that child alone)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        assert p.returncode == 0, err.read().decode()[-3000:]
    return usage.ru_maxrss / 1024  # KiB on Linux


SOURCE_CHILD = textwrap.dedent("""
    import sys
    from easylemur.data.jsonl import JsonlSource
    path, n, per_block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    src = JsonlSource([path])
    assert len(src) == n, len(src)
    for i in range(0, n, 97):
        where, rec = src[i]
        assert where == f"{path}:{i + 1}" and rec["id"] == i % per_block, (where, rec)
""")

ITER_CHILD = textwrap.dedent("""
    import sys
    from easylemur.data.jsonl import iter_jsonl_records
    path, n, per_block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    count = 0
    for where, rec in iter_jsonl_records(path):
        assert rec["id"] == count % per_block, (where, rec)
        count += 1
    assert count == n and where == f"{path}:{n}", (count, where)
""")


@pytest.fixture(scope="module")
def big_files(tmp_path_factory):
    """Two .jsonl.zst files of 50 and 400 MiB decompressed, and a TMPDIR for the children."""
    d = tmp_path_factory.mktemp("big")
    small, large = d / "small.jsonl.zst", d / "large.jsonl.zst"
    n_small, n_large = _write_big_zst(small, 50), _write_big_zst(large, 400)
    assert large.stat().st_size < 4 << 20  # quick to write: the decompressed size is what counts
    tmp = d / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "JAX_PLATFORMS": "cpu"}
    return {"small": (small, n_small), "large": (large, n_large), "tmp": tmp, "env": env, "dir": d}


@pytest.mark.slow
@pytest.mark.parametrize("child", ["source", "iter"])
def test_peak_memory_does_not_grow_with_the_file(big_files, child):
    # 350 MiB more of decompressed JSONL: the old in-memory reader grew by about twice that
    code = SOURCE_CHILD if child == "source" else ITER_CHILD
    peaks = {}
    for size in ("small", "large"):
        path, n = big_files[size]
        peaks[size] = _peak_rss_mb([sys.executable, "-c", code, str(path), str(n), str(PER_BLOCK)], big_files["env"])
    assert peaks["large"] - peaks["small"] < 32, peaks
    assert os.listdir(big_files["tmp"]) == []  # no temporary file or directory left behind


@pytest.mark.slow
def test_stats_cli_memory_does_not_grow_with_the_file(big_files):
    peaks = {}
    for size in ("small", "large"):
        path, _ = big_files[size]
        cfg = big_files["dir"] / f"{size}_cfg.py"
        cfg.write_text(textwrap.dedent(f"""
            from ml_collections import ConfigDict

            def get_config():
                c = ConfigDict()
                c.model = ConfigDict({{"preset": "tiny"}})
                c.data = ConfigDict({{"seq_len": 256}})
                c.data.sources = ConfigDict({{"big": ConfigDict({{"path": {str(path)!r}, "weight": 1.0}})}})
                c.train = ConfigDict({{"steps": 10, "batch_size": 4}})
                return c
        """))
        # every record is indexed (the whole file decompressed); a sample of them tokenized
        cmd = [sys.executable, "-m", "easylemur.data", "stats", "--config", str(cfg), "--no-progress",
               "--sample-records", "20", "--format", "json"]
        peaks[size] = _peak_rss_mb(cmd, big_files["env"])
    assert peaks["large"] - peaks["small"] < 64, peaks
    assert os.listdir(big_files["tmp"]) == []


# --- the streamed and the random-access paths agree --------------------------------------------

LINES = [
    json.dumps({"text": "first"}).encode(),
    b"",  # zero-length: not a record, but counted in the line numbers
    b"   \t",  # whitespace only: a record whose value is None
    b"{not json",
    b'{"text": "caf\xe9"}',  # invalid UTF-8
    b"[1, 2]",  # not an object
    json.dumps({"text": "crlf"}).encode() + b"\r",
    json.dumps({"text": "long " * 3000}).encode(),  # spans many decoder parts below
    b"",
    b"",
    json.dumps({"text": "last, no newline"}).encode(),
]


def _norm(item):
    where, v = item
    return (where, (v.kind, v.where) if isinstance(v, BadRecord) else v)


def _expected(path, data: bytes) -> list:
    """The reference: every non-empty line of the decompressed bytes, parsed."""
    out = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw:
            continue
        where = f"{path}:{n}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            out.append((where, ("invalid_utf8", where)))
            continue
        try:
            v = None if not line.strip() else json.loads(line)
        except json.JSONDecodeError:
            v = BadRecord("malformed_json", where, "")
        if v is not None and not isinstance(v, (dict, BadRecord)):
            v = BadRecord("malformed_json", where, "")
        out.append(_norm((where, v)))
    return out


def _multi(data: bytes, fmt: str, parts: int) -> bytes:
    """`data` as several gzip members (zero padding between and after) or zstd frames (one with
    a checksum and the content size, a skippable frame between)."""
    k = len(data) // parts + 1
    pieces = [data[i : i + k] for i in range(0, len(data), k)]
    if fmt == "gzip":
        return b"\0\0".join(gzip.compress(p) for p in pieces) + b"\0" * 700
    out = []
    for i, p in enumerate(pieces):
        out.append(zstandard.ZstdCompressor(level=3, write_checksum=i % 2 == 0, write_content_size=i % 2 == 1).compress(p))
        out.append(b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"skip")  # a skippable frame
    return b"".join(out)


@pytest.mark.parametrize("fmt", ["gzip", "zstd", "plain"])
def test_streamed_and_random_access_records_are_equal(tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(streams, "OUT_CHUNK", 4096)  # many decoder parts, lines across them
    monkeypatch.setattr(streams, "DECODE_CHUNK", 1024)
    monkeypatch.setattr(streams, "READ_CHUNK", 4096)
    data = b"\n".join(LINES * 40)
    suffix = {"gzip": ".jsonl.gz", "zstd": ".jsonl.zst", "plain": ".jsonl"}[fmt]
    path = tmp_path / f"m{suffix}"
    path.write_bytes(data if fmt == "plain" else _multi(data, fmt, 7))
    expect = _expected(path, data)
    src = JsonlSource([str(path)])
    assert [_norm(src[i]) for i in range(len(src))] == expect
    assert [_norm(r) for r in iter_jsonl_records(str(path))] == expect
    # RLE-like data: a few bytes of zstd per 128 KiB block, cut into decoder calls of bounded output
    rle = (json.dumps({"text": "z" * 100}).encode() + b"\n") * 20_000
    if fmt != "plain":
        path2 = tmp_path / f"rle{suffix}"
        path2.write_bytes(_multi(rle, fmt, 2))
        fd, size = streams._open_fd(str(path2))
        try:
            assert max(len(c) for c in streams._chunks(str(path2), fd, size, fmt)) <= 4096 + 2 * streams.ZSTD_BLOCK_MAX
        finally:
            os.close(fd)
        src2 = JsonlSource([str(path2)])
        assert len(src2) == 20_000 and src2[19_999] == (f"{path2}:20000", {"text": "z" * 100})


def test_many_files_threads_and_pickled_copies(tmp_path):
    data = b"\n".join(LINES * 5) + b"\n\n"
    files, expect = [], []
    for name, blob, content in (("a.jsonl", data, data), ("b.jsonl.gz", _multi(data, "gzip", 3), data),
                                ("c.jsonl", b"", b""), ("d.jsonl.zst", _multi(data, "zstd", 3), data),
                                ("e.jsonl.gz", gzip.compress(b""), b"")):
        (tmp_path / name).write_bytes(blob)
        files.append(str(tmp_path / name))
        expect += _expected(files[-1], content)
    src = JsonlSource(files)
    assert [_norm(src[i]) for i in range(len(src))] == expect
    assert _norm(src[-1]) == expect[-1]
    with pytest.raises(IndexError):
        src[len(src)]
    got = [None] * len(src)

    def read(t):
        for i in range(t, len(src), 4):
            got[i] = _norm(src[i])

    threads = [threading.Thread(target=read, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expect
    copy = pickle.loads(pickle.dumps(src))  # in this process: shares the open files, no second decompression
    assert copy._open is src._open and [_norm(copy[i]) for i in range(len(copy))] == expect
    # another process opens (and decompresses) each file on its first access
    blob = tmp_path / "src.pkl"
    blob.write_bytes(pickle.dumps(src))
    code = ("import pickle, sys, json; s = pickle.load(open(sys.argv[1], 'rb')); "
            "assert all(f is None for f in s._open.files); print(json.dumps([s[i][0] for i in range(len(s))]))")
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(out.stdout) == [w for w, _ in expect]


def test_temporary_file_is_private_and_unnamed(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    path = tmp_path / "x.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b'{"a": 1}\n'))
    src = JsonlSource([str(path)])
    assert src[0] == (f"{path}:1", {"a": 1})
    assert os.listdir(tmp) == []  # unlinked at once, its private directory removed
    st = os.fstat(src._open.tmp.fd)
    assert st.st_nlink == 0 and st.st_mode & 0o777 == 0o600
    fd = src._open.tmp.fd
    del src
    with pytest.raises(OSError):  # closed with the source
        os.fstat(fd)


def test_changed_file_is_an_error_in_a_new_process(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    blob = tmp_path / "src.pkl"
    blob.write_bytes(pickle.dumps(JsonlSource([str(path)])))
    path.write_bytes(gzip.compress(b'{"a": 1}\n'))
    code = "import pickle, sys; s = pickle.load(open(sys.argv[1], 'rb')); s[1]"
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0 and f"{path}: changed since it was indexed" in out.stderr


# --- damaged files: the same error on both paths -------------------------------------------------


def _broken(d: Path) -> dict:
    data = "".join(json.dumps({"text": f"document {i} " + "words " * 40}) + "\n" for i in range(2000)).encode()
    zst = _multi(data, "zstd", 3)
    gz = gzip.compress(data)
    files = {  # name: (bytes, the first byte at which a decoder can notice)
        "truncated.jsonl.zst": (zst[: len(zst) // 2], len(zst) // 2),
        "truncated.jsonl.gz": (gz[: len(gz) // 2], len(gz) // 2),
        "bad_magic.jsonl.gz": (b"\x1f\x8c" + gz[2:], 1),
        "corrupt.jsonl.gz": (gz[:3000] + bytes([gz[3000] ^ 0x55]) + gz[3001:], 3000),
        "corrupt.jsonl.zst": (zst[:3000] + bytes([zst[3000] ^ 0x55]) + zst[3001:], 3000),
        "garbage_after.jsonl.zst": (zst + b"not a zstd frame", len(zst)),
        "garbage_after.jsonl.gz": (gz + b"\0\0not gzip", len(gz) + 2),
    }
    for name, (blob, _) in files.items():
        (d / name).write_bytes(blob)
    return {name: (d / name, first, len(blob)) for name, (blob, first) in files.items()}


def test_damaged_files_same_error_on_both_paths(tmp_path):
    for name, (path, first, size) in _broken(tmp_path).items():
        with pytest.raises(DataError) as e:
            JsonlSource([str(path)])
        msg = str(e.value)
        kind = "truncated" if name.startswith("truncated") else "corrupt"
        fmt = "zstd" if name.endswith("zst") else "gzip"
        assert msg.startswith(f"{path}: {kind} {fmt} "), msg
        offset = int(msg.split("byte offset ")[1].split()[0])
        assert first <= offset <= size, msg
        if kind == "truncated":
            assert offset == size
        streamed = []
        with pytest.raises(DataError) as e2:
            for r in iter_jsonl_records(str(path)):
                streamed.append(r)
        assert str(e2.value) == msg
        if name.startswith(("truncated", "garbage")):
            assert len(streamed) > 100  # the records before the damage came first
