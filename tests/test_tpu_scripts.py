"""tpu_scripts/: each script's gcloud commands (printed by --dry-run, and the same words handed
to a stand-in gcloud), argument errors, the remote command launch.sh builds run for real
through bash on this machine, and shellcheck over tpu_scripts/ and scripts/."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TPU = ROOT / "tpu_scripts"
SCRIPTS = ["create.sh", "setup.sh", "launch.sh", "status.sh", "logs.sh", "stop.sh", "babysit.sh"]
WHERE = ["--name", "lemur", "--zone", "us-central2-b"]

# arguments a launched command must receive exactly: spaces, both quotes, $, backquotes,
# backslashes, glob and shell operators, an empty word, a newline, non-ASCII
TRICKY = ["a b", "it's", 'say "hi"', "$HOME", "${PATH}", "`id`", "$(id)", "back\\slash", "*", "a;b && c | d",
          "", "two\nlines", "--config.workdir=gs://b/run 1", "héllo", "'", '"']


# The stand-in gcloud: records each call's argv as a JSON line; describe prints $FAKE_DESCRIBE
# (a TPU VM; NOT_FOUND fails as gcloud does) or $FAKE_QUEUED (a queued resource's state). With
# $FAKE_WORKERS, ssh and scp reach workers as the real one does: worker I is the directory
# $FAKE_WORKERS/I (its home), each worker's command runs by bash there, all workers at once,
# and the first non-zero status (in worker order) is returned; where $FAKE_WORKERS/NODE exists
# (several slices), worker I of node NODE is $FAKE_WORKERS/NODE/I. $FAKE_DROP_ONCE (a piece of a
# remote command): that command's connection "drops" once after it ran, and like gcloud after
# ssh's status 255 the stand-in runs it again.
FAKE_GCLOUD = r"""
import json, os, shutil, subprocess, sys
from pathlib import Path
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(argv) + "\n")
opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
if "describe" in argv:
    if "queued-resources" in argv:
        print(os.environ.get("FAKE_QUEUED", ""))
        sys.exit(0)
    if os.environ.get("FAKE_DESCRIBE") == "NOT_FOUND":
        sys.exit(print("ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: Resource not found", file=sys.stderr) or 1)
    print(os.environ.get("FAKE_DESCRIBE", ""))
    sys.exit(0)
if "FAKE_WORKERS" not in os.environ or argv[:3] != ["compute", "tpus", "tpu-vm"] or argv[3] not in ("ssh", "scp"):
    sys.exit(0)
workers = Path(os.environ["FAKE_WORKERS"])
n = int(os.environ.get("FAKE_NWORKERS", "2"))
node = argv[4] if argv[3] == "ssh" else [a for a in argv[4:] if not a.startswith("--")][1].split(":", 1)[0]
if (workers / node).is_dir():
    workers = workers / node
homes = [workers / str(i) for i in (range(n) if opts["worker"] == "all" else [int(opts["worker"])])]
if argv[3] == "scp":
    src, dst = [a for a in argv[4:] if not a.startswith("--")]
    for h in homes:
        shutil.copy(src, h / dst.split(":", 1)[1])
    sys.exit(0)
env = {k: v for k, v in os.environ.items() if k.startswith("FAKE_")}

def run_all():
    procs = [subprocess.Popen(["bash", "-c", opts["command"]], cwd=h, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**env, "HOME": str(h), "PATH": os.environ["FAKE_WORKER_PATH"],
                                              "TPU_WORKER_ID": h.name}) for h in homes]
    for p in procs:
        out, err = p.communicate(timeout=60)
        sys.stdout.write(out)
        sys.stderr.write(err)
    return next((p.returncode for p in procs if p.returncode), 0)

rc = run_all()
drop = os.environ.get("FAKE_DROP_ONCE")
if drop and drop in opts["command"] and not (workers / "dropped").exists():
    (workers / "dropped").touch()
    print("stand-in gcloud: ssh exited 255, running the command again", file=sys.stderr)
    rc = run_all()
sys.exit(rc)
"""


@pytest.fixture
def fake_gcloud(tmp_path):
    """A `gcloud` first on PATH (FAKE_GCLOUD): what the scripts really run, without a cloud.
    Returns run(script, *args, **env) -> (the finished process, gcloud's calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gcloud.jsonl"
    exe = bin_dir / "gcloud"
    exe.write_text(f"#!{sys.executable}\n{FAKE_GCLOUD}")
    exe.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log)}

    def run(script, *args, **extra_env):
        p = subprocess.run(["bash", str(TPU / script), *args], env={**env, **extra_env}, capture_output=True,
                           text=True, timeout=120)
        calls = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
        log.unlink(missing_ok=True)
        return p, calls

    return run


def dry(fake_gcloud, script, *args) -> list[list[str]]:
    """The commands --dry-run prints, split into words as a shell would; asserts it ran nothing."""
    p, calls = fake_gcloud(script, "--dry-run", *args)  # before a launched command's --
    assert p.returncode == 0, p.stderr
    assert calls == [], "--dry-run ran gcloud"
    cmds, cur = [], ""
    for line in p.stdout.splitlines(keepends=True):  # a quoted word may span lines
        cur += line
        try:
            words = shlex.split(cur)
        except ValueError:
            continue
        cmds.append(words)
        cur = ""
    assert cur == ""
    return cmds


