#!/usr/bin/env bash
# Installs easylemur (with its tpu extra) on every worker of a TPU VM and checks that each
# worker's JAX sees its TPU chips.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/.." && pwd)

USAGE="Usage: $SCRIPT --name NAME --zone ZONE [--ref GIT_REF [--repo URL] | --local DIR]
                [--dir REMOTE_DIR] [--num-slices N] [--internal-ip] [--project PROJECT] [--dry-run]

On every worker: puts easylemur in ~/REMOTE_DIR (replacing an earlier copy, keeping its logs/),
installs it with its tpu extra into the virtual environment ~/REMOTE_DIR-venv (kept between
setups), then runs python -c \"import jax; print(jax.device_count())\" on all workers at once
and fails unless each one sees TPU devices. A worker whose launched run is still alive refuses
(stop.sh first). Running it twice is safe.

The venv's Python must be one the pinned JAX supports ($PY_MIN or newer): the image's python3
when it is new enough, else (Ubuntu 22.04 images: python3 is 3.10) a standalone CPython $PY_MIN
that uv installs for the user (uv itself from pip --user, else from astral.sh's installer). A
venv left by an older Python is made again. A worker that cannot get one stops with one line
naming its python3's version.

  --name NAME        the TPU VM's name
  --zone ZONE        its zone
  --ref GIT_REF      clone the repository and check out this branch, tag or commit
  --repo URL         the repository to clone with --ref (default: this checkout's 'origin')
  --local DIR        copy this source tree to every worker (default: the checkout this
                     script is in, $ROOT): in a git checkout its tracked files and the
                     untracked ones git does not ignore; never .git, .venv*, checkpoints/,
                     runs/, workdirs/ or caches
  --dir REMOTE_DIR   where on the workers, relative to the home directory (default $REMOTE_DIR_DEFAULT)
$SLICES_HELP
$INTERNAL_IP_HELP
  --project PROJECT  the Google Cloud project (default: gcloud's configured one)
  --dry-run          print the commands, run nothing"

REF="" REPO="" LOCAL="" DIR=$REMOTE_DIR_DEFAULT

while [ $# -gt 0 ]; do
    common_flag "$@"
    if [ "$USED" -gt 0 ]; then shift "$USED"; continue; fi
    case "$1" in
        --ref) need_value "$1" "$#"; REF=$2; shift 2 ;;
        --ref=*) REF=${1#*=}; shift ;;
        --repo) need_value "$1" "$#"; REPO=$2; shift 2 ;;
        --repo=*) REPO=${1#*=}; shift ;;
        --local) need_value "$1" "$#"; LOCAL=$2; shift 2 ;;
        --local=*) LOCAL=${1#*=}; shift ;;
        --dir) need_value "$1" "$#"; DIR=$2; shift 2 ;;
        --dir=*) DIR=${1#*=}; shift ;;
        -h | --help) usage_and_exit "$USAGE" ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

check_target
check_remote_dir "$DIR"
[ -z "$REF" ] || [ -z "$LOCAL" ] || die "--ref and --local exclude each other"
[ -n "$REF" ] || [ -z "$REPO" ] || die "--repo needs --ref GIT_REF"
NEW=$(q "$DIR.new")
QDIR=$(q "$DIR")
VENV=$(q "$DIR-venv")

