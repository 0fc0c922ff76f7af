#!/usr/bin/env bash
# The programs a make target runs besides Go, checked before anything is
# compiled.
#
#   scripts/deps.sh test      what `make test` needs: curl (the cluster script's
#                             health checks), git (the version test compares
#                             the stamped commit), Debian's prometheus package
#                             (prometheus and promtool: the monitoring test)
#   scripts/deps.sh cluster   what `make cluster` needs: curl
#
# Everything there: silent, exit 0. Something missing, running as root with
# apt-get: one apt-get line installs it, printed before it runs. Otherwise:
# one line naming the command to run, exit 1. PROMETHEUS names another
# Prometheus binary (default /usr/bin/prometheus, as the tests and
# scripts/cluster.sh use).
set -euo pipefail

usage() {
    echo "usage: scripts/deps.sh test|cluster" >&2
    exit 2
}
[[ $# -eq 1 ]] || usage

# needs lists "program package" pairs; a program with a / is a path.
case "$1" in
test) needs=("curl curl" "git git" "${PROMETHEUS:-/usr/bin/prometheus} prometheus" "promtool prometheus") ;;
cluster) needs=("curl curl") ;;
*) usage ;;
esac

# present reports whether a program is there.
present() {
    if [[ "$1" == */* ]]; then
        [[ -x "$1" ]]
    else
        command -v "$1" >/dev/null
    fi
}

missing=() # programs
pkgs=()    # their packages, once each
for pair in "${needs[@]}"; do
    prog="${pair% *}" pkg="${pair##* }"
    present "$prog" && continue
    missing+=("$prog")
    [[ " ${pkgs[*]-} " == *" $pkg "* ]] || pkgs+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

install="apt-get install -y --no-install-recommends ${pkgs[*]}"
if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "make $1 needs ${missing[*]}: apt-get update && $install" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    $install >&2
    still=()
    for pair in "${needs[@]}"; do
        present "${pair% *}" || still+=("${pair% *}")
    done
    if [[ ${#still[@]} -gt 0 ]]; then
        echo "make $1: still missing after the install: ${still[*]}" >&2
        exit 1
    fi
    exit 0
fi
how="sudo $install"
[[ "$(id -u)" == 0 ]] && how="$install"
command -v apt-get >/dev/null || how="install ${pkgs[*]} with the system's package manager (Debian: $install)"
echo "make $1 needs ${missing[*]}, missing here; run: $how" >&2
exit 1