def flag(cmd: list[str], name: str) -> str:
    vals = [w.split("=", 1)[1] for w in cmd if w.startswith(name + "=")]
    assert len(vals) == 1, (name, cmd)
    return vals[0]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    p = subprocess.run(["bash", str(TPU / script), "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout.startswith(f"Usage: {script} --name NAME --zone ZONE"), p.stderr
    assert "--dry-run" in p.stdout


@pytest.mark.parametrize("tpu_type,runtime", [("v4-512", "tpu-ubuntu2204-base"), ("v5litepod-256", "v2-alpha-tpuv5-lite"),
                                              ("v5p-128", "v2-alpha-tpuv5"), ("v6e-64", "v2-alpha-tpuv6e")])
def test_create(fake_gcloud, tpu_type, runtime):
    [cmd] = dry(fake_gcloud, "create.sh", *WHERE, "--type", tpu_type, "--spot")
    assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "lemur"]
    assert flag(cmd, "--zone") == "us-central2-b" and flag(cmd, "--accelerator-type") == tpu_type
    assert flag(cmd, "--version") == runtime and "--spot" in cmd
    # run for real (against the stand-in): the same words
    p, calls = fake_gcloud("create.sh", *WHERE, "--type", tpu_type, "--spot")
    assert p.returncode == 0 and calls == [cmd[1:]]

    [cmd] = dry(fake_gcloud, "create.sh", *WHERE, "--type", tpu_type, "--queued", "--reserved", "--version", "my-rt",
                "--project", "my-project")
    assert cmd[:6] == ["gcloud", "compute", "tpus", "queued-resources", "create", "lemur"]
    assert flag(cmd, "--node-id") == "lemur" and flag(cmd, "--accelerator-type") == tpu_type
    assert flag(cmd, "--runtime-version") == "my-rt" and flag(cmd, "--project") == "my-project"
    assert "--reserved" in cmd and "--spot" not in cmd


def test_create_multislice(fake_gcloud):
    """--num-slices 2: one queued resource, its slices named by gcloud from the prefix (NAME-0,
    NAME-1); --queued is implied."""
    [cmd] = dry(fake_gcloud, "create.sh", *WHERE, "--type", "v5p-128", "--spot", "--num-slices", "2")
    assert cmd[:6] == ["gcloud", "compute", "tpus", "queued-resources", "create", "lemur"]
    assert flag(cmd, "--node-count") == "2" and flag(cmd, "--node-prefix") == "lemur"
    assert flag(cmd, "--accelerator-type") == "v5p-128" and flag(cmd, "--runtime-version") == "v2-alpha-tpuv5"
    assert "--spot" in cmd and not any(w.startswith("--node-id") for w in cmd)
    p, calls = fake_gcloud("create.sh", *WHERE, "--type", "v5p-128", "--spot", "--num-slices", "2")
    assert p.returncode == 0 and calls == [cmd[1:]]
    assert "the slices lemur-0 lemur-1 exist once the state is ACTIVE" in p.stderr
    # one slice is the plain case
    assert dry(fake_gcloud, "create.sh", *WHERE, "--type", "v4-8", "--num-slices", "1") == \
        dry(fake_gcloud, "create.sh", *WHERE, "--type", "v4-8")


def test_multislice_dry_runs(fake_gcloud):
    """Every script reaches every worker of both slices: the same remote command per slice, led
    by the slice's name (the workers' messages carry it)."""
    ms = ["--num-slices", "2"]
    single = launch_commands(fake_gcloud, "--launch-id", "L", "--", "python", "-m", "easylemur.train",
                             "--config.mesh=dcn_data:2,fsdp:-1")
    cmds = dry(fake_gcloud, "launch.sh", *WHERE, *ms, "--launch-id", "L", "--", "python", "-m", "easylemur.train",
               "--config.mesh=dcn_data:2,fsdp:-1")
    assert [c[:6] for c in cmds] == [["gcloud", "compute", "tpus", "tpu-vm", "ssh", f"lemur-{i}"] for i in (0, 1, 0, 1)]
    assert all(flag(c, "--worker") == "all" and flag(c, "--zone") == "us-central2-b" for c in cmds)
    assert [flag(c, "--command") for c in cmds] == [f"slice_name=lemur-{i}; {single[k]}" for k in (0, 1) for i in (0, 1)]

    install, check = dry(fake_gcloud, "setup.sh", *WHERE, *ms, "--ref", "main", "--repo", "https://x.org/el.git")[::2]
    assert install[5] == check[5] == "lemur-0"
    tar, scp0, scp1, *rest = dry(fake_gcloud, "setup.sh", *WHERE, *ms, "--local", str(ROOT))
    assert [scp0[6], scp1[6]] == ["lemur-0:easylemur-src.tar.gz", "lemur-1:easylemur-src.tar.gz"]
    assert [c[5] for c in rest] == ["lemur-0", "lemur-1", "lemur-0", "lemur-1"]

    qr, *describes, ssh0, ssh1 = dry(fake_gcloud, "status.sh", *WHERE, *ms)
    assert qr[:6] == ["gcloud", "compute", "tpus", "queued-resources", "describe", "lemur"]
    assert [c[4:6] for c in describes] == [["describe", "lemur-0"], ["describe", "lemur-1"]]
    assert [ssh0[5], ssh1[5]] == ["lemur-0", "lemur-1"]

    stop0, stop1, delete = dry(fake_gcloud, "stop.sh", *WHERE, *ms, "--delete")
    assert [stop0[5], stop1[5]] == ["lemur-0", "lemur-1"] and "kill -TERM" in flag(stop1, "--command")
    assert delete == ["gcloud", "compute", "tpus", "queued-resources", "delete", "lemur", "--zone=us-central2-b",
                      "--force", "--quiet"]
    [logs] = dry(fake_gcloud, "logs.sh", *WHERE, *ms, "--slice", "1", "--worker", "3")
    assert logs[5] == "lemur-1" and flag(logs, "--worker") == "3"


def test_launch_and_stop_across_two_slices(fake_gcloud, tmp_path):
    """Two slices of two workers (the stand-in's $FAKE_WORKERS/NODE/I): launch starts four runs,
    each worker naming its slice; a second launch is refused; stop ends all four."""
    root = tmp_path / "slices"
    for node in ("lemur-0", "lemur-1"):
        for i in (0, 1):
            (root / node / str(i) / "easylemur").mkdir(parents=True)
    env = {"FAKE_WORKERS": str(root), "FAKE_WORKER_PATH": "/usr/local/bin:/usr/bin:/bin"}
    ms = [*WHERE, "--num-slices", "2"]
    pidfiles = sorted(root.glob("*/*/easylemur/logs/run.pid"))
    try:
        p, calls = fake_gcloud("launch.sh", *ms, "--launch-id", "A", "--", sys.executable, "-c", RUN_BODY, **env)
        assert p.returncode == 0, p.stderr
        assert [sorted(c[4] for c in calls[k:k + 2]) for k in (0, 2)] == [["lemur-0", "lemur-1"]] * 2  # at once
        assert "nohup setsid" not in calls[1][-1] and "nohup setsid" in calls[2][-1]  # every check before a start
        for node in ("lemur-0", "lemur-1"):
            for i in (0, 1):
                assert f"{node} worker {i}: started, log ~/easylemur/logs/run.worker{i}.log" in p.stdout
        pidfiles = sorted(root.glob("*/*/easylemur/logs/run.pid"))
        assert len(pidfiles) == 4 and all(f.read_text().split()[2] == "A" for f in pidfiles)
        p, calls = fake_gcloud("launch.sh", *ms, "--launch-id", "B", "--", "true", **env)
        assert p.returncode == 1 and len(calls) == 2 and "lemur-1 worker 1: a run is still running" in p.stderr
        p, _ = fake_gcloud("status.sh", *ms, **env, FAKE_QUEUED="ACTIVE", FAKE_DESCRIBE="READY\tHEALTHY\tv4-16\trt")
        assert p.returncode == 0 and p.stdout.count("running (pid") == 4 and "lemur-1 worker 0: running" in p.stdout
        p, _ = fake_gcloud("stop.sh", *ms, "--timeout", "20", **env)
        assert p.returncode == 0, p.stderr
        pids = [int(f.read_text().split()[0]) for f in pidfiles]
        assert not any(alive(pid) for pid in pids) and p.stdout.count(" ended\n") == 4
    finally:
        for f in pidfiles:
            kill_group(int(f.read_text().split()[0]))


def test_setup(fake_gcloud, tmp_path):
    clone, check = dry(fake_gcloud, "setup.sh", *WHERE, "--ref", "v1.2", "--repo", "https://example.org/easy lemur.git")
    for cmd in (clone, check):
        assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "lemur"]
        assert flag(cmd, "--worker") == "all" and flag(cmd, "--zone") == "us-central2-b"
    install = flag(clone, "--command")
    assert "git clone --quiet 'https://example.org/easy lemur.git' easylemur.new" in install
    assert "checkout --quiet v1.2" in install and "pip install -q -e './easylemur[tpu]'" in install
    assert "jax.device_count()" in flag(check, "--command") and "platform == \"tpu\"" in flag(check, "--command")

    tar, scp, ssh, _ = dry(fake_gcloud, "setup.sh", *WHERE, "--local", str(ROOT), "--dir", "work/el")
    assert tar[0] == "tar" and tar[tar.index("-C") + 1] == str(ROOT) and "--null" in tar and "-T" in tar
    assert scp[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "scp"] and flag(scp, "--worker") == "all"
    assert scp[6] == "lemur:easylemur-src.tar.gz"
    assert "tar -xzf easylemur-src.tar.gz -C work/el.new" in flag(ssh, "--command")
    assert "work/el-venv/bin/pip install -q -e './work/el[tpu]'" in flag(ssh, "--command")


