/*
 * lockctl.c - run a command while holding a lockbroker lock, or while
 * leading (elect), or watch who holds a key.
 *
 * lockctl connects to lockbrokerd, acquires KEY and runs CMD with the lock's
 * fencing token in its environment.  A lock belongs to the broker session,
 * so lockctl keeps the connection open while CMD runs and releases the lock
 * when CMD exits, then exits with CMD's status.  With --shared it takes a
 * read hold that other --shared runs share; with --limit N one of N permits
 * of a semaphore (protocol 1.1).  With --hold-at-least it
 * releases with RELEASE ... LINGER, so the key stays taken until that long
 * after it was acquired however fast CMD was.  If the lock is lost while
 * CMD runs (an EVENT LOST line, or the connection breaks) CMD gets SIGTERM,
 * SIGKILL after a grace, and lockctl exits 70.  elect KEY -- CMD is that
 * run for leader election (protocol 1.2): an exclusive hold, with the
 * leader's --value for others to read.  watch KEY prints KEY's events
 * (WATCH, 1.2) until interrupted.  The subcommands owner, stats and ping
 * print one broker reply; locks, kill and free are the admin view (1.2):
 * every holder of every key, ending a session, freeing a key.  libc only: one poll() loop over the
 * socket and a self-pipe fed by the signal handler; with --tls, OpenSSL
 * too (tls.c) on the same socket and loop.
 *
 * This file is the command line: options, usage, where the broker is.
 * The rest, lowest first: util.c (messages, die, the clock), parse.c (pure
 * parsers and builders), tls.c and conn.c (the connection, plain or TLS),
 * child.c (CMD and the signals), cmd.c (the requests, and the lock held).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "child.h"
#include "cmd.h"
#include "conn.h"
#include "parse.h"
#include "util.h"

#ifndef LOCKBROKER_VERSION
#define LOCKBROKER_VERSION "unknown"
#endif

#define DEFAULT_HOST	"127.0.0.1"
#define DEFAULT_PORT	"7711"
#define DEFAULT_GRACE_S	5		/* -k: SIGTERM to SIGKILL */
#define GRACE_MAX_S	86400
#define MS_MAX		2147483647LL	/* largest WAIT/TTL the broker takes */
#define LIMIT_MAX	1000000LL	/* most permits ACQUIRE ... LIMIT takes */
#define OPT_HOLD	256		/* getopt value of --hold-at-least */
#define OPT_SHARED	257		/* getopt value of --shared */
#define OPT_LIMIT	258		/* getopt value of --limit */
#define OPT_TLS		259		/* --tls */
#define OPT_CACERT	260		/* --cacert */
#define OPT_CERT	261		/* --cert */
#define OPT_KEY		262		/* --key */
#define OPT_VALUE	263		/* --value */
#define OPT_DELAY	264		/* --delay */

