#!/bin/sh
# check-deps.sh LAYERS ALLOW OBJ... - fail when an object calls a higher one.
#
# The daemon is built in one-way layers (../README.md, docs/ARCHITECTURE
# once written): a file may call only files of a lower layer, or of its
# own.  This holds that rule to the code by what links, not by includes:
# nm --defined-only says where each global symbol lives, nm -u what each
# object uses, so a forward declaration or a namesake cannot fool it.
#
# LAYERS: one "rank name" per line (name: an object's basename without
# .o; a lower rank is nearer the ground), "#" comments allowed.  Every
# object given must be named there.
# ALLOW: "caller symbol" per line: known back-calls still to be removed
# (the architecture work deletes lines until the file is empty).  An
# allowed line that no longer occurs fails too, so the list only shrinks.
set -eu
layers=$1; allow=$2; shift 2
tmp=${TMPDIR:-/tmp}/check-deps.$$
trap 'rm -f "$tmp".*' EXIT
for o; do
	n=$(basename "$o" .o)
	nm --defined-only "$o" | awk -v n="$n" '$2 ~ /^[TDBRC]$/ { print "D", $3, n }'
	nm -u "$o" | awk -v n="$n" '{ print "U", $2, n }'
done > "$tmp.syms"
awk -v layers="$layers" -v allow="$allow" '
BEGIN {
	while ((getline l < layers) > 0) {
		sub(/#.*/, "", l)
		if (split(l, f, " ") == 2) rank[f[2]] = f[1]
	}
	while ((getline l < allow) > 0) {
		sub(/#.*/, "", l)
		if (split(l, f, " ") == 2) { ok[f[1] " " f[2]] = 1; nok++ }
	}
	nok += 0
	if (0) {
	}
}
$1 == "D" { home[$2] = $3; if (!($3 in rank)) missing[$3] = 1; next }
          { sym[NR] = $2; user[NR] = $3 }
END {
	for (m in missing) {
		printf "check-deps: %s is in no layer (add it to the layers file)\n", m
		bad = 1
	}
	for (i in sym) {
		h = home[sym[i]]; u = user[i]
		if (h == "" || h == u || rank[h] <= rank[u])
			continue
		key = u " " sym[i]
		if (key in ok) { seen[key] = 1; continue }
		printf "%s calls %s, defined higher in %s\n", u, sym[i], h
		bad = 1
	}
	for (k in ok)
		if (!(k in seen)) {
			printf "check-deps: allowed back-call \"%s\" no longer occurs: delete it from the allow-list\n", k
			bad = 1
		}
	if (!bad)
		printf "check-deps: no call to a higher layer (%d allowed back-calls left)\n", nok
	exit bad
}' "$tmp.syms"