# pack_list DIR: the files of DIR to ship, NUL-separated: git's tracked and untracked-but-not-
# ignored files in a checkout (all files elsewhere), less what is never code (big directories a
# run leaves: a converted checkpoint must not travel to every worker) and files deleted since.
pack_list() {
    local f
    if git -C "$1" rev-parse --git-dir >/dev/null 2>&1; then
        git -C "$1" ls-files -z --cached --others --exclude-standard
    else
        (cd "$1" && find . -type f -print0)
    fi | while IFS= read -r -d '' f; do
        f=${f#./}
        case "/$f" in
            */.git/* | */.venv*/* | */__pycache__/* | */.pytest_cache/* | *.egg-info/* \
                | /checkpoints/* | /runs/* | /workdirs/* | /build/*) continue ;;
        esac
        if [ -f "$1/$f" ]; then printf '%s\0' "$f"; fi
    done
}

if [ -n "$REF" ]; then
    if [ -z "$REPO" ]; then
        REPO=$(git -C "$ROOT" remote get-url origin 2>/dev/null) \
            || die "--ref needs --repo URL (the checkout $ROOT has no 'origin' remote)"
    fi
    FETCH="rm -rf $NEW && git clone --quiet $(q "$REPO") $NEW && git -C $NEW checkout --quiet $(q "$REF")"
else
    LOCAL=${LOCAL:-$ROOT}
    [ -d "$LOCAL" ] || die "--local '$LOCAL' is not a directory"
    if [ ! -f "$LOCAL/setup.py" ] || [ ! -d "$LOCAL/easylemur" ]; then
        die "--local '$LOCAL' is not an easylemur source tree (no setup.py and easylemur/)"
    fi
    TARBALL=${TMPDIR:-/tmp}/easylemur-$NAME.tar.gz
    FILES=${TMPDIR:-/tmp}/easylemur-$NAME.files
    if [ "$DRY_RUN" = 0 ]; then pack_list "$LOCAL" > "$FILES"; fi
    run tar -C "$LOCAL" --null -T "$FILES" -czf "$TARBALL"
    scp_workers "$TARBALL" easylemur-src.tar.gz
    # the tarball stays on the worker (the next setup overwrites it): a rerun extracts it again
    FETCH="rm -rf $NEW && mkdir -p $NEW && tar -xzf easylemur-src.tar.gz -C $NEW"
fi

# On each worker, safe to run twice (gcloud reruns it after a dropped connection): refuse
# while a run is alive; fetch into REMOTE_DIR.new; carry the old copy's logs/ over (put back
# first if a rerun finds them moved but not yet in place); swap; then the venv, made with a
# Python >= PY_MIN (pyok), by uv when the image's python3 is older.
INSTALL="set -e; $WORKER_ID_SH; $RUN_SH
pyok() { \"\$1\" -c 'import sys; sys.exit(sys.version_info < ($PY_MIN_TUPLE))' 2>/dev/null; }
pyver() { \"\$1\" -c 'import sys; print(\"%d.%d.%d\" % sys.version_info[:3])' 2>/dev/null || echo none; }
if [ -d $QDIR ] && (cd $QDIR && run_alive); then
  echo \"\$at: a run is still running in ~/$QDIR (logs/run.pid); stop it first (stop.sh)\" >&2; exit 1
fi
if [ -d $NEW/logs ] && [ ! -d $QDIR/logs ]; then mkdir -p $QDIR && mv $NEW/logs $QDIR/logs; fi
$FETCH
if [ -d $QDIR/logs ]; then rm -rf $NEW/logs && mv $QDIR/logs $NEW/logs; fi
rm -rf $QDIR && mv $NEW $QDIR
if [ -x $VENV/bin/python ] && ! pyok $VENV/bin/python; then
  echo \"\$at: ~/$VENV has Python \$(pyver $VENV/bin/python); making it again with $PY_MIN+\"; rm -rf $VENV
fi
if [ ! -x $VENV/bin/python ]; then
  if pyok python3; then
    python3 -m venv $VENV || { sudo apt-get update -qq && sudo apt-get install -y -qq python3-venv && python3 -m venv $VENV; }
  else
    uv=\$(command -v uv || echo \"\$HOME/.local/bin/uv\")
    [ -x \"\$uv\" ] || python3 -m pip install -q --user uv || { curl -LsSf https://astral.sh/uv/install.sh | sh -s -- --no-modify-path; } || true
    { [ -x \"\$uv\" ] && \"\$uv\" python install -q $PY_MIN && rm -rf $VENV && \"\$uv\" venv -q --seed --python $PY_MIN $VENV; } || {
      echo \"\$at: python3 is \$(pyver python3) and no Python $PY_MIN could be installed with uv (see above); easylemur's JAX needs Python >= $PY_MIN\" >&2; exit 1; }
  fi
fi
$VENV/bin/pip install -q --upgrade pip
$VENV/bin/pip install -q -e $(q "./${DIR}[tpu]")"
ssh_workers "$INSTALL"

# the worker number goes to Python as an argument: the program is single-quoted for the shell
CHECK="$WORKER_ID_SH; $VENV/bin/python -c 'import sys, jax; w = sys.argv[1]; d = jax.devices(); print(f\"{w}: jax {jax.__version__}, {jax.device_count()} devices ({jax.local_device_count()} local, {d[0].platform})\"); assert d[0].platform == \"tpu\", f\"{w}: no TPU devices\"' \"\$at\""
ssh_workers "$CHECK"
