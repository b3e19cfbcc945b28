#!/usr/bin/env bash
# The container test bed (tests/containers.py, docs/containers.md): Debian's Podman with runc, which runs on this
# machine's hybrid cgroup layout where crun refuses to. The tests build their image from this machine's files.
#   containers.sh install     # apt-get install the packages (idempotent; root)
set -euo pipefail
PACKAGES=(podman runc fuse-overlayfs)

case "${1:-}" in
    install)
        missing=()
        for p in "${PACKAGES[@]}"; do
            dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
        done
        if ((${#missing[@]} == 0)); then
            echo "containers.sh: all packages already installed"
            exit 0
        fi
        [[ $EUID -eq 0 ]] || { echo "containers.sh: install must run as root" >&2; exit 1; }
        apt-get update -q >/dev/null || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
        echo "containers.sh: installed ${missing[*]}"
        ;;
    *)
        echo "usage: containers.sh install" >&2
        exit 2
        ;;
esac
