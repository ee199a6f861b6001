"""tpu_scripts/babysit.sh against a stand-in gcloud that keeps state: queued resources and TPU
VMs that can be created, described, preempted and deleted, their workers (directories on this
machine whose commands bash runs, as in test_tpu_scripts.py) and a bucket (a directory). The
launched command is a small bash script standing in for train: it resumes from the newest
checkpoint in its bucket workdir, prints "step N", saves every 5 steps and exits 0 at the end."""

import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TPU = ROOT / "tpu_scripts"
WHERE = ["--name", "lemur", "--zone", "us-central2-b"]

# The stand-in gcloud. State in $FAKE_STATE/state.json (under a lock): {name: {"kind": "qr" |
# "vm", "state": ..., "nodes": [...]}}; worker I of node N is the directory
# $FAKE_WORKERS/N/I ($FAKE_NWORKERS per node), made empty by a create (a new VM's disk) and
# removed, with every process of the runs found there, by a delete. ssh reaches the workers of a
# node whose resource is ACTIVE (a queued resource) or READY (a VM), else fails as ssh does
# (255). `storage ls gs://B/P/` lists $FAKE_BUCKET/B/P. Every call's argv goes to $FAKE_LOG.
FAKE_GCLOUD = r"""
import fcntl, json, os, shutil, signal, subprocess, sys
from contextlib import contextmanager
from pathlib import Path
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(argv) + "\n")
opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
state_dir, workers = Path(os.environ["FAKE_STATE"]), Path(os.environ["FAKE_WORKERS"])
nworkers = int(os.environ.get("FAKE_NWORKERS", "2"))

@contextmanager
def state():
    with open(state_dir / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        f = state_dir / "state.json"
        s = json.loads(f.read_text()) if f.exists() else {}
        yield s
        f.write_text(json.dumps(s))

def not_found(what):
    sys.exit(print(f"ERROR: (gcloud) NOT_FOUND: {what} not found", file=sys.stderr) or 1)

def kill_runs(node):
    for pidfile in (workers / node).glob("*/easylemur/logs/run.pid"):
        try:
            os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass

def node_of(s, node):
    return next((r for r in s.values() if node in r["nodes"]), None)

if argv[:2] == ["storage", "ls"]:
    d = Path(os.environ["FAKE_BUCKET"]) / argv[2][len("gs://"):]
    if not d.is_dir():
        sys.exit(print("ERROR: (gcloud.storage.ls) One or more URLs matched no objects.", file=sys.stderr) or 1)
    for e in sorted(d.iterdir()):
        print(argv[2].rstrip("/") + "/" + e.name + ("/" if e.is_dir() else ""))
    sys.exit(0)
group, verb, name = argv[2], argv[3], argv[4]
if verb == "create":
    with state() as s:
        if name in s:
            sys.exit(print(f"ERROR: (gcloud) ALREADY_EXISTS: {name}", file=sys.stderr) or 1)
        if group == "queued-resources":
            n = int(opts.get("node-count", 1))
            nodes = [opts["node-id"]] if "node-id" in opts else [f"{opts['node-prefix']}-{i}" for i in range(n)]
            s[name] = {"kind": "qr", "state": "ACTIVE", "nodes": nodes}
        else:
            s[name] = {"kind": "vm", "state": "READY", "nodes": [name]}
        for node in s[name]["nodes"]:
            shutil.rmtree(workers / node, ignore_errors=True)
            for i in range(nworkers):
                (workers / node / str(i)).mkdir(parents=True)
    sys.exit(0)
if verb == "delete":
    with state() as s:
        if name not in s:
            not_found(name)
        for node in s.pop(name)["nodes"]:
            kill_runs(node)
            shutil.rmtree(workers / node, ignore_errors=True)
    sys.exit(0)
if verb == "describe":
    with state() as s:
        if group == "queued-resources":
            if name not in s:
                not_found(name)
            print(s[name]["state"])
        else:
            r = node_of(s, name)
            if r is None:
                not_found(name)
            st = r["state"] if r["kind"] == "vm" else ("READY" if r["state"] == "ACTIVE" else "PREEMPTED")
            print(st + "\tHEALTHY\tv4-16\ttpu-ubuntu2204-base")
    sys.exit(0)
# ssh, scp
node = name if verb == "ssh" else [a for a in argv[4:] if not a.startswith("--")][1].split(":", 1)[0]
with state() as s:
    r = node_of(s, node)
    if r is None or r["state"] not in ("ACTIVE", "READY"):
        sys.exit(print(f"ssh: connect to host {node}: Connection refused", file=sys.stderr) or 255)
homes = [workers / node / str(i) for i in (range(nworkers) if opts["worker"] == "all" else [int(opts["worker"])])]
if verb == "scp":
    src, dst = [a for a in argv[4:] if not a.startswith("--")]
    for h in homes:
        shutil.copy(src, h / dst.split(":", 1)[1])
    sys.exit(0)
env = {k: v for k, v in os.environ.items() if k.startswith("FAKE_")}
procs = [subprocess.Popen(["bash", "-c", opts["command"]], cwd=h, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**env, "HOME": str(h), "PATH": os.environ["FAKE_WORKER_PATH"], "TPU_WORKER_ID": h.name,
                               "FAKE_NODE": node}) for h in homes]
for p in procs:
    out, err = p.communicate(timeout=60)
    sys.stdout.write(out)
    sys.stderr.write(err)
sys.exit(next((p.returncode for p in procs if p.returncode), 0))
"""