static void
usage(FILE *f)
{
	const char *h = getenv("LOCKBROKER_HOST");
	const char *p = getenv("LOCKBROKER_PORT");

	fprintf(f,
"usage: lockctl [options] KEY -- CMD [ARGS...]\n"
"       lockctl [options] [--value V] elect KEY -- CMD [ARGS...]\n"
"       lockctl [options] watch KEY | owner KEY | stats | ping\n"
"       lockctl [options] locks [GLOB] | kill CLIENT-ID | free KEY\n"
"\n"
"Hold lock KEY on lockbrokerd while CMD runs; exit with CMD's status.\n"
"CMD sees LOCKBROKER_KEY and LOCKBROKER_TOKEN (the fencing token).\n"
"elect: campaign for leadership of KEY (an exclusive hold, waiting as -w\n"
"says; without -w until it leads) and run CMD while leading; stopped as\n"
"for a lost lock.\n"
"watch: print KEY's holder at once and at every change (HOLDER KEY ...,\n"
"FREE KEY), one line each, until SIGINT or SIGTERM.\n"
"locks, kill, free: the admin view, for an admin session (without an\n"
"acl_file: on the unix socket or a loopback address; with one, an app\n"
"marked admin).  locks: every holder of every key (matching GLOB: *, ?,\n"
"\\), one per line: KEY KIND CLIENT-ID NAME TOKEN AGE-MS TTL-MS\n"
"LOCAL-WAITERS VALUE, through every broker.  kill: end that session\n"
"wherever it lives, its holds freed at once.  free: end every hold of KEY.\n"
"\n"
"  -H host[:port]  broker address (now %s, port %s)\n"
"  -U path         broker unix socket instead of TCP\n"
"  -w WAIT_MS      wait up to this long for the lock (default 0: no wait)\n"
"  -t TTL_MS       lock TTL if the session dies with the broker (default:\n"
"                  the broker's)\n"
"  -E N            exit status when the lock is busy (default %d)\n"
"  -k SECONDS      after a lost lock, SIGTERM to SIGKILL grace (default %d)\n"
"  --hold-at-least MS\n"
"                  keep KEY taken until MS after it was acquired, even if\n"
"                  CMD ends sooner (default 0: release when CMD ends)\n"
"  --delay MS      if lockctl dies without giving KEY back (killed, its\n"
"                  host gone), KEY stays taken MS more (a lock delay; at\n"
"                  most the broker's max_delay_ms; exclusive holds only)\n"
"  --shared        a shared (read) hold: any number of --shared runs hold\n"
"                  KEY together, a run without it holds KEY alone\n"
"  --limit N       KEY is a semaphore of N permits (1..%lld): up to N runs\n"
"                  with --limit N hold it at once\n"
"  --value V       elect: the leader's value (1..%d printable characters,\n"
"                  no blanks), shown by OWNER KEY VALUE and to watchers\n"
"  -a TOKEN_FILE   send AUTH with the token read from this file\n"
"  --tls           connect with TLS (to the broker's tls_port), verifying\n"
"                  its certificate against the host given to -H\n"
"  --cacert FILE   CA certificates (PEM) for that (default: the system's)\n"
"  --cert FILE, --key FILE\n"
"                  client certificate and its key, for a broker with\n"
"                  tls_auth_clients\n"
"  -h              this help\n"
"  -V              version\n"
"\n"
"Exit: CMD's status (128+N if killed by signal N); %d lock busy; %d lock\n"
"lost while CMD ran, or locks, kill or free answered ERR; %d usage; 1\n"
"broker or connection error (watch: the connection ended); 126/127 CMD\n"
"not executable/not found; watch: 0 when stopped by SIGINT or SIGTERM.\n"
"Environment: LOCKBROKER_HOST, LOCKBROKER_PORT.\n",
	    h != NULL && *h != '\0' ? h : DEFAULT_HOST,
	    p != NULL && *p != '\0' ? p : DEFAULT_PORT,
	    EX_TEMPFAIL, DEFAULT_GRACE_S, LIMIT_MAX, VALUE_MAX_LEN, EX_TEMPFAIL,
	    EX_SOFTWARE, EX_USAGE);
}

static void usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fprintf(stderr,
	    "usage: lockctl [-H host[:port] | -U path] [-w WAIT_MS] [-t TTL_MS]"
	    " [-E N] [-k SECONDS]\n"
	    "               [--hold-at-least MS] [--delay MS]"
	    " [--shared | --limit N]"
	    " [-a TOKEN_FILE]\n"
	    "               [--tls [--cacert FILE] [--cert FILE --key FILE]]\n"
	    "               KEY -- CMD [ARGS...]\n"
	    "       lockctl [options] [--value V] elect KEY -- CMD [ARGS...]\n"
	    "       lockctl [-H host[:port] | -U path]"
	    " watch KEY | owner KEY | stats | ping\n"
	    "       lockctl [-H host[:port] | -U path]"
	    " locks [GLOB] | kill CLIENT-ID | free KEY\n"
	    "       lockctl -h | -V\n");
	exit(EX_USAGE);
}

/* The long options: getopt's table, and the names messages use. */
static const struct option longopts[] = {
	{ "hold-at-least", required_argument, NULL, OPT_HOLD },
	{ "shared", no_argument, NULL, OPT_SHARED },
	{ "limit", required_argument, NULL, OPT_LIMIT },
	{ "tls", no_argument, NULL, OPT_TLS },
	{ "cacert", required_argument, NULL, OPT_CACERT },
	{ "cert", required_argument, NULL, OPT_CERT },
	{ "key", required_argument, NULL, OPT_KEY },
	{ "value", required_argument, NULL, OPT_VALUE },
	{ "delay", required_argument, NULL, OPT_DELAY },
	{ NULL, 0, NULL, 0 }
};