def run_remote(command: str, home: Path, timeout=30) -> subprocess.CompletedProcess:
    """`command` as a worker's login shell runs it: bash -c, in the home directory."""
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "TPU_WORKER_ID": "3"}
    return subprocess.run(["bash", "-c", command], cwd=home, env=env, capture_output=True, text=True, timeout=timeout)


def wait_for(pred, what: str, timeout=30.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def kill_group(pid: int):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def launch_commands(fake_gcloud, *args) -> tuple[str, str]:
    """The remote commands launch.sh --dry-run prints: the check, then the start."""
    check, start = dry(fake_gcloud, "launch.sh", *WHERE, *args)
    for cmd in (check, start):
        assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "lemur"] and flag(cmd, "--worker") == "all"
    return flag(check, "--command"), flag(start, "--command")


def test_launch_preserves_every_argument_byte_for_byte(fake_gcloud, tmp_path):
    show = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': os.environ['NOTE']}))"
    cmd = [sys.executable, "-c", show, *TRICKY]
    args = [*WHERE, "--env", "NOTE=x y 'z' $HOME", "--launch-id", "L1", "--", *cmd]
    printed = dry(fake_gcloud, "launch.sh", *args)
    assert len(printed) == 2 and all(c[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "lemur"] for c in printed)
    assert all(flag(c, "--worker") == "all" and flag(c, "--zone") == "us-central2-b" for c in printed)
    p, calls = fake_gcloud("launch.sh", *args)
    assert p.returncode == 0, p.stderr
    assert calls == [c[1:] for c in printed]  # what --dry-run prints is what runs

    home = tmp_path / "home"
    (home / "easylemur").mkdir(parents=True)
    r = run_remote(flag(printed[1], "--command"), home)
    assert r.returncode == 0, r.stderr
    try:
        assert r.stdout == "worker 3: started, log ~/easylemur/logs/run.worker3.log\n"
        log = home / "easylemur" / "logs" / "run.worker3.log"
        wait_for(lambda: log.exists() and log.read_text().endswith("}\n"), "the launched command's output")
        out = json.loads(log.read_text().splitlines()[-1])
        assert out == {"argv": TRICKY, "env": "x y 'z' $HOME"}
        assert log.read_text().startswith("=== ") and " worker 3 launch L1: " in log.read_text()
    finally:
        kill_group(int((home / "easylemur" / "logs" / "run.pid").read_text().split()[0]))


