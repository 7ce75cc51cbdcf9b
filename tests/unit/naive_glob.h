/*
 * naive_glob.h - the access list's glob, defined the obvious way
 * (recursive, exponential on '*'): the oracle daemon/acl.c's matcher is
 * checked against, by the unit test (test_acl.c) and the fuzzer
 * (tests/fuzz/fuzz_acl.c).  '*' any run, '?' one byte, '\' the next byte
 * literally.  Keep patterns short (a few '*').
 */
#ifndef LOCKBROKER_NAIVE_GLOB_H
#define LOCKBROKER_NAIVE_GLOB_H

#include <stddef.h>

static int
naive_glob(const char *p, size_t pl, const char *s, size_t sl)
{
	if (pl == 0)
		return sl == 0;
	if (p[0] == '*')
		return naive_glob(p + 1, pl - 1, s, sl) ||
		    (sl > 0 && naive_glob(p, pl, s + 1, sl - 1));
	if (sl == 0)
		return 0;
	if (p[0] == '?')
		return naive_glob(p + 1, pl - 1, s + 1, sl - 1);
	if (p[0] == '\\' && pl > 1)
		return p[1] == s[0] && naive_glob(p + 2, pl - 2, s + 1,
		    sl - 1);
	return p[0] == s[0] && naive_glob(p + 1, pl - 1, s + 1, sl - 1);
}

#endif
