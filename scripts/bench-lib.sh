# Shared by scripts/bench, scripts/bench-several and scripts/bench-targets (sourced, not run):
# ports on loopback, the peers from Debian, and result files that never overwrite an earlier
# run. Each function names the calling script in its messages.

# A free TCP port on 127.0.0.1, below the ephemeral range (32768+), so no client socket takes
# it meanwhile.
free_port() {
    local port
    while :; do
        port=$((20000 + RANDOM % 12000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
}

# Waits (10 s at most) until something listens on 127.0.0.1:$1.
wait_for_port() {
    local port=$1 tries=0
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -gt 200 ]; then
            echo "$(basename "$0"): nothing listens on $port" >&2
            return 1
        fi
        sleep 0.05
    done
}

# Sets nats_bin and redis_bin, installing nats-server and redis-server from Debian when they
# are missing (as root); adds /usr/sbin and /sbin to PATH, where Debian puts them.
need_peers() {
    local path_with_sbin="$PATH:/usr/sbin:/sbin"
    if ! PATH="$path_with_sbin" command -v nats-server >/dev/null \
        || ! PATH="$path_with_sbin" command -v redis-server >/dev/null; then
        if [ "$(id -u)" = 0 ]; then
            echo "== installing nats-server and redis-server from Debian"
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server redis-server >/dev/null
        else
            echo "$(basename "$0"): needs nats-server and redis-server: run as root, or apt-get install nats-server redis-server" >&2
            exit 1
        fi
    fi
    export PATH="$path_with_sbin"
    nats_bin=$(command -v nats-server)
    redis_bin=$(command -v redis-server)
}

# The path, without extension, for this run's results: $1 itself, or for a later run of the
# same day $1-b, $1-c, …, so that an earlier run's .md and .json are never overwritten.
free_result_base() {
    local letter
    for letter in "" -b -c -d -e -f -g -h -i -j -k -l -m -n -o -p -q -r -s -t -u -v -w -x -y -z; do
        [ -e "$1$letter.md" ] || [ -e "$1$letter.json" ] || break
    done
    echo "$1$letter"
}
