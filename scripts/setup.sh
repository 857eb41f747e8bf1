#!/usr/bin/env bash
# Sets up what is missing for shipyard: Debian packages, the .venv, the editable install with dev extras.
# Idempotent, and about a second when everything is present (stamps keyed on the lock and pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages shipyard needs at run and test time: instance sandboxes, and OpenMPI for the `mpi`
# strategy (the headers let pip build mpi4py where no wheel fits), and Chromium, the real browser the
# profiling report is checked in (Playwright drives Debian's build; it never downloads its own), and
# rclone with fuse3 (fusermount3) for FastFile channels' mounts (runtime/fastfile.py).
APT_PACKAGES="bubblewrap openmpi-bin libopenmpi-dev chromium rclone fuse3"
# Debian packages only the benchmarks need, installed only when asked (SHIPYARD_BENCH=1 make setup, or
# SHIPYARD_BENCH=1 bash scripts/setup.sh): awscli for benchmarks/input_modes.py, which compares File mode's
# download with `aws s3 sync`. A plain `make setup` / `make test` leaves them out.
BENCH_APT_PACKAGES="awscli"
if [ "${SHIPYARD_BENCH:-0}" = "1" ]; then
    APT_PACKAGES="$APT_PACKAGES $BENCH_APT_PACKAGES"
fi
VENV=.venv
LOCK=requirements-dev.lock  # every dev/test package at an exact version (make lock refreshes it)
STAMP_DIR="$VENV/.shipyard-setup"

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# Root runs commands directly (CI, fresh machines); everyone else goes through sudo when it exists.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root for: $*  (run it as root, or install sudo)"
    fi
}

pick_python() {
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
           "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"; return
        fi
    done
    die "Python >= 3.11 not found (on Debian 12: apt-get install python3)"
}

is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# --- Python interpreter (needed first: Debian's python3 cannot make a venv without python3-venv) ---
PYTHON=""
if [ ! -x "$VENV/bin/python" ]; then
    PYTHON=$(pick_python)
fi

# --- Debian packages ---
if command -v dpkg-query >/dev/null 2>&1; then
    wanted="$APT_PACKAGES"
    if [ -n "$PYTHON" ] && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        wanted="$wanted python3-venv"
    fi
    missing=""
    for pkg in $wanted; do
        is_installed "$pkg" || missing="$missing $pkg"
    done
    if [ -n "$missing" ]; then
        say "installing Debian packages:$missing"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        # shellcheck disable=SC2086  # the list is meant to split into words
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
else
    say "warning: not a Debian system; make sure these are installed: $APT_PACKAGES"
fi

# --- virtualenv: exactly the lock file's packages ---
# A venv made from another lock (or by an older setup) is rebuilt from scratch rather than patched, so
# nothing it had beyond the lock survives. The editable install of shipyard itself is redone when
# pyproject.toml changes; `pip check` then fails if the lock no longer satisfies it (refresh: make lock).
lock_key=$(sha256sum "$LOCK" | cut -c1-16)
project_key=$(sha256sum pyproject.toml | cut -c1-16)
if [ -x "$VENV/bin/python" ] && [ ! -f "$STAMP_DIR/lock-$lock_key" ]; then
    say "rebuilding $VENV: it was not made from the current $LOCK"
    rm -rf "$VENV"
    PYTHON=$(pick_python)
fi
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
# -qq: errors only (a machine's pip configuration can add a warning per package, e.g. an index folder it lacks).
pip_install() { "$VENV/bin/python" -m pip install -qq --no-input --disable-pip-version-check "$@"; }
if [ ! -f "$STAMP_DIR/lock-$lock_key" ]; then
    say "installing the locked dev dependencies into $VENV (the first run takes a few minutes)"
    # --no-deps: the lock is the whole set; anything missing from it is reported by pip check below.
    pip_install --no-deps -r "$LOCK"
    rm -rf "$STAMP_DIR"
    mkdir -p "$STAMP_DIR"
    touch "$STAMP_DIR/lock-$lock_key"
fi
if [ ! -f "$STAMP_DIR/project-$project_key" ]; then
    pip_install --no-deps --no-build-isolation -e .
    "$VENV/bin/python" -m pip check >/dev/null || {
        "$VENV/bin/python" -m pip check >&2
        die "$LOCK does not satisfy pyproject.toml: refresh it with 'make lock'"
    }
    rm -f "$STAMP_DIR"/project-*
    touch "$STAMP_DIR/project-$project_key"
fi
# --- .venv-sagemaker: the real SageMaker Python SDK, as a notebook's own environment has it ---
# The tests drive it as a client of `shipyard server` (docs/sagemaker-api.md); its pins conflict with the
# dev lock's, so it lives apart, exactly requirements-sagemaker.lock (make lock refreshes it too).
SDK_VENV=.venv-sagemaker
SDK_LOCK=requirements-sagemaker.lock
sdk_key=$([ -f "$SDK_LOCK" ] && sha256sum "$SDK_LOCK" | cut -c1-16 || true)
if [ -n "$sdk_key" ] && [ ! -f "$SDK_VENV/.lock-$sdk_key" ]; then
    say "installing the SageMaker SDK's locked environment into $SDK_VENV"
    rm -rf "$SDK_VENV"
    "$(pick_python)" -m venv "$SDK_VENV"
    "$SDK_VENV/bin/python" -m pip install -qq --no-input --disable-pip-version-check --no-deps -r "$SDK_LOCK"
    "$SDK_VENV/bin/python" -m pip check >/dev/null || {
        "$SDK_VENV/bin/python" -m pip check >&2
        die "$SDK_LOCK is not a whole environment: refresh it with 'make lock'"
    }
    touch "$SDK_VENV/.lock-$sdk_key"
fi

# --- DeepSpeed's CPU communication op, built here for this venv rather than by the first DeepSpeed job
# (torch builds it on first use: about 1.5 min on 2 cores), into the cache every job's sandbox mounts
# (backends/sandbox.py extension_cache), with the venv's ninja first on PATH as `make test` runs jobs. torch
# rebuilds an op built from another venv's sources (or by another ninja), so the stamp is this venv's.
if [ ! -f "$STAMP_DIR/deepspeed-op" ] && compgen -G "$VENV/lib/python3*/site-packages/deepspeed" >/dev/null; then
    ext_cache="${TORCH_EXTENSIONS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shipyard/torch_extensions}"
    say "building DeepSpeed's CPU communication op into $ext_cache"
    if PATH="$PWD/$VENV/bin:$PATH" TORCH_EXTENSIONS_DIR="$ext_cache" "$VENV/bin/python" -c \
        'from deepspeed.accelerator import get_accelerator; get_accelerator().create_op_builder("ShareMemCommBuilder").load()' \
        >/dev/null 2>&1; then
        touch "$STAMP_DIR/deepspeed-op"
    else
        say "warning: could not build it now; the first DeepSpeed job will"
    fi
fi

# shipyard's own bytecode, written here: where PYTHONDONTWRITEBYTECODE is set (as in some CI images) no
# process writes it, and each of a job's processes would compile shipyard's sources again (about 0.07 s
# of CPU each). A second or so when nothing changed; a source edited later is compiled as it is imported.
if [ -d shipyard ]; then
    "$VENV/bin/python" -m compileall -q -j 0 shipyard >/dev/null
fi
say "ready ($VENV/bin/python)"
