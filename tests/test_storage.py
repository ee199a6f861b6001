"""easylemur/storage.py, the one storage layer (docs/design.md, "Storage"): the same operations
judged on local disk and on a bucket (the GCS emulator, tests/gcs_emulator.py)."""

import pickle
from pathlib import Path

import pytest

from easylemur import storage


def test_which_backend_a_path_is_on_is_decided_by_is_url():
    assert storage.is_url("gs://b/p") and storage.is_url("s3://b/p")
    assert not storage.is_url("/tmp/x") and not storage.is_url(Path("rel/x")) and not storage.is_url("rel")
    assert storage.join("gs://b/p/", "a", "b.json") == "gs://b/p/a/b.json"
    assert storage.join("/x", "a", "b.json") == "/x/a/b.json"
    assert isinstance(storage.at("/x"), storage.Local) and isinstance(storage.at("memory://b/p"), storage.Remote)
    with pytest.raises(storage.Unreachable, match=r"^nosuch://b/p: cannot open this URL \(.*\); for gs:// install"):
        storage.at("nosuch://b/p")


@pytest.fixture(params=["local", "bucket"])
def root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "root")
    return f"{request.getfixturevalue('gcs_bucket')}/root"


def test_read_write_create_list_on_local_disk_and_in_a_bucket(root):
    sub = storage.join(root, "sub")
    f = storage.join(sub, "f.bin")
    assert not storage.exists(f)
    with pytest.raises(FileNotFoundError):
        storage.read(f)
    storage.makedirs(sub)  # a local directory; nothing in a bucket
    storage.write(f, b"0123456789")  # atomic: the old bytes or the new, never part
    assert storage.exists(f) and storage.size(f) == 10 and storage.read(f) == b"0123456789"
    assert storage.read_range(f, 2, 5) == b"234" and storage.read_range(f, 5, 5) == b""
    storage.write(f, b"replaced")
    assert storage.read(f) == b"replaced"
    assert storage.listdir(sub) == ["f.bin"]  # no private file of the writes left beside it

    marker = storage.join(sub, "marker")
    assert storage.create(marker, b"first") is True
    assert storage.create(marker, b"second") is False  # create-if-absent: the second is refused
    assert storage.read(marker) == b"first" and storage.exists(marker)
    assert storage.listdir(sub) == ["f.bin", "marker"]

    reads = storage.Ranged(root)
    assert reads.read(f, 1, 4) == b"epl" and reads.read(f, 3, 3) == b""
    assert pickle.loads(pickle.dumps(reads)).read(f, 0, 2) == b"re"  # a copy in another process opens again
    reads.close()

    storage.remove(f)
    assert not storage.exists(f) and storage.listdir(sub) == ["marker"]


def test_a_line_file_appends_locally_and_rewrites_in_a_bucket(root):
    path = storage.join(root, "events.jsonl")
    storage.write(path, b'{"a": 1}\n{"b": ')  # a killed writer's half line
    log = storage.LineFile(path, lambda: ['{"a": 1}'])
    log.append('{"c": 3}')
    want = b'{"a": 1}\n{"b": \n{"c": 3}\n' if not storage.is_url(root) else b'{"a": 1}\n{"c": 3}\n'
    assert storage.read(path) == want


def test_an_owned_file_is_created_once_and_refreshed_only_while_it_is_ours(root):
    path = storage.join(root, "run.lock")
    storage.makedirs(root)
    mine = storage.owned_file(path, "A", lambda data, version: data.startswith(b"A"))
    other = storage.owned_file(path, "B", lambda data, version: data.startswith(b"B"))
    assert mine.create(b"A1") and not other.create(b"B1")
    mine.refresh(b"A2")
    seen = other.read()
    assert seen[0] == b"A2"
    assert other.take_over(seen) and other.create(b"B1")
    with pytest.raises(storage.NotOurs):
        mine.refresh(b"A3")
    if not storage.is_url(root):  # the emulator does not enforce a DELETE's generation (tests/gcs_emulator.py)
        mine.remove()  # not ours: left alone
    assert storage.read(path) == b"B1"
    other.remove()
    assert not storage.exists(path)
