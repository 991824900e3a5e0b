#!/usr/bin/env bash
# Make a Docker engine, the compose v2 plugin and the debian:bookworm-slim base image available,
# doing only what is missing. Used by `make compose-up | compose-test` (docs/compose.md).
#
#   deploy/docker/engine.sh            # engine + compose plugin + base image
#
# Steps (each skipped when already satisfied):
#   1. `docker info` fails and no dockerd is installed: apt-get install docker.io debootstrap
#      (Debian/Ubuntu, as root or through sudo).
#   2. `docker info` fails: start dockerd in the background (setsid; log var/log/dockerd.log).
#   3. `docker compose version` is not v2: fetch Debian trixie's docker-compose and docker-buildx
#      packages with a PRIVATE apt directory (var/apt-trixie; the host's apt sources are never
#      changed) and copy their CLI plugins into ~/.docker/cli-plugins.
#   4. No local debian:bookworm-slim and `docker pull` fails (no registry reachable): build it
#      with debootstrap from the Debian mirror apt already uses and `docker import` it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VAR="$ROOT/var"
LOG="$VAR/log"
mkdir -p "$LOG"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
# apt-get runs one at a time: `make test` installs the Kerberos packages while this builds
# (the Makefile's APT_LOCK, the same file).
APT_LOCK="$VAR/.apt.lock"
apt_get() { $SUDO flock "$APT_LOCK" apt-get "$@"; }
BASE_IMAGE=debian:bookworm-slim

say() { printf '[engine %(%T)T] %s\n' -1 "$*"; }

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

# Debian mirror apt already uses (deb822 URIs: or one-line "deb URL suite"): the first one that
# serves the plain Debian archive, not security.
debian_mirror() {
    local m
    m=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
            /etc/apt/sources.list.d/*.sources 2>/dev/null |
        grep -Eo 'https?://[^ ]*debian/?' | grep -v security | head -1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}

if ! engine_answers; then
    if ! command -v dockerd >/dev/null 2>&1; then
        say "installing docker.io and debootstrap (apt-get)"
        apt_get update -q >"$LOG/apt-docker.log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt_get install -y -q docker.io debootstrap \
            >>"$LOG/apt-docker.log" 2>&1
    fi
    if ! pgrep -x dockerd >/dev/null 2>&1; then
        say "starting dockerd (log: $LOG/dockerd.log)"
        # The daemon outlives this script: it must hold none of the caller's descriptors beyond
        # 0-2 (a CI runner's pipe or a `flock` lock file would otherwise stay open for as long
        # as dockerd runs, and whoever waits for them would wait for good).
        # shellcheck disable=SC2016
        $SUDO setsid bash -c 'for fd in /proc/$$/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-"; done; exec dockerd' \
            >"$LOG/dockerd.log" 2>&1 </dev/null &
    fi
    for _ in $(seq 1 60); do engine_answers && break; sleep 1; done
    engine_answers || { say "dockerd did not answer within 60 s; see $LOG/dockerd.log"; exit 1; }
fi
say "engine: $(docker info --format '{{.ServerVersion}} {{.Driver}} {{.CgroupDriver}}')"

if ! docker compose version 2>/dev/null | grep -Eq 'version v?2\.'; then
    say "installing compose v2 and buildx plugins from Debian trixie (private apt dir var/apt-trixie)"
    APT="$VAR/apt-trixie"
    mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$APT/debs" "$APT/empty.d"
    echo "deb $(debian_mirror) trixie main" >"$APT/sources.list"
    opts=(-o "Dir::Etc::sourcelist=$APT/sources.list" -o "Dir::Etc::sourceparts=$APT/empty.d"
          -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT" -o "APT::Get::List-Cleanup=0"
          -o "Dir::Etc::preferencesparts=$APT/empty.d")
    apt-get "${opts[@]}" update -q >"$LOG/apt-trixie.log" 2>&1
    (cd "$APT/debs" && apt-get "${opts[@]}" download docker-compose docker-buildx >>"$LOG/apt-trixie.log" 2>&1)
    plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
    mkdir -p "$plugins"
    for deb in "$APT"/debs/*.deb; do
        x="$APT/x-$(basename "$deb")"
        rm -rf "$x" && mkdir -p "$x" && dpkg-deb -x "$deb" "$x"
        cp "$x"/usr/libexec/docker/cli-plugins/* "$plugins"/
    done
    docker compose version | grep -Eq 'version v?2\.' || { say "compose v2 plugin did not install"; exit 1; }
fi
say "$(docker compose version)"

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    if timeout 20 docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
        say "pulled $BASE_IMAGE"
    else
        command -v debootstrap >/dev/null 2>&1 || \
            DEBIAN_FRONTEND=noninteractive apt_get install -y -q debootstrap >>"$LOG/apt-docker.log" 2>&1
        mirror=$(debian_mirror)
        say "no registry answers: building $BASE_IMAGE with debootstrap from $mirror"
        root="$VAR/debootstrap-bookworm"
        $SUDO rm -rf "$root"
        $SUDO debootstrap --variant=minbase bookworm "$root" "$mirror" >"$LOG/debootstrap.log" 2>&1
        $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        $SUDO tar -C "$root" -c . | docker import --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
        $SUDO rm -rf "$root"
    fi
fi
say "base image: $BASE_IMAGE $(docker image inspect -f '{{.Size}}' "$BASE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"
