#!/usr/bin/env bash
# Container health checks of docker-compose.yml, in bash alone: a check runs every few seconds in
# each of ~17 containers, and a Python interpreter per check (~1.5 CPU-s with Ferry's imports) took
# the 2 cores of a CI machine. Each probe is bounded by `timeout` (and compose's own timeout).
#   health.sh tcp HOST PORT                       TCP connect
#   health.sh ruok HOST PORT                      ZooKeeper answers ruok with imok
#   health.sh http HOST PORT PATH REGEX...        GET PATH; the body matches every extended REGEX
#   health.sh spark-worker MASTER...              some MASTER's /json is ALIVE with ≥1 alive worker
set -euo pipefail

get() {  # get HOST PORT PATH -> response on stdout (HTTP/1.0: the server closes after the body)
    timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3 && cat <&3' _ "$@"
}

case "${1:-}" in
tcp)  timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$2" "$3" ;;
ruok) timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf ruok >&3 && grep -q imok <&3' _ "$2" "$3" ;;
http)
    body=$(get "$2" "$3" "$4")
    shift 4
    for re in "$@"; do grep -Eq -- "$re" <<<"$body" || { echo "no /$re/"; exit 1; }; done ;;
spark-worker)
    shift
    for m in "$@"; do
        body=$(get "$m" 8080 /json/ || true)
        grep -Eq '"status" *: *"ALIVE"' <<<"$body" && grep -Eq '"aliveworkers" *: *[1-9]' <<<"$body" && exit 0
    done
    echo "no ALIVE master with a worker among $*"; exit 1 ;;
*) echo "usage: health.sh tcp|ruok|http|spark-worker ..." >&2; exit 2 ;;
esac
