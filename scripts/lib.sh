# Shared helpers of scripts/test, scripts/demo and bench/run (sourced, not executed).

# Repository root, whatever the caller's working directory.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"

log() { printf '\n==> %s\n' "$*" >&2; }

# Installs Debian packages that provide the given commands, only for commands that are missing.
# Usage: need_commands cmd:package [cmd:package ...]
need_commands() {
    local missing=() pair cmd pkg
    for pair in "$@"; do
        cmd="${pair%%:*}"
        pkg="${pair#*:}"
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

# apt-get install, non-interactive; needs root on Debian.
apt_install() {
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "missing packages: $* (install them, or run as root on Debian)" >&2
        return 1
    fi
    log "apt-get install $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The base system this project needs: C and C++ compilers (c-blosc and its snappy, whose C++
# runtime is linked statically: g++ brings libstdc++.a), Python with venv, ncdump, FUSE, and
# for mount tests gfortran (Fortran direct access) and rsync (its quick check of a file written
# through the mount), and Info-ZIP's zip (archives as it writes them, for the zip map's tests).
need_system() {
    need_commands cc:gcc c++:g++ python3:python3 ncdump:netcdf-bin fusermount3:fuse3 \
        systemd-analyze:systemd unzip:unzip zip:zip gfortran:gfortran rsync:rsync || return 1
    # Debian splits venv/ensurepip out of python3.
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        apt_install python3-venv || return 1
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo not found: install a Rust toolchain (>= 1.85)" >&2
        return 1
    fi
}

# Creates or refreshes .venv with the pinned requirements (skipped when they have not changed).
need_venv() {
    local req="$REPO/interop/requirements.txt" stamp="$VENV/.requirements.sha256" sum
    sum="$(sha256sum "$req" | cut -d' ' -f1)"
    if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
        return 0
    fi
    log "python venv $VENV"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install -q -r "$req"
    echo "$sum" >"$stamp"
}

# Creates or refreshes the venvs of older netCDF4-python releases, whose netcdf-c reads only its
# own NCZarr layout: one per interop/requirements-netcdf-c-VERSION.txt, at .venv-netcdf-c-VERSION.
need_old_netcdf_venvs() {
    local req version venv stamp sum
    for req in "$REPO"/interop/requirements-netcdf-c-*.txt; do
        version="$(basename "$req" .txt)"
        version="${version#requirements-netcdf-c-}"
        venv="$REPO/.venv-netcdf-c-$version"
        stamp="$venv/.requirements.sha256"
        sum="$(sha256sum "$req" | cut -d' ' -f1)"
        if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
            continue
        fi
        log "python venv $venv"
        [ -x "$venv/bin/python" ] || python3 -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install -q -r "$req" || return 1
        echo "$sum" >"$stamp"
    done
}
