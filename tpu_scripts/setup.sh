#!/usr/bin/env bash
# Installs easylemur (with its tpu extra) on every worker of a TPU VM and checks that each
# worker's JAX sees its TPU chips.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/.." && pwd)

USAGE="Usage: $SCRIPT --name NAME --zone ZONE [--ref GIT_REF [--repo URL] | --local DIR]
                [--dir REMOTE_DIR] [--project PROJECT] [--dry-run]

On every worker: puts easylemur in ~/REMOTE_DIR (replacing an earlier copy), installs it with
its tpu extra into the virtual environment ~/REMOTE_DIR-venv (kept between setups), then runs
python -c \"import jax; print(jax.device_count())\" on all workers at once and fails unless
each one sees TPU devices.

  --name NAME        the TPU VM's name
  --zone ZONE        its zone
  --ref GIT_REF      clone the repository and check out this branch, tag or commit
  --repo URL         the repository to clone with --ref (default: this checkout's 'origin')
  --local DIR        copy this source tree to every worker (default: the checkout this
                     script is in, $ROOT); .git, .venv, runs/ and caches are left out
  --dir REMOTE_DIR   where on the workers, relative to the home directory (default $REMOTE_DIR_DEFAULT)
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
    run tar -C "$LOCAL" --exclude=.git --exclude=.venv --exclude=./runs --exclude='*.egg-info' \
        --exclude=__pycache__ --exclude=.pytest_cache -czf "$TARBALL" .
    run gcloud compute tpus tpu-vm scp "$TARBALL" "$NAME:easylemur-src.tar.gz" "${WHERE[@]}" --worker=all
    FETCH="rm -rf $NEW && mkdir -p $NEW && tar -xzf easylemur-src.tar.gz -C $NEW && rm -f easylemur-src.tar.gz"
fi

VENV=$(q "$DIR-venv")
# python3-venv is missing from some TPU VM images: installed on the first run
INSTALL="set -e; $FETCH && rm -rf $QDIR && mv $NEW $QDIR
if [ ! -x $VENV/bin/python ]; then
  python3 -m venv $VENV || { sudo apt-get update -qq && sudo apt-get install -y -qq python3-venv && python3 -m venv $VENV; }
fi
$VENV/bin/pip install -q --upgrade pip
$VENV/bin/pip install -q -e $(q "./${DIR}[tpu]")"
ssh_workers "$INSTALL"

CHECK="$WORKER_ID_SH; $VENV/bin/python -c 'import jax; d = jax.devices(); print(f\"worker \$w: jax {jax.__version__}, {jax.device_count()} devices ({jax.local_device_count()} local, {d[0].platform})\"); assert d[0].platform == \"tpu\", \"no TPU devices\"'"
ssh_workers "$CHECK"