# a stand-in run: like train, it exits 143 after SIGTERM once it has "saved"
RUN_BODY = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('saved, exiting', flush=True), sys.exit(143)))\n"
            "print('step 1', flush=True)\ntime.sleep(120)\n")


def test_launch_detaches_refuses_a_second_run_and_stop_ends_it(fake_gcloud, tmp_path):
    home = tmp_path / "home"
    (home / "easylemur").mkdir(parents=True)
    check, start = launch_commands(fake_gcloud, "--launch-id", "A", "--", sys.executable, "-c", RUN_BODY)
    assert run_remote(check, home).stdout == "worker 3: ready\n"
    r = run_remote(start, home)  # returns at once: the run is detached
    assert r.returncode == 0, r.stderr
    pidfile = home / "easylemur" / "logs" / "run.pid"
    pid, start_time, launch = pidfile.read_text().split()
    pid = int(pid)
    try:
        assert os.getsid(pid) == pid  # its own session: the ssh session ending does not end it
        assert launch == "A" and start_time == Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        log = home / "easylemur" / "logs" / "run.worker3.log"
        wait_for(lambda: "step 1" in log.read_text(), "the run's first output")

        # the same launch again (gcloud's retry): its own run, success; another launch: refused
        again = run_remote(start, home)
        assert again.returncode == 0 and again.stdout == f"worker 3: launch A already running (pid {pid})\n"
        check_b, start_b = launch_commands(fake_gcloud, "--launch-id", "B", "--", "true")
        for cmd in (check_b, start_b):
            other = run_remote(cmd, home)
            assert other.returncode == 1 and f"worker 3: a run is still running (pid {pid})" in other.stderr

        [stop] = dry(fake_gcloud, "stop.sh", *WHERE, "--timeout", "30")
        assert flag(stop, "--worker") == "all"
        s = run_remote(flag(stop, "--command"), home, timeout=60)
        assert s.returncode == 0, s.stderr
        assert s.stdout == f"worker 3: SIGTERM sent to run {pid}, waiting for it to save and exit\nworker 3: run {pid} ended\n"
        assert "saved, exiting" in log.read_text() and not alive(pid)
        logs = home / "easylemur" / "logs"  # how it ended, for babysit.sh: status 143, stopped on purpose
        assert (logs / "run.exit").read_text() == "143 A\n" and (logs / "run.stopped").read_text() == "A\n"
        assert run_remote(flag(stop, "--command"), home).stdout == "worker 3: no run\n"
        # launch A's start once more (a retry arriving late): done already, nothing started
        late = run_remote(start, home)
        assert late.returncode == 0 and "worker 3: launch A already started (and ended" in late.stdout
        assert log.read_text().count("=== ") == 1
    finally:
        kill_group(pid)


def test_a_stale_or_reused_pid_is_never_signalled(fake_gcloud, tmp_path):
    """run.pid names an unrelated live process (a pid reused, or a file from before a restart):
    stop finds no run and leaves it alone, launch is not refused."""
    home = tmp_path / "home"
    (home / "easylemur" / "logs").mkdir(parents=True)
    other = subprocess.Popen(["setsid", "sleep", "60"])
    try:
        wait_for(lambda: os.getsid(other.pid) == other.pid, "setsid")
        [stop] = dry(fake_gcloud, "stop.sh", *WHERE, "--timeout", "5")
        check, start = launch_commands(fake_gcloud, "--launch-id", "C", "--", "sleep", "30")
        for content in (f"{other.pid}\n", f"{other.pid} 12345 A\n"):  # the old format; a wrong start time
            (home / "easylemur" / "logs" / "run.pid").write_text(content)
            s = run_remote(flag(stop, "--command"), home)
            assert s.returncode == 0 and s.stdout == "worker 3: no run\n", s.stderr
            assert alive(other.pid)
            assert run_remote(check, home).returncode == 0
        r = run_remote(start, home)
        assert r.returncode == 0 and "started" in r.stdout, r.stderr
        kill_group(int((home / "easylemur" / "logs" / "run.pid").read_text().split()[0]))
        assert alive(other.pid)
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow
def test_stop_waits_for_the_whole_group_and_kills_it_after_the_timeout(fake_gcloud, tmp_path):
    """The leader exits on SIGTERM; a child in its group ignores it: stop waits for the child,
    SIGKILLs the group after --timeout and says so."""
    home = tmp_path / "home"
    (home / "easylemur").mkdir(parents=True)
    body = ("import subprocess, sys, time\n"
            "c = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; echo CHILD=$$; exec sleep 60'])\n"
            "time.sleep(60)\n")
    _, start = launch_commands(fake_gcloud, "--", sys.executable, "-c", body)
    assert run_remote(start, home).returncode == 0
    pid = int((home / "easylemur" / "logs" / "run.pid").read_text().split()[0])
    log = home / "easylemur" / "logs" / "run.worker3.log"
    try:
        wait_for(lambda: re.search(r"CHILD=\d", log.read_text()), "the child")
        child = int(re.search(r"CHILD=(\d+)", log.read_text())[1])
        [stop] = dry(fake_gcloud, "stop.sh", *WHERE, "--timeout", "2")
        s = run_remote(flag(stop, "--command"), home)
        assert s.returncode == 1 and f"worker 3: run {pid} still running after 2 s: SIGKILL sent" in s.stderr, s.stdout
        wait_for(lambda: not alive(child), "the child's end", timeout=5)
        assert not alive(pid)
    finally:
        kill_group(pid)


