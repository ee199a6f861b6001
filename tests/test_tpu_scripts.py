"""tpu_scripts/: each script's gcloud commands (printed by --dry-run, and the same words handed
to a stand-in gcloud), argument errors, the remote command launch.sh builds run for real
through bash on this machine, and shellcheck over tpu_scripts/ and scripts/."""

import json
import os
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
SCRIPTS = ["create.sh", "setup.sh", "launch.sh", "status.sh", "logs.sh", "stop.sh"]
WHERE = ["--name", "lemur", "--zone", "us-central2-b"]

# arguments a launched command must receive exactly: spaces, both quotes, $, backquotes,
# backslashes, glob and shell operators, an empty word, a newline, non-ASCII
TRICKY = ["a b", "it's", 'say "hi"', "$HOME", "${PATH}", "`id`", "$(id)", "back\\slash", "*", "a;b && c | d",
          "", "two\nlines", "--config.workdir=gs://b/run 1", "héllo", "'", '"']


@pytest.fixture
def fake_gcloud(tmp_path):
    """A `gcloud` first on PATH that records each call's argv as a JSON line (and prints
    $FAKE_DESCRIBE for describe calls): what the scripts really run, without a cloud."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gcloud.jsonl"
    exe = bin_dir / "gcloud"
    exe.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                   f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                   "if 'describe' in sys.argv: print(os.environ.get('FAKE_DESCRIBE', ''))\n")
    exe.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run(script, *args, **extra_env):
        p = subprocess.run(["bash", str(TPU / script), *args], env={**env, **extra_env}, capture_output=True,
                           text=True, timeout=60)
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
    assert tar[0] == "tar" and tar[tar.index("-C") + 1] == str(ROOT) and "--exclude=.git" in tar
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
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_launch_preserves_every_argument_byte_for_byte(fake_gcloud, tmp_path):
    show = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': os.environ['NOTE']}))"
    cmd = [sys.executable, "-c", show, *TRICKY]
    args = [*WHERE, "--env", "NOTE=x y 'z' $HOME", "--", *cmd]
    [printed] = dry(fake_gcloud, "launch.sh", *args)
    assert printed[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "lemur"]
    assert flag(printed, "--worker") == "all" and flag(printed, "--zone") == "us-central2-b"
    p, calls = fake_gcloud("launch.sh", *args)
    assert p.returncode == 0, p.stderr
    assert calls == [printed[1:]]  # what --dry-run prints is what runs

    home = tmp_path / "home"
    (home / "easylemur").mkdir(parents=True)
    r = run_remote(flag(printed, "--command"), home)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "worker 3: started, log ~/easylemur/logs/run.worker3.log\n"
    log = home / "easylemur" / "logs" / "run.worker3.log"
    wait_for(lambda: log.exists() and log.read_text().endswith("}\n"), "the launched command's output")
    out = json.loads(log.read_text().splitlines()[-1])
    assert out == {"argv": TRICKY, "env": "x y 'z' $HOME"}
    assert log.read_text().startswith("=== ") and " worker 3: " in log.read_text()


def test_launch_detaches_refuses_a_second_run_and_stop_ends_it(fake_gcloud, tmp_path):
    home = tmp_path / "home"
    (home / "easylemur").mkdir(parents=True)
    # a stand-in run: like train, it exits 143 after SIGTERM once it has "saved"
    body = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('saved, exiting', flush=True), sys.exit(143)))\n"
            "print('step 1', flush=True)\ntime.sleep(120)\n")
    [printed] = dry(fake_gcloud, "launch.sh", *WHERE, "--", sys.executable, "-c", body)
    r = run_remote(flag(printed, "--command"), home)  # returns at once: the run is detached
    assert r.returncode == 0, r.stderr
    pidfile = home / "easylemur" / "logs" / "run.pid"
    wait_for(pidfile.exists, "run.pid")
    pid = int(pidfile.read_text())
    try:
        assert os.getsid(pid) == pid  # its own session: the ssh session ending does not end it
        log = home / "easylemur" / "logs" / "run.worker3.log"
        wait_for(lambda: "step 1" in log.read_text(), "the run's first output")

        again = run_remote(flag(printed, "--command"), home)
        assert again.returncode == 1 and f"worker 3: a run is still running (pid {pid})" in again.stderr

        [stop] = dry(fake_gcloud, "stop.sh", *WHERE, "--timeout", "30")
        assert flag(stop, "--worker") == "all"
        s = run_remote(flag(stop, "--command"), home, timeout=60)
        assert s.returncode == 0, s.stderr
        assert s.stdout == f"worker 3: SIGTERM sent to run {pid}, waiting for it to save and exit\nworker 3: run {pid} ended\n"
        assert "saved, exiting" in log.read_text() and not alive(pid)
        assert run_remote(flag(stop, "--command"), home).stdout == "worker 3: no run\n"
    finally:
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


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
    assert flag(logs, "--worker") == "5" and flag(logs, "--command") == "cd easylemur && tail -n 20 -F logs/run.worker5.log"

    stop, delete = dry(fake_gcloud, "stop.sh", *WHERE, "--delete")
    assert flag(stop, "--worker") == "all" and "kill -TERM" in flag(stop, "--command")
    assert delete == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "lemur", "--zone=us-central2-b", "--quiet"]
    delete = dry(fake_gcloud, "stop.sh", *WHERE, "--delete", "--queued")[1]
    assert delete == ["gcloud", "compute", "tpus", "queued-resources", "delete", "lemur", "--zone=us-central2-b",
                      "--force", "--quiet"]


@pytest.mark.parametrize("script,args,message", [
    ("create.sh", ["--zone", "us-central2-b", "--type", "v4-8"], "--name is required"),
    ("create.sh", ["--name", "lemur", "--type", "v4-8"], "--zone is required"),
    ("create.sh", ["--name", "Lemur_1", "--zone", "us-central2-b", "--type", "v4-8"], "--name 'Lemur_1' is not a valid"),
    ("create.sh", ["--name", "lemur", "--zone", "central", "--type", "v4-8"], "--zone 'central' is not a zone"),
    ("create.sh", WHERE, "--type is required"),
    ("create.sh", [*WHERE, "--type", "v3-8"], "--type 'v3-8' is not an accelerator type"),
    ("create.sh", [*WHERE, "--type", "v4-8", "--spot", "--preemptible"], "--spot and --preemptible exclude"),
    ("create.sh", [*WHERE, "--type", "v4-8", "--queued", "--preemptible"], "--preemptible is not available for queued"),
    ("create.sh", [*WHERE, "--type"], "--type needs a value"),
    ("create.sh", [*WHERE, "--type", "v4-8", "--colour", "red"], "unknown argument '--colour'"),
    ("setup.sh", [*WHERE, "--ref", "main", "--local", "."], "--ref and --local exclude"),
    ("setup.sh", [*WHERE, "--local", "/nonexistent"], "--local '/nonexistent' is not a directory"),
    ("setup.sh", [*WHERE, "--dir", "/abs"], "--dir '/abs' must be a path relative"),
    ("launch.sh", WHERE, "no command to run"),
    ("launch.sh", [*WHERE, "--env", "1X=2", "--", "true"], "--env '1X=2' must look like KEY=VALUE"),
    ("launch.sh", [*WHERE, "python", "x.py"], "unknown argument 'python' (the command to run goes after --"),
    ("logs.sh", WHERE, "--worker is required"),
    ("logs.sh", [*WHERE, "--worker", "one"], "--worker 'one' must be a worker number"),
    ("stop.sh", [*WHERE, "--timeout", "soon"], "--timeout 'soon' must be a number"),
    ("status.sh", ["--name", "lemur"], "--zone is required"),
])
def test_bad_arguments(fake_gcloud, script, args, message):
    p, calls = fake_gcloud(script, "--dry-run", *args)
    assert p.returncode == 2 and calls == [] and p.stdout == ""
    assert p.stderr == f"{script}: error: {p.stderr.split(': error: ', 1)[1]}" and message in p.stderr, p.stderr


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
