#!/bin/sh
# embed.sh OUTDIR script.lua... - compile the Lua scripts into C, twice:
# as one Redis function library (Redis 7: FUNCTION LOAD once per
# connection, then FCALL), and as scripts (EVALSHA, for a Redis without
# functions, and EVAL after the library went missing).
#
# Writes OUTDIR/scripts.h (one SCRIPT_<NAME> index per script) and
# OUTDIR/scripts.c (each script's text, SHA1 and function name; the
# library's text and name), and, for tests, for lbbench and for reading,
# OUTDIR/batch.lua and OUTDIR/library.lua.  The daemon never reads scripts
# from disk.  A line "-- @include NAME" is replaced by scripts/lib/NAME
# in a script's own text (Redis has no include); the SHA1 is of the result.
#
# One more script is generated from the others: batch (SCRIPT_BATCH).  It
# runs many calls of the other scripts in one call (batches: node.c):
# each script's text becomes the body of a function taking KEYS and ARGV
# as parameters, which shadow the globals, so a body runs as it would
# alone.  Its own KEYS are every call's keys, call after call; its ARGV,
# per call: the script's name, the call's number of keys, its number of
# arguments, then the arguments.  It answers an array with one element per
# call, in order: what that script alone would have answered, or an error
# element when the call raised one (pcall: the other calls still run; like
# any script, a failed call keeps the writes it made before the error).
# The libraries the scripts include are put once at the top, not into
# every body: they are local functions without state, and making their
# ~15 closures anew for each call cost ~15% of a call's time in Redis
# (measured, 32 acquire/release calls per batch).  So no two libraries
# may define the same name: checked here.
#
# The lean exclusive batch (scripts/batch/lean.lua, issue 36) is part of
# both: a run of exclusive acquires and releases in B + 4 commands for B
# pairs, each call that needs more going to its own script's body as
# run() would send it.  As a function, lean_<hash> (no flags: it writes);
# as a script, the batch script whose ARGV[1] is "@lean" (no script name
# starts with "@").
#
# The function library is the batch script's text run once: the helpers
# and every script's body become closures at FUNCTION LOAD, and each is
# registered as a function, the batch's loop too.  As a script, every
# call runs the whole text anew, defining every helper and body again: an
# empty call of the 39 KB batch script cost 10.1 us in Redis against 1.5
# us for "return 1"; as a function, a call runs its body only.
#
# Function names are global in a Redis, which brokers of two versions (a
# rolling upgrade) or of two prefixes may share: the library is named
# "lockbroker_<hash>" and each function "<script>_<hash>", the hash (16
# hex digits of SHA1) being of the library's own text, so a broker only
# ever calls its own code and never needs FUNCTION LOAD REPLACE.  Brokers
# of one build share one library.  Old ones stay until an operator
# deletes them (docs/DEPLOYMENT.md).
#
# Flags.  Under maxmemory with noeviction, Redis refuses a function that
# may write before it runs (OOM), whatever it would have done; a script
# run by EVAL is refused only at its first write that may grow memory,
# so a release's DEL and PUBLISH went through.  A full Redis must still
# let locks go, so the scripts named in FREES, which only delete (keys,
# set members, expiries) and publish, are registered "allow-oom" (Redis
# then runs any command they call: keep them to deletes), and those in
# READS, which only read, "no-writes" (which Redis lets run under OOM
# and refuses any write).  Every other function is refused under OOM, as
# a refused write.  A batch carries calls of one of these kinds only
# (node.c): "batch_<hash>" any kind, "batch_free_<hash>" (allow-oom)
# FREES only, "batch_read_<hash>" (no-writes) READS only; each refuses a
# call of another kind.  Without functions (EVALSHA, EVAL) there are no
# flags: the batch script runs any call, as before.
# The fenced writes: setif writes (no flag: refused under OOM before it
# runs, as a grant is; as EVAL, its SET is refused, after the check, so
# nothing is written either way); delif only reads and deletes, so it is
# in FREES: a full Redis still lets an app delete its data, fenced.
# release may also grant the key it deleted to a waiter recorded on some
# broker (lib/holders.lua, remote_grant: the same key set again, the
# counter's value replaced, a record removed): it stays in FREES, as a
# full Redis must still let locks go, and that grant adds no key.
# CROSS: scripts that read keys they do not name (LOCKS: the keys SCAN
# finds on a cluster master, of many slots) get "allow-cross-slot-keys"
# too; no cluster-mode call goes in a batch.
FREES="release forget delif free"
READS="owner check locks peek"
CROSS="locks"
set -eu
out=$1; shift
lib=$(dirname "$0")/lib
gen=$(dirname "$0")/batch
h=$out/scripts.h.tmp; c=$out/scripts.c.tmp; t=$out/script.tmp
b=$out/batch.lua.tmp; l=$out/library.lua.tmp
expand() {
  while IFS= read -r line || [ -n "$line" ]; do
    case $line in
    "-- @include "*) cat "$lib/${line#-- @include }" ;;
    *) printf '%s\n' "$line" ;;
    esac
  done < "$1"
}
# A script's text for the batch: its includes are at the top already.
body() {
  while IFS= read -r line || [ -n "$line" ]; do
    case $line in
    "-- @include "*) printf -- '-- (included at the top: %s)\n' "${line#-- @include }" ;;
    *) printf '%s\n' "$line" ;;
    esac
  done < "$1"
}
# A C string literal of file $1's text, a line per line.
cstring() {
  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/	  "/' -e 's/$/\\n"/' "$1"
}
# Write a script's C entry: name, text (from file $2), SHA1, function.
entry() {
  sha=$(sha1sum "$2" | cut -d' ' -f1)
  echo "	{ \"$1\","
  cstring "$2"
  echo "	  , \"$sha\", \"$1_$hash\" },"
}
libs=$(sed -n 's/^-- @include //p' "$@" | awk '!seen[$0]++')
dup=$(for x in $libs; do
  sed -n 's/^local function \([A-Za-z0-9_]*\).*/\1/p' "$lib/$x"; done |
  sort | uniq -d)