# The workers' side of setup.sh, for the stand-in gcloud: an image's python3 of version
# $FAKE_PY whose `-m pip install --user uv` works when $FAKE_PIP_UV is set; uv whose `python
# install` fails when $FAKE_UV_FAIL is set; curl and sudo that fail (no network); venvs whose
# python is this one with a stand-in jax (one TPU) and whose pip records its arguments.
FAKE_JAX = ('__version__ = "0.10.0"\nclass _D:\n    platform = "tpu"\n'
            'def devices():\n    return [_D()] * 4\ndef device_count():\n    return 8\n'
            'def local_device_count():\n    return 4\n')


@pytest.fixture
def workers(tmp_path):
    """Two worker homes for the stand-in gcloud (FAKE_WORKERS) with their own bin directory;
    the env to pass to fake_gcloud's run. Runs left behind are killed."""
    root = tmp_path / "workers"
    for i in (0, 1):
        (root / str(i) / "easylemur").mkdir(parents=True)
    wbin, extra = tmp_path / "workerbin", tmp_path / "workerextra"
    wbin.mkdir()
    (extra / "jax").mkdir(parents=True)
    (extra / "jax" / "__init__.py").write_text(FAKE_JAX)
    (extra / "mkvenv").write_text(
        f"#!/bin/bash\nmkdir -p \"$1/bin\"\n"
        f"printf '#!/bin/bash\\nPYTHONPATH={extra} exec {sys.executable} \"$@\"\\n' > \"$1/bin/python\"\n"
        "printf '#!/bin/bash\\necho \"pip $*\" >> \"$HOME/calls\"\\n' > \"$1/bin/pip\"\n"
        "chmod +x \"$1/bin/python\" \"$1/bin/pip\"\n")
    (extra / "uv").write_text(
        "#!/bin/bash\necho \"uv $*\" >> \"$HOME/calls\"\n"
        "case $1 in python) [ -z \"$FAKE_UV_FAIL\" ] || { echo 'uv: download failed' >&2; exit 2; } ;;\n"
        f"  venv) {extra}/mkvenv \"${{@: -1}}\" ;; esac\n")
    (wbin / "python3").write_text(
        "#!/bin/bash\nv=${FAKE_PY:-3.10.12}\n"
        "if [ \"$1\" = -c ]; then\n"
        f"  exec {sys.executable} -c \"import sys; sys.version_info = (${{v//./, }},); $2\" \"${{@:3}}\"\nfi\n"
        "echo \"python3 $*\" >> \"$HOME/calls\"\n"
        "if [ \"$1 $2\" = '-m venv' ]; then exec " f"{extra}/mkvenv \"$3\"; fi\n"
        "if [ \"$1 $2 $3\" = '-m pip install' ] && [ -n \"$FAKE_PIP_UV\" ]; then\n"
        f"  mkdir -p \"$HOME/.local/bin\" && cp {extra}/uv \"$HOME/.local/bin/uv\"; exit; fi\n"
        "echo 'No module named pip' >&2; exit 1\n")
    for name in ("curl", "sudo"):
        (wbin / name).write_text(f"#!/bin/bash\necho \"{name} $*\" >> \"$HOME/calls\"; exit 7\n")
    for f in [*wbin.iterdir(), extra / "uv", extra / "mkvenv"]:
        f.chmod(0o755)
    yield {"FAKE_WORKERS": str(root), "FAKE_WORKER_PATH": f"{wbin}:/usr/local/bin:/usr/bin:/bin"}
    for pidfile in root.glob("*/easylemur/logs/run.pid"):
        kill_group(int(pidfile.read_text().split()[0]))


def calls(workers, i) -> list[str]:
    f = Path(workers["FAKE_WORKERS"]) / str(i) / "calls"
    return f.read_text().splitlines() if f.exists() else []


@pytest.fixture
def source(tmp_path):
    """An easylemur source checkout for setup.sh --local: tracked files, an untracked one git
    does not ignore, an ignored one, big untracked directories, a tracked file deleted."""
    src = tmp_path / "src"
    for f in ["setup.py", "easylemur/__init__.py", "gone.txt", "notes.txt", "debug.log", "checkpoints/big.bin",
              "runs/r1/metrics.jsonl", ".venv/bin/python", "easylemur/__pycache__/x.pyc"]:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text(f)
    (src / ".gitignore").write_text("*.log\n")
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run(["git", "-C", str(src), "add", "setup.py", "easylemur/__init__.py", "gone.txt", ".gitignore"],
                   check=True)
    (src / "gone.txt").unlink()
    return src


def worker_files(workers, i) -> set[str]:
    d = Path(workers["FAKE_WORKERS"]) / str(i) / "easylemur"
    return {str(f.relative_to(d)) for f in d.rglob("*") if f.is_file()}


def test_setup_gets_a_python_jax_supports_ships_the_sources_and_survives_a_retry(fake_gcloud, workers, source):
    """The image's python3 is 3.10 (Ubuntu 22.04): uv (from pip --user) installs 3.11 and makes
    the venv; a connection dropped after the install reruns it, which succeeds; the JAX check
    names each worker."""
    p, _ = fake_gcloud("setup.sh", *WHERE, "--local", str(source), **workers, FAKE_PIP_UV="1",
                       FAKE_DROP_ONCE="tar -xzf")
    assert p.returncode == 0, p.stderr
    assert "running the command again" in p.stderr
    for i in (0, 1):
        assert f"worker {i}: jax 0.10.0, 8 devices (4 local, tpu)" in p.stdout
        c = calls(workers, i)
        assert "python3 -m pip install -q --user uv" in c and "uv python install -q 3.11" in c
        assert "uv venv -q --seed --python 3.11 easylemur-venv" in c and "pip install -q -e ./easylemur[tpu]" in c
        assert worker_files(workers, i) == {"setup.py", "easylemur/__init__.py", "notes.txt", ".gitignore"}

    # again, with a venv of 3.11 in place: kept, no uv
    for i in (0, 1):
        (Path(workers["FAKE_WORKERS"]) / str(i) / "calls").unlink()
    p, _ = fake_gcloud("setup.sh", *WHERE, "--local", str(source), **workers)
    assert p.returncode == 0, p.stderr
    assert not any(c.startswith("uv") for c in calls(workers, 0))