# The workers' python3 (the image's, new enough) whose `-m venv DIR` makes a venv whose python
# sees a stand-in jax with TPU devices and whose pip does nothing.
FAKE_JAX = ('__version__ = "0.10.0"\nclass _D:\n    platform = "tpu"\n'
            'def devices():\n    return [_D()] * 4\ndef device_count():\n    return 16\n'
            'def local_device_count():\n    return 4\n')

# The stand-in for train (arguments: --config.workdir=gs://B/P STEPS [EXIT_STATUS]): notes its
# start in $FAKE_STATE/starts and a second live run in the same home in $FAKE_STATE/double;
# resumes after the newest checkpoint, saves every 5 steps (worker 0 of the first slice, or of
# the one VM), exits EXIT_STATUS (default 0) after STEPS.
FAKE_TRAIN = r"""#!/bin/bash
wd=$FAKE_BUCKET/${1#--config.workdir=gs://}/checkpoints
if [ -f "$HOME/train.pid" ] && kill -0 "$(cat "$HOME/train.pid")" 2>/dev/null; then
  echo "$FAKE_NODE/$TPU_WORKER_ID" >> "$FAKE_STATE/double"
fi
echo $$ > "$HOME/train.pid"
start=$(ls "$wd" 2>/dev/null | sort -n | tail -n 1)
echo "$FAKE_NODE/$TPU_WORKER_ID ${start:-0}" >> "$FAKE_STATE/starts"
for ((s = ${start:-0} + 1; s <= $2; s++)); do
  sleep 0.04
  echo "step $s"
  if [ "$TPU_WORKER_ID" = 0 ] && [[ $FAKE_NODE != *-[1-9]* ]] && ((s % 5 == 0)); then mkdir -p "$wd/$s"; fi
done
exit "${3:-0}"
"""