/* An option as the user spelt it, for messages. */
static const char *
opt_name(int opt)
{
	static char buf[64];

	for (const struct option *lo = longopts; lo->name != NULL; lo++)
		if (lo->val == opt) {
			snprintf(buf, sizeof buf, "--%s", lo->name);
			return buf;
		}
	buf[0] = '-';
	buf[1] = (char)opt;
	buf[2] = '\0';
	return buf;
}

static long long
opt_num(int opt, const char *arg, long long min, long long max)
{
	long long v;

	if (parse_num(arg, min, max, &v) < 0)
		usage_error("%s wants a number %lld..%lld, not '%s'",
		    opt_name(opt), min, max, arg);
	return v;
}

/* Fill o->target from -H/-U and the environment; usage error if bad. */
static void
target_init(struct target *t, const char *opt_h, const char *opt_u)
{
	const char *env_h = getenv("LOCKBROKER_HOST");
	const char *env_p = getenv("LOCKBROKER_PORT");
	const char *why = "";
	long long v;

	memset(t, 0, sizeof *t);
	if (opt_u != NULL) {
		if (opt_h != NULL)
			usage_error("-H and -U exclude each other");
		if (opt_u[0] == '\0' || strlen(opt_u) >= sizeof t->path)
			usage_error("-U: socket path empty or longer than %zu",
			    sizeof t->path - 1);
		t->is_unix = 1;
		memcpy(t->path, opt_u, strlen(opt_u) + 1);
		snprintf(t->name, sizeof t->name, "%s", t->path);
		return;
	}
	snprintf(t->host, sizeof t->host, "%s", DEFAULT_HOST);
	snprintf(t->port, sizeof t->port, "%s", DEFAULT_PORT);
	if (env_p != NULL && env_p[0] != '\0') {
		if (parse_num(env_p, 1, 65535, &v) < 0)
			usage_error("LOCKBROKER_PORT must be 1..65535, not '%s'",
			    env_p);
		snprintf(t->port, sizeof t->port, "%lld", v);
	}
	if (env_h != NULL && env_h[0] != '\0' && opt_h == NULL &&
	    parse_hostport(env_h, t->host, sizeof t->host, t->port,
	    sizeof t->port, &why) < 0)
		usage_error("LOCKBROKER_HOST '%s': %s", env_h, why);
	if (opt_h != NULL && parse_hostport(opt_h, t->host, sizeof t->host,
	    t->port, sizeof t->port, &why) < 0)
		usage_error("-H '%s': %s", opt_h, why);
	snprintf(t->name, sizeof t->name, strchr(t->host, ':') != NULL ?
	    "[%s]:%s" : "%s:%s", t->host, t->port);
}