def test_setup_uses_the_images_python_when_new_enough(fake_gcloud, workers, source):
    p, _ = fake_gcloud("setup.sh", *WHERE, "--local", str(source), **workers, FAKE_PY="3.12.3")
    assert p.returncode == 0, p.stderr
    assert "python3 -m venv easylemur-venv" in calls(workers, 0)
    assert not any(c.startswith("uv") for c in calls(workers, 0))


def test_setup_stops_with_one_line_when_no_python_can_be_had(fake_gcloud, workers, source):
    """No pip for uv, no network for its installer: one line naming the version found."""
    p, _ = fake_gcloud("setup.sh", *WHERE, "--local", str(source), **workers)
    assert p.returncode == 1
    assert ("worker 0: python3 is 3.10.12 and no Python 3.11 could be installed with uv (see above); "
            "easylemur's JAX needs Python >= 3.11\n") in p.stderr
    p, _ = fake_gcloud("setup.sh", *WHERE, "--local", str(source), **workers, FAKE_PIP_UV="1", FAKE_UV_FAIL="1")
    assert p.returncode == 1 and "worker 1: python3 is 3.10.12 and no Python 3.11" in p.stderr


def test_setup_refuses_while_a_run_is_alive_and_keeps_the_logs(fake_gcloud, workers, source):
    p, _ = fake_gcloud("launch.sh", *WHERE, "--", sys.executable, "-c", RUN_BODY, **workers)
    assert p.returncode == 0, p.stderr
    home = Path(workers["FAKE_WORKERS"]) / "0"
    (home / "easylemur" / "marker").write_text("the copy the run uses")
    p, _ = fake_gcloud("setup.sh", *WHERE, "--local", str(source), **workers, FAKE_PY="3.12.3")
    assert p.returncode == 1 and "worker 0: a run is still running in ~/easylemur" in p.stderr
    assert (home / "easylemur" / "marker").exists()

    p, _ = fake_gcloud("stop.sh", *WHERE, "--timeout", "20", **workers)
    assert p.returncode == 0, p.stderr
    p, _ = fake_gcloud("setup.sh", *WHERE, "--local", str(source), **workers, FAKE_PY="3.12.3")
    assert p.returncode == 0, p.stderr
    assert not (home / "easylemur" / "marker").exists()  # replaced, but the logs are kept
    assert "saved, exiting" in (home / "easylemur" / "logs" / "run.worker0.log").read_text()


def test_launch_checks_every_worker_first_and_undoes_a_partial_start(fake_gcloud, workers):
    p, calls_ = fake_gcloud("launch.sh", *WHERE, "--launch-id", "A", "--", sys.executable, "-c", RUN_BODY, **workers)
    assert p.returncode == 0, p.stderr
    assert len(calls_) == 2 and "worker 0: started" in p.stdout and "worker 1: started" in p.stdout
    homes = [Path(workers["FAKE_WORKERS"]) / str(i) for i in (0, 1)]
    pids = [int((h / "easylemur" / "logs" / "run.pid").read_text().split()[0]) for h in homes]

    # another launch while A runs: refused by the check, nothing started anywhere
    p, calls_ = fake_gcloud("launch.sh", *WHERE, "--launch-id", "B", "--", "sleep", "30", **workers)
    assert p.returncode == 1 and len(calls_) == 1
    assert f"worker 0: a run is still running (pid {pids[0]})" in p.stderr and "not started" in p.stderr
    assert all((h / "easylemur" / "logs" / "run.pid").read_text().split()[2] == "A" for h in homes)

    p, _ = fake_gcloud("stop.sh", *WHERE, "--timeout", "20", **workers)
    assert p.returncode == 0 and not any(alive(pid) for pid in pids), p.stderr
    # worker 1 passes the check but cannot start (its logs/ is a file): worker 0's run is stopped
    shutil.rmtree(homes[1] / "easylemur" / "logs")
    (homes[1] / "easylemur" / "logs").write_text("")
    p, calls_ = fake_gcloud("launch.sh", *WHERE, "--launch-id", "C", "--", sys.executable, "-c", RUN_BODY, **workers)
    assert p.returncode == 1 and len(calls_) == 3, p.stderr
    assert "stopping launch C on the others" in p.stderr
    pid = int((homes[0] / "easylemur" / "logs" / "run.pid").read_text().split()[0])
    assert f"worker 0: stopped run {pid} of launch C" in p.stdout
    assert not alive(pid)


def test_launch_rerun_by_gcloud_is_one_run(fake_gcloud, workers):
    p, calls_ = fake_gcloud("launch.sh", *WHERE, "--launch-id", "A", "--", sys.executable, "-c", RUN_BODY, **workers,
                            FAKE_DROP_ONCE="nohup setsid")
    assert p.returncode == 0, p.stderr
    assert "running the command again" in p.stderr and "worker 1: launch A already running" in p.stdout
    for i in (0, 1):
        log = Path(workers["FAKE_WORKERS"]) / str(i) / "easylemur" / "logs" / f"run.worker{i}.log"
        assert log.read_text().count("=== ") == 1