if [ -n "$dup" ]; then
  echo "embed.sh: libraries define the same name (batch): $dup" >&2
  exit 1
fi
# What the batch script and the library share: the helpers, then S, the
# scripts' bodies by name, then run(KEYS, ARGV), the batch's loop.
shared() {
  for x in $libs; do
    cat "$lib/$x"
  done
  echo "local S = {}"
  for f in "$@"; do
    n=$(basename "$f" .lua)
    echo "S['$n'] = function(KEYS, ARGV)"
    body "$f"
    echo "end"
  done
  echo "local FREES, READS = {}, {}"
  for n in $FREES; do echo "FREES['$n'] = S['$n']"; done
  for n in $READS; do echo "READS['$n'] = S['$n']"; done
  cat <<'LUA'
-- One call of a script's body f: what it answers, or the error it raised
-- as an error element (pcall: the batch's other calls still run).
local function guarded(f, keys, args)
  local ok, r = pcall(f, keys, args)
  if not ok then
    -- Redis 7.0 hands pcall a string: "<CODE> text" from redis.call,
    -- else a Lua error ("user_script:..."), which alone would read
    -- "ERR ..."; later Redis versions hand a table {err = ...}
    if type(r) == 'table' and r.err then
      r = r.err
    end
    r = tostring(r)
    if not string.find(r, '^%u[%u%d_]* ') then
      r = 'ERR ' .. r
    end
    return {err = r}
  elseif r == nil then
    return false          -- no answer: nil, and the array goes on
  end
  return r
end
-- only: the scripts this batch may run (FREES, READS), nil any
local function run(KEYS, ARGV, only)
  local out, i, k, a, last = {}, 0, 0, 1, #ARGV
  while a <= last do
    local f = (only or S)[ARGV[a]]
    if not f then
      local name = tostring(ARGV[a])
      f = function()
        error({err = 'ERR ' .. name .. ' may not run in this batch'})
      end
    end
    local nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local keys, args = {}, {}
    for j = 1, nk do
      keys[j] = KEYS[k + j]
    end
    for j = 1, na do
      args[j] = ARGV[a + 2 + j]
    end
    k, a, i = k + nk, a + 3 + na, i + 1
    out[i] = guarded(f, keys, args)
  end
  return out
end
LUA
  cat "$gen/lean.lua"
}
{
  echo "-- batch.lua - generated by scripts/embed.sh from the other scripts:"
  echo "-- many calls in one EVALSHA (see scripts/embed.sh and daemon/store/node.c)."
  echo "-- KEYS  every call's keys, call after call"
  echo "-- ARGV  per call: script name, its number of keys, its number of"
  echo "--       arguments, then its arguments"
  echo "-- Returns one element per call: the script's own answer, or an error."
  shared "$@"
  echo "if ARGV[1] == '@lean' then"
  echo "  return lean(KEYS, ARGV)"
  echo "end"
  echo "return run(KEYS, ARGV)"
} > "$b"
# The library, with @HASH@ where its hash goes: the hash is of this text.
{
  echo "-- lockbroker's Redis function library, generated by scripts/embed.sh"
  echo "-- from scripts/*.lua: do not edit.  FCALL <script>_@HASH@ numkeys"
  echo "-- keys... args..., as EVAL of scripts/<script>.lua; batch_@HASH@ as"
  echo "-- the batch script (see scripts/embed.sh)."
  shared "$@"
  for f in "$@"; do
    n=$(basename "$f" .lua)
    case " $FREES " in
    *" $n "*) fl="'allow-oom'" ;;
    *) case " $READS " in *" $n "*) fl="'no-writes'" ;; *) fl="" ;; esac ;;
    esac
    case " $CROSS " in *" $n "*) fl="$fl, 'allow-cross-slot-keys'" ;; esac
    echo "redis.register_function{function_name = '${n}_@HASH@',"
    echo "  callback = S['$n'], flags = {$fl}}"
  done
  echo "redis.register_function('batch_@HASH@', run)"
  echo "redis.register_function{function_name = 'batch_free_@HASH@',"
  echo "  callback = function(KEYS, ARGV) return run(KEYS, ARGV, FREES) end,"
  echo "  flags = {'allow-oom'}}"
  echo "redis.register_function{function_name = 'batch_read_@HASH@',"
  echo "  callback = function(KEYS, ARGV) return run(KEYS, ARGV, READS) end,"
  echo "  flags = {'no-writes'}}"
  echo "redis.register_function('lean_@HASH@', lean)"
} > "$l.body"
hash=$(sha1sum "$l.body" | cut -c1-16)
{
  echo "#!lua name=lockbroker_$hash"
  sed "s/@HASH@/$hash/g" "$l.body"
} > "$l"
rm -f "$l.body"
{
  echo "/* generated by scripts/embed.sh: do not edit */"
  echo "#ifndef LOCKBROKER_SCRIPTS_H"
  echo "#define LOCKBROKER_SCRIPTS_H"
  echo "/* name: scripts/<name>.lua; text and sha: it as a script (EVAL,"
  echo " * EVALSHA); fname: its function in the library (FCALL). */"
  echo "struct script {"
  echo "	const char *name;"
  echo "	const char *text;"
  echo "	const char *sha;"
  echo "	const char *fname;"
  echo "};"
  echo "enum script_id {"
  for f in "$@"; do
    n=$(basename "$f" .lua | tr 'a-z-' 'A-Z_')
    echo "	SCRIPT_$n,"
  done
  echo "	SCRIPT_BATCH,	/* generated: calls of the others, see embed.sh */"
  echo "	SCRIPT__COUNT"
  echo "};"
  echo "extern const struct script scripts[SCRIPT__COUNT];"
  echo "/* What a script does, as its function's flags say (embed.sh): it may"
  echo " * write (refused under maxmemory before it runs), it only deletes and"
  echo " * publishes (allow-oom: releases), it only reads (no-writes).  A batch"
  echo " * carries calls of one kind: script_batch_fname[kind] is its function. */"
  echo "enum script_kind { SCRIPT_WRITES, SCRIPT_FREES, SCRIPT_READS, SCRIPT__KINDS };"
  echo "extern const unsigned char script_kind[SCRIPT__COUNT];"
  echo "extern const char *const script_batch_fname[SCRIPT__KINDS];"
  echo "/* The lean exclusive batch's function (scripts/batch/lean.lua): it may"
  echo " * write; as a script, the batch script with ARGV[1] \"@lean\". */"
  echo "extern const char script_lean_fname[];"
  echo "/* The function library (FUNCTION LOAD) and its name, lockbroker_<hash>. */"
  echo "extern const char script_library[];"
  echo "extern const char script_library_name[];"
  echo "#endif"
} > "$h"
{
  echo "/* generated by scripts/embed.sh: do not edit */"
  echo "#include \"scripts.h\""
  echo "const struct script scripts[SCRIPT__COUNT] = {"
  for f in "$@"; do
    expand "$f" > "$t"
    entry "$(basename "$f" .lua)" "$t"
  done
  entry batch "$b"
  echo "};"
  echo "const unsigned char script_kind[SCRIPT__COUNT] = {"
  for n in $FREES; do
    echo "	[SCRIPT_$(echo "$n" | tr 'a-z-' 'A-Z_')] = SCRIPT_FREES,"
  done
  for n in $READS; do
    echo "	[SCRIPT_$(echo "$n" | tr 'a-z-' 'A-Z_')] = SCRIPT_READS,"
  done
  echo "};"
  echo "const char *const script_batch_fname[SCRIPT__KINDS] = {"
  echo "	\"batch_$hash\", \"batch_free_$hash\", \"batch_read_$hash\""
  echo "};"
  echo "const char script_lean_fname[] = \"lean_$hash\";"
  echo "const char script_library_name[] = \"lockbroker_$hash\";"
  echo "const char script_library[] ="
  cstring "$l"
  echo "	  ;"
} > "$c"
rm -f "$t"
mv "$b" "$out/batch.lua"
mv "$l" "$out/library.lua"
mv "$h" "$out/scripts.h"; mv "$c" "$out/scripts.c"