int
main(int argc, char **argv)
{
	static struct conn c;
	struct opts o;
	struct ctls_opts tls_opts = { NULL, NULL, NULL };
	const char *opt_h = NULL, *opt_u = NULL, *why;
	struct lc_args a;
	int tls = 0, wait_given = 0;
	char req[REQ_MAX_LEN];
	int ch, nargs;

	memset(&o, 0, sizeof o);
	o.busy_code = EX_TEMPFAIL;
	o.grace_s = DEFAULT_GRACE_S;
	opterr = 0;
	/* '+': stop at KEY, so CMD's own options are never ours. */
	while ((ch = getopt_long(argc, argv, "+:hVH:U:w:t:E:k:a:", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage(stdout);
			if (fflush(stdout) == EOF)
				die(1, "stdout: %s", strerror(errno));
			return 0;
		case 'V':
			if (printf("lockctl %s\n", LOCKBROKER_VERSION) < 0 ||
			    fflush(stdout) == EOF)
				die(1, "stdout: %s", strerror(errno));
			return 0;
		case 'H':
			opt_h = optarg;
			break;
		case 'U':
			opt_u = optarg;
			break;
		case 'w':
			o.wait_ms = opt_num(ch, optarg, 0, MS_MAX);
			wait_given = 1;
			break;
		case 't':
			o.ttl_ms = opt_num(ch, optarg, 1, MS_MAX);
			break;
		case 'E':
			o.busy_code = opt_num(ch, optarg, 0, 255);
			break;
		case 'k':
			o.grace_s = opt_num(ch, optarg, 0, GRACE_MAX_S);
			break;
		case 'a':
			o.auth_file = optarg;
			break;
		case OPT_HOLD:
			o.hold_ms = opt_num(ch, optarg, 0, MS_MAX);
			break;
		case OPT_DELAY:
			o.delay_ms = opt_num(ch, optarg, 0, MS_MAX);
			break;
		case OPT_SHARED:
			o.shared = 1;
			break;
		case OPT_LIMIT:
			o.limit = opt_num(ch, optarg, 1, LIMIT_MAX);
			break;
		case OPT_TLS:
			tls = 1;
			break;
		case OPT_CACERT:
			tls_opts.cacert = optarg;
			break;
		case OPT_CERT:
			tls_opts.cert = optarg;
			break;
		case OPT_KEY:
			tls_opts.key = optarg;
			break;
		case OPT_VALUE:
			if (!is_word(optarg, VALUE_MAX_LEN))
				usage_error("--value wants 1..%d printable "
				    "characters without blanks", VALUE_MAX_LEN);
			o.value = optarg;
			break;
		case ':':
			usage_error("%s needs an argument", opt_name(optopt));
		default:
			if (optopt == 0)	/* an unknown --word */
				usage_error("unknown option %s",
				    argv[optind - 1]);
			if (optopt == OPT_SHARED || optopt == OPT_TLS)
				usage_error("%s takes no value",
				    opt_name(optopt));
			usage_error("unknown option -%c", optopt);
		}
	}
	argv += optind;
	nargs = argc - optind;
	if (parse_args(nargs, argv, &a, &why) < 0)
		usage_error("%s", why);
	if (o.shared && o.limit > 0)
		usage_error("--shared and --limit exclude each other");
	if (o.delay_ms > 0 && (o.shared || o.limit > 0))
		usage_error("--delay is for exclusive holds: not with %s",
		    o.shared ? "--shared" : "--limit");
	if ((why = args_conflict(&a, o.shared, o.limit, o.value)) != NULL)
		usage_error("%s", why);
	/* A candidate campaigns until it leads: elect without -w waits as
	 * long as the broker lets a WAIT last (max_wait_ms). */
	if (a.mode == MODE_ELECT && !wait_given)
		o.wait_ms = MS_MAX;
	target_init(&o.target, opt_h, opt_u);
	if (!tls && (tls_opts.cacert || tls_opts.cert || tls_opts.key))
		usage_error("--cacert, --cert and --key need --tls");
	if ((tls_opts.cert == NULL) != (tls_opts.key == NULL))
		usage_error("--cert and --key go together");
	if (tls && o.target.is_unix)
		usage_error("--tls is for TCP (-H); the unix socket is plain");
	o.target.tls = tls;
	o.target.tls_opts = tls_opts;

	if (a.mode == MODE_OWNER)
		snprintf(req, sizeof req, "OWNER %s", a.key);
	else if (a.mode == MODE_KILL || a.mode == MODE_FREE)
		snprintf(req, sizeof req, "%s %s", a.mode == MODE_KILL ?
		    "KILL" : "FREE", a.key);
	else
		snprintf(req, sizeof req, "%s",
		    a.mode == MODE_STATS ? "STATS" : "PING");
	signals_init();
	if (conn_open(&c, &o.target) < 0)
		die(1, "%s", c.err);
	if (o.auth_file != NULL)
		cmd_auth(&c, o.auth_file);
	switch (a.mode) {
	case MODE_RUN:
	case MODE_ELECT:
		return cmd_locked(&c, &o, a.key, a.cmd);
	case MODE_WATCH:
		return cmd_watch(&c, a.key);
	case MODE_LOCKS:
		return cmd_locks(&c, a.key);
	case MODE_KILL:
	case MODE_FREE:
		return cmd_query(&c, req, EX_SOFTWARE);
	case MODE_OWNER:
	case MODE_STATS:
	case MODE_PING:
		break;
	}
	return cmd_query(&c, req, 1);
}