def test_logs_reads_the_log_the_worker_named(fake_gcloud, workers):
    """A worker's log is named by the worker itself (its number, or its hostname without the
    metadata server): logs.sh asks the worker for the name."""
    home = Path(workers["FAKE_WORKERS"]) / "1" / "easylemur" / "logs"
    home.mkdir()
    (home / "run.worker1.log").write_text("step 7\n")
    p, _ = fake_gcloud("logs.sh", *WHERE, "--worker", "1", "--lines", "5", **workers)
    assert p.returncode == 0 and p.stdout == "step 7\n", p.stderr
    [cmd] = dry(fake_gcloud, "logs.sh", *WHERE, "--worker", "1")
    r = subprocess.run(["bash", "-c", flag(cmd, "--command")], cwd=home.parent.parent, capture_output=True, text=True,
                       env={"HOME": str(home.parent.parent), "PATH": f"{home}:/usr/bin:/bin"}, timeout=30)
    assert f"logs/run.worker{os.uname().nodename}.log" in r.stderr  # no metadata server here: the hostname


@pytest.mark.parametrize("state,says", [
    ("WAITING_FOR_RESOURCES", "No VM yet: the queued resource waits for capacity"),
    ("PROVISIONING", "No VM yet"),
    ("SUSPENDED", "lemur was preempted (spot capacity reclaimed)"),
    ("FAILED", "The queued resource failed"),
    ("DELETING", "being deleted"),
])
def test_status_queued_without_a_vm(fake_gcloud, state, says):
    p, calls_ = fake_gcloud("status.sh", *WHERE, "--queued", FAKE_QUEUED=state, FAKE_DESCRIBE="NOT_FOUND")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"lemur (queued resource): {state}\n") and says in p.stdout
    assert [c[:4] for c in calls_] == [["compute", "tpus", "queued-resources", "describe"]]  # the VM is not asked for
    if state == "SUSPENDED":
        assert "stop.sh --name lemur --zone us-central2-b --delete --queued" in p.stdout
        assert "launch.sh --name lemur --zone us-central2-b -- COMMAND" in p.stdout


def test_status_queued_active_describes_the_vm(fake_gcloud, workers):
    p, calls_ = fake_gcloud("status.sh", *WHERE, "--queued", FAKE_QUEUED="ACTIVE", **workers,
                            FAKE_DESCRIBE="READY\tHEALTHY\tv4-16\ttpu-ubuntu2204-base")
    assert p.returncode == 0, p.stderr
    assert [c[2:4] for c in calls_] == [["queued-resources", "describe"], ["tpu-vm", "describe"], ["tpu-vm", "ssh"]]
    assert "lemur: READY" in p.stdout and "worker 1: not running; log: none" in p.stdout


def test_status_logs_stop(fake_gcloud):
    describe, ssh = dry(fake_gcloud, "status.sh", *WHERE)
    assert describe[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "describe", "lemur"]
    assert flag(describe, "--zone") == "us-central2-b" and flag(ssh, "--worker") == "all"
    queued = dry(fake_gcloud, "status.sh", *WHERE, "--queued")[0]
    assert queued[:6] == ["gcloud", "compute", "tpus", "queued-resources", "describe", "lemur"]
    # a preempted VM: the recovery steps, and no ssh to workers that are gone
    p, calls = fake_gcloud("status.sh", *WHERE, FAKE_DESCRIBE="PREEMPTED\tHEALTHY\tv4-512\ttpu-ubuntu2204-base")
    assert p.returncode == 0 and "lemur was preempted" in p.stdout and "launch.sh --name lemur" in p.stdout
    assert [c[:4] for c in calls] == [["compute", "tpus", "tpu-vm", "describe"]]

    [logs] = dry(fake_gcloud, "logs.sh", *WHERE, "--worker", "5", "--follow", "--lines", "20")
    assert flag(logs, "--worker") == "5" and flag(logs, "--command").endswith(
        '; cd easylemur && tail -n 20 -F "logs/run.worker$w.log"')

    stop, delete = dry(fake_gcloud, "stop.sh", *WHERE, "--delete")
    assert flag(stop, "--worker") == "all" and "kill -TERM" in flag(stop, "--command")
    assert delete == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "lemur", "--zone=us-central2-b", "--quiet"]
    delete = dry(fake_gcloud, "stop.sh", *WHERE, "--delete", "--queued")[1]
    assert delete == ["gcloud", "compute", "tpus", "queued-resources", "delete", "lemur", "--zone=us-central2-b",
                      "--force", "--quiet"]


@pytest.mark.parametrize("script,args", [("setup.sh", []), ("launch.sh", ["--launch-id", "X", "--", "true"]),
                                         ("status.sh", []),
                                         ("logs.sh", ["--worker", "0"]), ("stop.sh", ["--delete"])])
def test_internal_ip_reaches_every_ssh_and_scp(fake_gcloud, script, args):
    def ssh_like(cmds):
        return [c for c in cmds if c[:5] in (["gcloud", "compute", "tpus", "tpu-vm", "ssh"],
                                               ["gcloud", "compute", "tpus", "tpu-vm", "scp"])]
    plain = dry(fake_gcloud, script, *WHERE, *args)
    flagged = dry(fake_gcloud, script, *WHERE, "--internal-ip", *args)
    assert ssh_like(flagged) and all("--internal-ip" in c for c in ssh_like(flagged))
    assert not any("--internal-ip" in c for c in plain)
    assert [[w for w in c if w != "--internal-ip"] for c in flagged] == plain


def test_preemptible_is_spot_with_a_warning(fake_gcloud):
    p, calls = fake_gcloud("create.sh", *WHERE, "--type", "v4-8", "--preemptible", "--queued")
    assert p.returncode == 0 and "warning: --preemptible is taken as --spot" in p.stderr
    assert "--spot" in calls[0] and "--preemptible" not in calls[0]