class Cloud:
    """The stand-in's world: run(script, *args) runs a tpu_script against it; babysit(*args)
    starts babysit.sh in the background; preempt(state) flips a resource's state and kills
    every run on its workers, as a preemption does."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.state_dir, self.workers, self.bucket = tmp_path / "state", tmp_path / "workers", tmp_path / "bucket"
        for d in (self.state_dir, self.workers, self.bucket):
            d.mkdir()
        bin_dir, wbin, extra = tmp_path / "bin", tmp_path / "workerbin", tmp_path / "workerextra"
        for d in (bin_dir, wbin, extra / "jax"):
            d.mkdir(parents=True)
        (bin_dir / "gcloud").write_text(f"#!{sys.executable} -S\n{FAKE_GCLOUD}")
        (extra / "jax" / "__init__.py").write_text(FAKE_JAX)
        (wbin / "python3").write_text(
            "#!/bin/bash\n"
            "if [ \"$1 $2\" = '-m venv' ]; then\n"
            "  mkdir -p \"$3/bin\"\n"
            f"  printf '#!/bin/bash\\nPYTHONPATH={extra} exec {sys.executable} \"$@\"\\n' > \"$3/bin/python\"\n"
            "  printf '#!/bin/bash\\nexit 0\\n' > \"$3/bin/pip\"\n"
            "  chmod +x \"$3/bin/python\" \"$3/bin/pip\"; exit\nfi\n"
            f"exec {sys.executable} \"$@\"\n")
        self.train = tmp_path / "train.sh"
        self.train.write_text(FAKE_TRAIN)
        for f in (bin_dir / "gcloud", wbin / "python3", self.train):
            f.chmod(0o755)
        self.source = tmp_path / "src"
        (self.source / "easylemur").mkdir(parents=True)
        (self.source / "setup.py").write_text("")
        (self.source / "easylemur" / "__init__.py").write_text("")
        self.log = tmp_path / "gcloud.jsonl"
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(self.log),
                    "FAKE_STATE": str(self.state_dir), "FAKE_WORKERS": str(self.workers),
                    "FAKE_BUCKET": str(self.bucket), "TMPDIR": str(tmp_path),
                    "FAKE_WORKER_PATH": f"{wbin}:/usr/local/bin:/usr/bin:/bin"}
        self.procs: list[subprocess.Popen] = []

    @contextmanager
    def state(self):
        with open(self.state_dir / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            f = self.state_dir / "state.json"
            s = json.loads(f.read_text()) if f.exists() else {}
            yield s
            f.write_text(json.dumps(s))

    def run(self, script, *args):
        return subprocess.run(["bash", str(TPU / script), *args], env=self.env, capture_output=True, text=True,
                              timeout=60)

    def calls(self) -> list[list[str]]:
        return [json.loads(l) for l in self.log.read_text().splitlines()] if self.log.exists() else []

    def babysit(self, *args) -> subprocess.Popen:
        self.out, self.err = self.tmp / "babysit.out", self.tmp / "babysit.err"
        p = subprocess.Popen(["bash", str(TPU / "babysit.sh"), *args], env=self.env, stdout=self.out.open("w"),
                             stderr=self.err.open("w"), text=True, start_new_session=True)
        self.procs.append(p)
        return p

    def text(self) -> str:
        return self.out.read_text()

    def log_of(self, node: str, worker: int = 0) -> str:
        f = self.workers / node / str(worker) / "easylemur" / "logs" / f"run.worker{worker}.log"
        return f.read_text() if f.exists() else ""

    def preempt(self, name: str, new_state: str):
        with self.state() as s:
            s[name]["state"] = new_state
            for node in s[name]["nodes"]:
                for pidfile in (self.workers / node).glob("*/easylemur/logs/run.pid"):
                    try:
                        os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for pidfile in self.workers.glob("*/*/easylemur/logs/run.pid"):
            try:
                os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


@pytest.fixture
def cloud(tmp_path):
    c = Cloud(tmp_path)
    yield c
    c.close()


def wait_for(pred, what: str, proc=None, timeout=30.0):
    end = time.monotonic() + timeout
    while not pred():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"babysit.sh exited ({proc.returncode}) while waiting for {what}")
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def starts(cloud) -> list[str]:
    f = cloud.state_dir / "starts"
    return f.read_text().splitlines() if f.exists() else []


FAST = ["--poll", "0.2", "--backoff", "0", "--stop-timeout", "10"]


@pytest.mark.slow
def test_two_preemptions_of_a_two_slice_queued_resource(cloud):
    """Two slices of two workers each, created by babysit.sh; two preemptions (the queued
    resource SUSPENDED, then PREEMPTED, every run killed): each is deleted, created, set up and
    relaunched exactly once, the run resumes from its newest checkpoint and finishes: exit 0."""
    p = cloud.babysit(*WHERE, "--type", "v4-16", "--spot", "--num-slices", "2", "--local", str(cloud.source), *FAST,
                      "--", "bash", str(cloud.train), "--config.workdir=gs://bkt/run", "30")
    wait_for(lambda: "step 7\n" in cloud.log_of("lemur-0"), "step 7", p)
    cloud.preempt("lemur", "SUSPENDED")
    wait_for(lambda: "interruption 1/" in cloud.text(), "the first relaunch", p)
    wait_for(lambda: len(starts(cloud)) == 8 and "step 12\n" in cloud.log_of("lemur-0"), "step 12 after it", p)
    cloud.preempt("lemur", "PREEMPTED")
    assert p.wait(timeout=60) == 0, cloud.err.read_text()[-3000:]

    out = cloud.text().splitlines()
    interruptions = [line for line in out if " interruption " in line]
    assert len(interruptions) == 2, out
    for line, why in zip(interruptions, ["SUSPENDED", "PREEMPTED"]):
        assert line[:20].endswith("Z") and f"queued resource lemur is {why}; relaunched as launch babysit-" in line
        assert "resuming from step " in line and " steps lost)" in line
    resumed = [int(line.split("resuming from step ")[1].split()[0]) for line in interruptions]
    assert resumed[0] >= 5 and resumed[1] >= 10 and all(r % 5 == 0 for r in resumed), interruptions
    seen = [int(line.split("last step seen ")[1].split(",")[0]) for line in interruptions]
    lost = [int(line.split(", ")[-1].split()[0]) for line in interruptions]
    assert all(l == max(0, s - r) for s, r, l in zip(seen, resumed, lost)), interruptions  # seen: at the last poll
    assert "finished: every worker's run exited with status 0" in out[-1]

    calls = cloud.calls()
    creates = [c for c in calls if c[:4] == ["compute", "tpus", "queued-resources", "create"]]
    assert len(creates) == 3 and all("--node-count=2" in c and "--node-prefix=lemur" in c and "--spot" in c
                                      for c in creates)
    assert sum(c[:4] == ["compute", "tpus", "queued-resources", "delete"] for c in calls) == 2
    launches = [c for c in calls if c[3:4] == ["ssh"] and "nohup setsid" in c[-1]]
    assert sorted(c[4] for c in launches) == ["lemur-0"] * 3 + ["lemur-1"] * 3  # one start per slice per launch
    # every worker started once per launch, from the checkpoint the line names; never twice at once
    assert sorted(starts(cloud)) == sorted(f"lemur-{n}/{w} {r}" for n in (0, 1) for w in (0, 1) for r in [0, *resumed])
    assert not (cloud.state_dir / "double").exists()
    assert (cloud.bucket / "bkt" / "run" / "checkpoints" / "30").is_dir()


@pytest.mark.slow
def test_crashing_runs_exhaust_the_retries(cloud):
    """A TPU VM that stays up; the command exits 1 every time: relaunched (no recreate) up to
    --max-restarts, then one line says the retries are exhausted and babysit exits 1."""
    assert cloud.run("create.sh", *WHERE, "--type", "v4-16").returncode == 0
    p = cloud.babysit(*WHERE, "--type", "v4-16", "--local", str(cloud.source), "--max-restarts", "2", *FAST,
                      "--", "bash", str(cloud.train), "--config.workdir=gs://bkt/crash", "3", "1")
    assert p.wait(timeout=60) == 1, cloud.err.read_text()[-3000:]
    out = cloud.text().splitlines()
    interruptions = [line for line in out if " interruption " in line]
    assert len(interruptions) == 3, out
    assert all("lemur worker" not in line for line in interruptions)  # one slice: no slice names
    assert "interruption 1/2: worker 0: the run exited with status 1; relaunched as launch" in interruptions[0]
    assert "resuming from step 0 (last step seen 3, 3 steps lost)" in interruptions[0]
    assert interruptions[2].endswith(
        "interruption 3: worker 0: the run exited with status 1; retries exhausted (--max-restarts 2): giving up "
        "(last step seen 3)")
    assert interruptions[2] == out[-1]
    calls = cloud.calls()
    assert not any(c[3:4] in (["create"], ["delete"]) for c in calls[1:])  # the VM stayed: relaunched only
    assert sum(c[3:4] == ["ssh"] and "nohup setsid" in c[-1] for c in calls) == 3
    assert len(starts(cloud)) == 6  # 3 launches x 2 workers


def test_a_first_launch_that_keeps_failing_is_bounded_too(cloud):
    """The setup cannot succeed (a repository that does not exist): the failed first launch
    counts against --max-restarts."""
    p = cloud.babysit(*WHERE, "--type", "v4-16", "--ref", "main", "--repo", str(cloud.tmp / "nothing"),
                      "--max-restarts", "0", *FAST, "--", "true")
    assert p.wait(timeout=60) == 1, cloud.err.read_text()[-3000:]
    out = cloud.text().splitlines()
    assert out[-1].endswith("the first launch failed at setup; retries exhausted (--max-restarts 0): giving up")
    assert not any(c[3:4] == ["ssh"] and "nohup setsid" in c[-1] for c in cloud.calls())


@pytest.mark.slow
def test_adopts_a_running_launch_and_exits_0_when_it_finishes(cloud):
    """A run launch.sh started: babysit.sh watches it (no second launch) until it exits 0."""
    assert cloud.run("create.sh", *WHERE, "--type", "v4-16").returncode == 0
    assert cloud.run("setup.sh", *WHERE, "--local", str(cloud.source)).returncode == 0
    r = cloud.run("launch.sh", *WHERE, "--launch-id", "mine", "--", "bash", str(cloud.train),
                  "--config.workdir=gs://bkt/adopt", "60")
    assert r.returncode == 0, r.stderr
    p = cloud.babysit(*WHERE, "--type", "v4-16", *FAST, "--", "bash", str(cloud.train),
                      "--config.workdir=gs://bkt/adopt", "60")
    assert p.wait(timeout=60) == 0, cloud.err.read_text()[-3000:]
    out = cloud.text()
    assert "launch mine is running on every worker already: watching it" in out
    assert "launch mine finished" in out and " interruption " not in out
    assert sum(c[3:4] == ["ssh"] and "nohup setsid" in c[-1] for c in cloud.calls()) == 1  # launch.sh's own
    assert (cloud.workers / "lemur" / "0" / "easylemur" / "logs" / "run.exit").read_text() == "0 mine\n"


def test_a_run_stopped_with_stop_sh_is_not_relaunched(cloud):
    assert cloud.run("create.sh", *WHERE, "--type", "v4-16").returncode == 0
    p = cloud.babysit(*WHERE, "--type", "v4-16", "--local", str(cloud.source), *FAST, "--", "bash",
                      str(cloud.train), "--config.workdir=gs://bkt/stop", "100000")
    wait_for(lambda: "step 3\n" in cloud.log_of("lemur"), "step 3", p)
    r = cloud.run("stop.sh", *WHERE, "--timeout", "10")
    assert r.returncode == 0, r.stderr
    assert p.wait(timeout=60) == 3, cloud.err.read_text()[-3000:]
    assert "was stopped with stop.sh: not relaunching" in cloud.text().splitlines()[-1]
    assert len(starts(cloud)) == 2


def test_one_babysitter_per_tpu(cloud):
    lock = cloud.tmp / "easylemur-babysit.default.us-central2-b.lemur"
    lock.mkdir()
    (lock / "pid").write_text(f"{os.getpid()}\n")
    r = cloud.run("babysit.sh", *WHERE, "--type", "v4-16", "--", "true")
    assert r.returncode == 2 and f"another babysit.sh (pid {os.getpid()}) watches lemur already" in r.stderr
    assert cloud.calls() == []


def test_dry_run_prints_one_recovery(cloud):
    r = cloud.run("babysit.sh", *WHERE, "--type", "v4-16", "--spot", "--num-slices", "2", "--ref", "main",
                  "--repo", "https://example.org/el.git", "--dry-run", "--", "python", "-m", "easylemur.train",
                  "--config.mesh=dcn_data:2,fsdp:-1")
    assert r.returncode == 0 and cloud.calls() == [], r.stderr
    cmds, cur = [], ""
    for line in r.stdout.splitlines(keepends=True):  # a quoted word may span lines
        if not cur and line.startswith("#"):
            continue
        cur += line
        try:
            cmds.append(shlex.split(cur))
        except ValueError:
            continue
        cur = ""
    assert cur == "" and all(c[0] == "gcloud" for c in cmds), cmds
    verbs = [(c[3], c[4], c[5]) for c in cmds]
    assert verbs == [("tpu-vm", "ssh", "lemur-0"), ("tpu-vm", "ssh", "lemur-1"),  # stop
                     ("queued-resources", "delete", "lemur"), ("queued-resources", "create", "lemur"),
                     ("tpu-vm", "ssh", "lemur-0"), ("tpu-vm", "ssh", "lemur-1"),  # setup: install
                     ("tpu-vm", "ssh", "lemur-0"), ("tpu-vm", "ssh", "lemur-1"),  # setup: check
                     ("tpu-vm", "ssh", "lemur-0"), ("tpu-vm", "ssh", "lemur-1"),  # launch: check
                     ("tpu-vm", "ssh", "lemur-0"), ("tpu-vm", "ssh", "lemur-1")]  # launch: start
    assert "--node-count=2" in cmds[3] and "--node-prefix=lemur" in cmds[3] and "--spot" in cmds[3]
    assert "'--config.mesh=dcn_data:2,fsdp:-1'" in cmds[-1][-1] or "--config.mesh=dcn_data:2,fsdp:-1" in cmds[-1][-1]


@pytest.mark.parametrize("args,message", [
    ([*WHERE, "--", "true"], "--type is required"),
    ([*WHERE, "--type", "v4-8"], "no command to run"),
    ([*WHERE, "--type", "v4-8", "--max-restarts", "many", "--", "true"], "--max-restarts 'many' must be a number"),
    ([*WHERE, "--type", "v4-8", "--poll", "0", "--", "true"], "--poll '0' must be a positive number"),
    ([*WHERE, "--type", "v4-8", "--backoff", "-1", "--", "true"], "--backoff '-1' must be a number of seconds"),
    ([*WHERE, "--type", "v4-8", "--num-slices", "0", "--", "true"], "--num-slices '0' must be a number of slices"),
])
def test_bad_arguments(cloud, args, message):
    r = cloud.run("babysit.sh", *args)
    assert r.returncode == 2 and message in r.stderr and r.stdout == "", r.stderr


@pytest.mark.slow
def test_a_lost_host_exit_is_relaunched_at_once_while_the_queued_resource_stays_active(cloud):
    """train's lost-host exit (75, docs/design.md "Lost hosts and hangs") on every worker, the
    queued resource ACTIVE throughout: relaunched at the first poll that sees it (no second
    poll for the state to change), after a stop on every worker; bounded by --max-restarts."""
    assert cloud.run("create.sh", *WHERE, "--type", "v4-16", "--queued").returncode == 0
    p = cloud.babysit(*WHERE, "--type", "v4-16", "--queued", "--local", str(cloud.source), "--max-restarts", "1",
                      *FAST, "--", "bash", str(cloud.train), "--config.workdir=gs://bkt/lost", "3", "75")
    assert p.wait(timeout=60) == 1, cloud.err.read_text()[-3000:]
    out = cloud.text().splitlines()
    interruptions = [line for line in out if " interruption " in line]
    assert len(interruptions) == 2, out
    assert ("interruption 1/1: worker 0: the run exited with status 75 (a process of the pod was lost); "
            "relaunched as launch") in interruptions[0]
    assert "retries exhausted" in interruptions[1]
    assert "looking again at the next poll" not in cloud.err.read_text()
    calls = cloud.calls()
    assert not any(c[3:4] in (["create"], ["delete"]) for c in calls[1:])  # the queued resource stayed
    stops = [c for c in calls if c[3:4] == ["ssh"] and "kill" in c[-1] and "nohup setsid" not in c[-1]]
    assert stops, "a stop on every worker before the relaunch"
    assert len(starts(cloud)) == 4  # 2 launches x 2 workers
