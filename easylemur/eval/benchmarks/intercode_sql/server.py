"""A private MariaDB server for one run (InterCode ran MySQL 8 in Docker; MariaDB speaks the same
SQL for Spider's queries): everything it has (data directory, socket, pid file, error log,
secure_file_priv directory) lies in a fresh `mkdtemp` directory, it listens on that socket only
(`--skip-networking`), ignores every my.cnf (`--no-defaults`), and is stopped, and the directory
removed, when the run ends, on an error or KeyboardInterrupt too.

Loading: root (no password, reachable only through the socket in the 0700 directory) loads
InterCode's dump, the dump's own `admin` account is dropped, and an account `agent` with SELECT on
the dump's databases only (no FILE, no writes, no other database) runs every query, each under
`max_statement_time`. Table names are case-insensitive (`--lower-case-table-names=1`), as
InterCode's server was started.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from easylemur.errors import InputError

INSTALL_HINT = "apt-get install -y mariadb-server (bash scripts/setup_eval.sh installs it)"
DRIVER_HINT = "pip install mysql-connector-python (InterCode's own MySQL driver)"
SYSTEM_DBS = ("information_schema", "mysql", "performance_schema", "sys")


class ServerUnavailable(InputError):
    """No MariaDB server can be started here (not installed, or it failed to start)."""


def _which(name: str) -> Optional[str]:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)


def binaries() -> dict:
    """The paths of mariadbd, mariadb-install-db and the mariadb client; ServerUnavailable naming what is missing."""
    found = {"server": _which("mariadbd"), "install": _which("mariadb-install-db"),
             "client": _which("mariadb") or _which("mysql")}
    missing = [k for k, v in found.items() if v is None]
    if missing:
        raise ServerUnavailable(f"no MariaDB server here (missing: {', '.join(missing)}); {INSTALL_HINT}")
    return found


def driver() -> Any:
    try:
        import mysql.connector  # noqa: F401
    except ImportError:
        raise ServerUnavailable(f"no MySQL driver in this Python; {DRIVER_HINT}") from None
    return mysql.connector


def available() -> str:
    """"" when a server can run here, else why not (with how to install it)."""
    try:
        binaries()
        driver()
    except ServerUnavailable as e:
        return str(e)
    return ""


class MariaDB:
    """One private server: `with MariaDB(dump) as db: db.connect("museum_visit")`."""

    def __init__(self, dump: Optional[Path] = None, statement_seconds: float = 10.0, start_seconds: float = 120.0):
        self.dump, self.statement_seconds, self.start_seconds = dump, float(statement_seconds), float(start_seconds)
        self.dir: Optional[Path] = None
        self.proc: Optional[subprocess.Popen] = None
        self.password = secrets.token_hex(16)
        self.databases: list[str] = []

    # ------------------------------------------------------------------ life

    def __enter__(self) -> "MariaDB":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def socket(self) -> str:
        assert self.dir is not None
        return str(self.dir / "sock")

    def start(self) -> None:
        bins = binaries()
        driver()
        self.dir = Path(tempfile.mkdtemp(prefix="easylemur-mariadb-"))
        if len(self.socket) > 100:  # a unix socket path's limit is 108 bytes
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = Path(tempfile.mkdtemp(prefix="elmdb-", dir="/tmp"))
        d = self.dir
        (d / "files").mkdir(mode=0o700)  # secure_file_priv: an empty directory of this run
        (d / "tmp").mkdir(mode=0o700)
        user = pwd.getpwuid(os.geteuid()).pw_name
        common = ["--no-defaults", f"--datadir={d / 'data'}", f"--user={user}", "--lower-case-table-names=1"]
        r = subprocess.run([bins["install"], *common, "--auth-root-authentication-method=normal", "--skip-test-db",
                            f"--tmpdir={d / 'tmp'}"], capture_output=True, text=True, timeout=self.start_seconds)
        if r.returncode != 0:
            raise ServerUnavailable(f"mariadb-install-db failed: {(r.stderr or r.stdout).strip()[-400:]}")
        self.proc = subprocess.Popen(
            [bins["server"], *common, f"--socket={self.socket}", f"--pid-file={d / 'mariadbd.pid'}",
             f"--log-error={d / 'error.log'}", f"--tmpdir={d / 'tmp'}", f"--secure-file-priv={d / 'files'}",
             "--skip-networking", "--skip-log-bin", "--innodb-buffer-pool-size=128M", "--max-connections=200",
             "--local-infile=0", "--symbolic-links=0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + self.start_seconds
        while True:
            if self.proc.poll() is not None:
                raise ServerUnavailable(f"mariadbd exited with status {self.proc.returncode}: {self._log_tail()}")
            if os.path.exists(self.socket):
                try:
                    self.root().close()
                    break
                except Exception:  # noqa: BLE001 - not accepting yet
                    pass
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"mariadbd did not start in {self.start_seconds:g} s: {self._log_tail()}")
            time.sleep(0.1)
        if self.dump is not None:
            self.load(self.dump)

    def _log_tail(self) -> str:
        try:
            return " | ".join((Path(self.dir or "") / "error.log").read_text(errors="replace").strip().splitlines()[-3:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stops the server and removes its directory (idempotent)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # mariadbd shuts down cleanly on SIGTERM
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        d, self.dir = self.dir, None
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)

    # ------------------------------------------------------------------ accounts

    def root(self) -> Any:
        return driver().connect(unix_socket=self.socket, user="root", password="", autocommit=True)

    def load(self, dump: Path) -> None:
        """Loads a dump as root (the client, fed the file), then makes the read-only account."""
        with open(dump, "rb") as f:
            r = subprocess.run([binaries()["client"], "--no-defaults", f"--socket={self.socket}", "--user=root",
                                "--batch"], stdin=f, capture_output=True, timeout=max(self.start_seconds, 600))
        if r.returncode != 0:
            raise ServerUnavailable(f"loading {dump} failed: {r.stderr.decode(errors='replace').strip()[-400:]}")
        conn = self.root()
        try:
            cur = conn.cursor()
            cur.execute("SHOW DATABASES")
            self.databases = sorted(row[0] for row in cur.fetchall() if row[0].lower() not in SYSTEM_DBS)
            cur.execute("SELECT user, host FROM mysql.user WHERE user NOT IN ('root', 'mariadb.sys', '')")
            for user, host in cur.fetchall():  # the dump's own accounts (InterCode's admin) go
                cur.execute("DROP USER %s@%s", (user, host))
            cur.execute("CREATE USER 'agent'@'localhost' IDENTIFIED BY %s", (self.password,))
            for db in self.databases:
                cur.execute(f"GRANT SELECT ON `{db.replace('`', '``')}`.* TO 'agent'@'localhost'")
            cur.execute("FLUSH PRIVILEGES")
        finally:
            conn.close()

    def connect(self, database: str) -> Any:
        """A connection of the read-only account on `database` (InterCode's `use <db>`), every
        statement of it limited to `statement_seconds`."""
        conn = driver().connect(unix_socket=self.socket, user="agent", password=self.password, database=database,
                                autocommit=True)
        cur = conn.cursor()
        cur.execute(f"SET SESSION max_statement_time = {self.statement_seconds:g}")
        cur.close()
        return conn

    def kill_query(self, connection_id: int) -> None:
        """Stops the statement a connection runs (the watchdog behind max_statement_time)."""
        conn = self.root()
        try:
            conn.cursor().execute(f"KILL QUERY {int(connection_id)}")
        except Exception:  # noqa: BLE001 - it ended meanwhile
            pass
        finally:
            conn.close()