def test_maxtext_bench_finds_a_python_that_runs(tmp_path, monkeypatch):
    """pyenv's shim python3.12 on PATH exits 127 when 3.12 is not active: the bench takes the
    pyenv install it stands for; its MaxText venv gets the packages MaxText 0.2.5 imports."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("aot_vs_maxtext", ROOT / "bench" / "aot_vs_maxtext.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    shims, real = tmp_path / "shims", tmp_path / "pyenv" / "versions" / "3.12.4" / "bin"
    shims.mkdir()
    real.mkdir(parents=True)
    (shims / "python3.12").write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2; exit 127\n")
    (real / "python3.12").write_text("#!/bin/sh\nexit 0\n")
    for f in (shims / "python3.12", real / "python3.12"):
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert bench.find_python("3.12") == str(real / "python3.12")
    (real / "python3.12").unlink()
    assert bench.find_python("3.12") is None
    assert {"jinja2", "drjax", "pillow", "sympy"} <= set(bench.MAXTEXT_PACKAGES)


@pytest.mark.parametrize("script,args,message", [
    ("create.sh", ["--zone", "us-central2-b", "--type", "v4-8"], "--name is required"),
    ("create.sh", ["--name", "lemur", "--type", "v4-8"], "--zone is required"),
    ("create.sh", ["--name", "Lemur_1", "--zone", "us-central2-b", "--type", "v4-8"], "--name 'Lemur_1' is not a valid"),
    ("create.sh", ["--name", "lemur", "--zone", "central", "--type", "v4-8"], "--zone 'central' is not a zone"),
    ("create.sh", WHERE, "--type is required"),
    ("create.sh", [*WHERE, "--type", "v3-8"], "--type 'v3-8' is not an accelerator type"),
    ("create.sh", [*WHERE, "--type", "v4-8", "--spot", "--reserved"], "--reserved excludes --spot"),
    ("create.sh", [*WHERE, "--type"], "--type needs a value"),
    ("create.sh", [*WHERE, "--type", "v4-8", "--internal-ip"], "--internal-ip is for the scripts that reach"),
    ("create.sh", [*WHERE, "--type", "v4-8", "--colour", "red"], "unknown argument '--colour'"),
    ("setup.sh", [*WHERE, "--ref", "main", "--local", "."], "--ref and --local exclude"),
    ("setup.sh", [*WHERE, "--local", "/nonexistent"], "--local '/nonexistent' is not a directory"),
    ("setup.sh", [*WHERE, "--dir", "/abs"], "--dir '/abs' must be a path relative"),
    ("launch.sh", WHERE, "no command to run"),
    ("launch.sh", [*WHERE, "--env", "1X=2", "--", "true"], "--env '1X=2' must look like KEY=VALUE"),
    ("launch.sh", [*WHERE, "--launch-id", "a b", "--", "true"], "--launch-id 'a b' must be"),
    ("launch.sh", [*WHERE, "python", "x.py"], "unknown argument 'python' (the command to run goes after --"),
    ("logs.sh", WHERE, "--worker is required"),
    ("logs.sh", [*WHERE, "--worker", "one"], "--worker 'one' must be a worker number"),
    ("stop.sh", [*WHERE, "--timeout", "soon"], "--timeout 'soon' must be a number"),
    ("create.sh", [*WHERE, "--type", "v4-8", "--num-slices", "two"], "--num-slices 'two' must be a number of slices"),
    ("launch.sh", [*WHERE, "--num-slices", "0", "--", "true"], "--num-slices '0' must be a number of slices"),
    ("logs.sh", [*WHERE, "--worker", "0", "--num-slices", "2", "--slice", "2"], "--slice '2' must be a slice number"),
    ("logs.sh", [*WHERE, "--worker", "0", "--slice", "1"], "--slice '1' must be a slice number below --num-slices (1)"),
    ("status.sh", ["--name", "lemur"], "--zone is required"),
])
def test_bad_arguments(fake_gcloud, script, args, message):
    p, calls = fake_gcloud(script, "--dry-run", *args)
    assert p.returncode == 2 and calls == [] and p.stdout == ""
    assert p.stderr == f"{script}: error: {p.stderr.split(': error: ', 1)[1]}" and message in p.stderr, p.stderr


@pytest.mark.slow
def test_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck; scripts/setup_env.sh does it)")
    files = sorted(TPU.glob("*.sh")) + sorted((ROOT / "scripts").glob("*.sh")) + [ROOT / "scripts" / "slurm_train.sbatch"]
    strict = [str(f) for f in files if f.name != "demo.sh"]
    p = subprocess.run(["shellcheck", "-x", *strict], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    # demo.sh splits $PRETRAIN_ARGS / $CHAT_ARGS into words on purpose (SC2086, an info-level note)
    p = subprocess.run(["shellcheck", "-x", "--severity=warning", "scripts/demo.sh"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout


def test_slurm_batch_script_passes_the_distributed_flags(tmp_path):
    """scripts/slurm_train.sbatch under a stand-in srun that starts its command as 2 tasks."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf 'gpu-a\\ngpu-b\\n'\n")
    (bin_dir / "srun").write_text('#!/bin/bash\nshift  # --kill-on-bad-exit=1\n'
                                  'for i in 0 1; do SLURM_PROCID=$i SLURM_NTASKS=2 "$@" || exit; done\n')
    (bin_dir / "fakepython").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "WORKDIR": "/shared/runs/x y", "PYTHON": "fakepython"}
    p = subprocess.run(["bash", "scripts/slurm_train.sbatch", "--config.train.steps=10", "--config.data.shards=4"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    runs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("[")]
    assert runs == [["-m", "easylemur.train", "--config", "configs/llama2_7b_pretrain.py",
                     "--config.workdir=/shared/runs/x y", "--config.distributed.coordinator_address=gpu-a:12355",
                     "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}",
                     "--config.train.steps=10", "--config.data.shards=4"] for i in (0, 1)]
    p = subprocess.run(["bash", "scripts/slurm_train.sbatch"], cwd=ROOT, env={**env, "WORKDIR": ""},
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "set WORKDIR to a bucket" in p.stderr
