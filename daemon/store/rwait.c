/*
 * rwait.c - the records of this broker's waiters that a release on any
 * broker may grant the key to in its own call (remote grants: the
 * cross-broker hand-off in one Redis round trip; scripts/rwait.lua records
 * and forgets them, lib/holders.lua's remote_grant grants them).  One job:
 * the call's keys and words.  Single and Sentinel mode only: in cluster
 * mode, and while grants wait for replica acks (redis_replica_acks: a
 * release's grant is acked by no WAIT), nothing is recorded and waiters
 * wait as before.
 */
#include "calls_int.h"

#include <stdio.h>
#include <string.h>

int
store_rwait(struct store *st, const char *key, size_t keylen, int record,
    unsigned long long wid, long ttl_ms, const char *owner,
    size_t ownerlen, const char *value, size_t valuelen, long keep_ms,
    store_release_fn *fn, void *arg)
{
	char rk[256], member[STORE_ID_LEN + STORE_OWNER_MAX + STORE_VALUE_MAX +
	    64], ms[24];
	struct route r;
	struct piece p[5];
	int ml, l;

	if (st->topo.sharded || st->env.acks > 0 || ownerlen == 0 ||
	    ownerlen > STORE_OWNER_MAX || memchr(owner, ' ', ownerlen) != NULL ||
	    valuelen > STORE_VALUE_MAX || (valuelen > 0 &&
	    memchr(value, ' ', valuelen) != NULL))
		return -1;
	ml = snprintf(member, sizeof member, "%.*s %llu %ld %.*s%s%.*s",
	    STORE_ID_LEN, st->keys.idsp, wid, ttl_ms > 0 ? ttl_ms : 1,
	    (int)ownerlen, owner, valuelen > 0 ? " " : "", (int)valuelen,
	    valuelen > 0 ? value : "");
	l = snprintf(ms, sizeof ms, "%ld", keep_ms > 0 ? keep_ms : 1);
	if (ml < 0 || (size_t)ml >= sizeof member || l < 0)
		return -1;
	calls_route_of(st, key, keylen, &r);
	p[0] = (struct piece){ st->keys.lockpfx, st->keys.lockpfxlen, key,
	    keylen };
	p[1] = (struct piece){ rk, calls_side_prefix(st->keys.rwait, &r, rk,
	    sizeof rk), key, keylen };
	p[2] = (struct piece){ record ? "1" : "0", 1, NULL, 0 };
	p[3] = (struct piece){ member, (size_t)ml, NULL, 0 };
	p[4] = (struct piece){ ms, (size_t)l, NULL, 0 };
	return calls_script(st, &r, decode_release, SCRIPT_RWAIT, 2, p, 5,
	    (union call_fn){ .release = fn }, arg);
}
