#!/usr/bin/env bash
# lock.sh - take a lockbroker lock, use its fencing token, release it.
#
# usage: lock.sh [--shared | --limit N] [KEY [WAIT_MS]]   (defaults: example 5000)
# --shared takes a read hold that other --shared runs share; --limit N takes
# one of N permits of a semaphore (protocol 1.1).
# The broker is $LOCKBROKER_HOST:$LOCKBROKER_PORT (127.0.0.1:7711).
# Exits 0 when done, 75 if the lock stayed busy, 1 on an error.
# Needs bash for its /dev/tcp redirection; plain sh has none.
set -u
kind=""				# "", " SHARED" or " LIMIT <n>"
case ${1:-} in
--shared)	kind=" SHARED"; shift ;;
--limit)	kind=" LIMIT ${2:-}"; shift 2 ;;
esac
key=${1:-example}
wait_ms=${2:-5000}
host=${LOCKBROKER_HOST:-127.0.0.1}
port=${LOCKBROKER_PORT:-7711}

# The lock lives as long as this connection (fd 3): keep it open while
# working.
if ! { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null; then
	echo "lock.sh: cannot connect to $host:$port" >&2
	exit 1
fi

# call LINE: send one request; its reply, CR dropped, goes to $reply.
call() {
	printf '%s\n' "$1" >&3
	if ! IFS= read -r -t $((wait_ms / 1000 + 10)) reply <&3; then
		echo "lock.sh: no reply to '$1'" >&2
		exit 1
	fi
	reply=${reply%$'\r'}
}

call "ACQUIRE $key$kind WAIT $wait_ms"
case $reply in
"OK "*)	token=${reply#OK } ;;
BUSY)	echo "lock.sh: $key is busy" >&2; exit 75 ;;
*)	echo "lock.sh: ACQUIRE: $reply" >&2; exit 1 ;;
esac
echo "acquired $key with fencing token $token"
# Do the work here.  Send "$token" with every write, so that the resource
# can refuse a holder whose token is older than one it has seen.

call "RELEASE $key"
case $reply in
OK*)	;;
*)	echo "lock.sh: RELEASE: $reply" >&2; exit 1 ;;
esac
echo "released $key"
call QUIT
exec 3<&-
