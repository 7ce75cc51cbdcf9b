# lockbroker - build, test, install.
#
#   make            build build/lockbrokerd (and build/lockctl)
#   make run        install what is missing, start a local redis if none, run the broker
#   make test       install what is missing, then unit + integration tests,
#                   normal build and ASan+UBSan build, then the client
#                   libraries' tests (make clients)
#   make SANITIZE=1 build the sanitizer variant into build/asan/
#   make install    PREFIX=/usr/local DESTDIR=
#   make deb        the Debian package, into build/deb/

VERSION   := 1.2.0
PREFIX    ?= /usr/local
DESTDIR   ?=
CC        ?= cc
PKGS      := hiredis libevent uuid openssl
PY        ?= python3

# Warnings are forced on; user CFLAGS (and CPPFLAGS, LDFLAGS) are kept.
CFLAGS    ?= -O2 -g
WARN      := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
             -Wmissing-prototypes -Wpointer-arith -Wformat=2
DEFS      := -D_GNU_SOURCE -DLOCKBROKER_VERSION='"$(VERSION)"'

ifeq ($(SANITIZE),1)
BUILD     := build/asan
SANFLAGS  := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD     := build
SANFLAGS  :=
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)
PROTO_SRC  := proto/proto.c
# The daemon's sources: main.c at the root, the layers in folders
# (daemon/base, ... : see tests/layers); one -I per folder, so a file
# includes a header by its name wherever it lives.
DAEMON_SRC := $(wildcard daemon/*.c daemon/*/*.c)
DAEMON_HDR := $(wildcard daemon/*.h daemon/*/*.h)
DAEMON_INC := $(addprefix -I,$(patsubst %/,%,$(sort $(dir $(DAEMON_SRC) $(DAEMON_HDR)))))
ALL_CFLAGS = $(WARN) $(DEFS) $(CPPFLAGS) $(CFLAGS) $(SANFLAGS) -Iproto $(DAEMON_INC) -I$(BUILD)
# A daemon file by its name, wherever its folder: $(call dsrc,locks)
dsrc = $(firstword $(wildcard daemon/$(1).c daemon/*/$(1).c))
SCRIPTS    := $(sort $(wildcard scripts/*.lua))
LOCKCTL_SRC := $(wildcard lockctl/*.c)

DAEMON_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(DAEMON_SRC) $(PROTO_SRC)) $(BUILD)/scripts.o
# Pure pieces the unit tests link (no main, no sockets).
UNIT_DAEMON := keytab pool addr config log util histo slot acl tokenhash \
	      vouch httphead grace_record grace grace_resume stream tls redial \
	      resolve order lean fnlib node cluster shardsub \
	      resp keys locks/table locks/marks locks/records locks/waiters locks/cleanup \
	      locks/holds locks/grant locks/remote locks/values locks/multi locks/renew locks/handoff \
	      locks/watch locks/events locks/locks
UNIT_OBJ   := $(patsubst %.c,$(BUILD)/%.o,$(PROTO_SRC) \
	      $(foreach n,$(UNIT_DAEMON),$(call dsrc,$(n))))
# and lockctl's pure parsers (tests/unit/test_lockctl.c), as a flat
# object: $(BUILD)/lockctl is the binary, so no folder may take its name.
LOCKCTL_PARSE_OBJ := $(BUILD)/lockctl-parse.o
UNIT_OBJ   += $(LOCKCTL_PARSE_OBJ)
UNIT_SRC   := $(wildcard tests/unit/*.c)

.PHONY: all deps run test unit integration asan clean install deb fuzz bench valgrind check-deps clients
all: $(BUILD)/lockbrokerd $(if $(LOCKCTL_SRC),$(BUILD)/lockctl)

$(BUILD)/lockbrokerd: $(DAEMON_OBJ)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(PKG_LIBS) $(LDFLAGS)

# lockctl needs OpenSSL for --tls only, and nothing else but libc.
$(BUILD)/lockctl: $(LOCKCTL_SRC) $(wildcard lockctl/*.h)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(DEFS) $(CPPFLAGS) $(CFLAGS) $(SANFLAGS) \
	  $(shell pkg-config --cflags openssl 2>/dev/null) -o $@ $(LOCKCTL_SRC) \
	  $(shell pkg-config --libs openssl 2>/dev/null) $(LDFLAGS)

$(LOCKCTL_PARSE_OBJ): lockctl/parse.c lockctl/parse.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.c $(wildcard proto/*.h) $(DAEMON_HDR) $(BUILD)/scripts.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(PKG_CFLAGS) -c -o $@ $<

# The Lua scripts are compiled into the binary with their SHA1 (for EVALSHA).
$(BUILD)/scripts.c: $(SCRIPTS) $(wildcard scripts/lib/*.lua scripts/batch/*.lua) \
	    scripts/embed.sh
	@mkdir -p $(BUILD)
	sh scripts/embed.sh $(BUILD) $(SCRIPTS)

# Written together with scripts.c (one rule, so make -j runs it once).
$(BUILD)/scripts.h: $(BUILD)/scripts.c
	@test -f $@

$(BUILD)/scripts.o: $(BUILD)/scripts.c
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/test_unit: $(UNIT_SRC) $(UNIT_OBJ)
	$(CC) $(ALL_CFLAGS) $(PKG_CFLAGS) -o $@ $^ $(CHECK_LIBS) $(PKG_LIBS) $(LDFLAGS)

# Install missing build and test dependencies (Debian). As root this runs
# apt-get; otherwise it prints the command to run.  debhelper, dpkg-dev
# and lintian are for make deb (and its test).  prometheus is for its
# promtool (the /metrics and contrib/ checks); its packages would start a
# Prometheus server (and a node exporter) on install, so while apt-get runs
# a policy-rc.d (unless one is already in place) says no service may
# start: the tests start every server they need themselves.
# CLIENT_PKGS are the client libraries' toolchains (clients/*, make clients):
# Java 17 and JUnit 5's console launcher, Go, Node (its npm is the one
# nodejs ships: Debian's npm package conflicts with a nodejs that bundles
# it), Python's venv, setuptools and wheel (the offline install the Python
# README gives and its test does) and pip (the Python Makefile's wheel).
CLIENT_PKGS := default-jdk-headless junit5 golang-go nodejs python3-venv \
            python3-setuptools python3-wheel python3-pip
DEB_PKGS := build-essential pkg-config libhiredis-dev libevent-dev uuid-dev \
            libssl-dev openssl check redis-server redis-tools python3 mandoc \
            prometheus valgrind clang netcat-openbsd strace faketime \
            debhelper dpkg-dev lintian iproute2 iptables $(CLIENT_PKGS)
deps:
	@missing=""; \
	for p in $(CLIENT_PKGS); do \
	  [ "$$(dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null)" = installed ] || missing=1; done; \
	pkg-config --exists hiredis libevent uuid openssl check 2>/dev/null || missing=1; \
	command -v redis-server >/dev/null 2>&1 || missing=1; \
	command -v $(PY) >/dev/null 2>&1 || missing=1; \
	for c in mandoc promtool valgrind clang nc strace faketime openssl \
	         dh dpkg-buildpackage lintian ip iptables; do \
	  command -v $$c >/dev/null 2>&1 || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing $(DEB_PKGS)"; \
	    rcd=/usr/sbin/policy-rc.d; own=""; \
	    if [ ! -e $$rcd ]; then \
	      printf '#!/bin/sh\n# make deps: no service starts while it installs\nexit 101\n' \
	        > $$rcd && chmod 755 $$rcd && own=1; \
	    fi; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq $(DEB_PKGS) >/dev/null; rc=$$?; \
	    if [ -n "$$own" ]; then rm -f $$rcd; fi; \
	    [ $$rc = 0 ] || exit 1; \
	  else \
	    echo "deps: missing packages; run: sudo apt-get install $(DEB_PKGS)"; exit 1; \
	  fi; \
	fi

# make run: use the Redis at REDIS if one answers there, else start a private
# one on RUN_REDIS_PORT (stopped again when the broker exits), then run the
# broker in the foreground.  Extra broker arguments: make run ARGS="-v".
REDIS         ?= 127.0.0.1:6379
RUN_REDIS_PORT ?= 6399
run: deps
	@$(MAKE) --no-print-directory all
	@set -e; redis="$(REDIS)"; rpid=""; \
	if ! redis-cli -h "$${redis%:*}" -p "$${redis##*:}" ping >/dev/null 2>&1; then \
	  echo "run: no Redis at $$redis; starting one on 127.0.0.1:$(RUN_REDIS_PORT)"; \
	  mkdir -p build/run; \
	  redis-server --bind 127.0.0.1 --port $(RUN_REDIS_PORT) --save '' \
	    --dir build/run --logfile redis.log & rpid=$$!; \
	  redis="127.0.0.1:$(RUN_REDIS_PORT)"; \
	  for i in $$(seq 50); do redis-cli -p $(RUN_REDIS_PORT) ping >/dev/null 2>&1 && break; sleep 0.1; done; \
	fi; \
	trap '[ -n "$$rpid" ] && kill $$rpid 2>/dev/null; true' EXIT INT TERM; \
	$(BUILD)/lockbrokerd -r "$$redis" $(ARGS) || true

unit: $(BUILD)/test_unit
	$(BUILD)/test_unit

# The sanitizer pass leaves out the suites run.py lists as ONCE.  The
# broker of an earlier build (MIXED_BASE) is built first: test_lean runs
# it beside this one, as a rolling upgrade does.
MIXED_BASE := 27629bd
MIXED_BIN := build/bench/base-$(MIXED_BASE)/build/lockbrokerd
integration: all $(MIXED_BIN)
	LOCKBROKERD=$(abspath $(BUILD)/lockbrokerd) LOCKCTL=$(abspath $(BUILD)/lockctl) \
	  LBT_ONCE_DONE=$(if $(filter 1,$(SANITIZE)),1,0) \
	  $(PY) tests/integration/run.py $(TESTS)

test: deps
	@$(MAKE) --no-print-directory check-deps unit integration valgrind
	$(PY) tests/bench/test_run.py
	@$(MAKE) --no-print-directory SANITIZE=1 unit integration
	@$(MAKE) --no-print-directory clients

# The client libraries' suites (clients/<lang>: make test there), once,
# against the normal build's broker (they test the libraries, which a
# sanitized broker does not test more). All four run even when one fails.
CLIENT_LANGS := python java go node
clients: all
	@rc=0; for l in $(CLIENT_LANGS); do \
	  echo "clients: make -C clients/$$l test"; t0=$$(date +%s); \
	  $(MAKE) --no-print-directory -C clients/$$l test \
	    LOCKBROKERD=$(abspath build/lockbrokerd) || { rc=1; echo "clients: $$l FAILED"; }; \
	  echo "clients: $$l took $$(( $$(date +%s) - t0 )) s"; \
	done; exit $$rc

# The layer rule: no daemon object calls one of a higher layer
# (tests/layers), but for the back-calls tests/layers.allow still lists.
check-deps: all
	cd $(BUILD) && sh $(CURDIR)/tests/check-deps.sh $(CURDIR)/tests/layers \
	  $(CURDIR)/tests/layers.allow $(patsubst $(BUILD)/%,%,$(DAEMON_OBJ))

# One integration scenario under valgrind: no errors, no leaks.
valgrind: all
	bash tests/integration/valgrind.sh $(BUILD)/lockbrokerd

clean:
	rm -rf build

install: all
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BUILD)/lockbrokerd $(DESTDIR)$(PREFIX)/sbin/lockbrokerd
	$(if $(LOCKCTL_SRC),install -m 755 $(BUILD)/lockctl $(DESTDIR)$(PREFIX)/bin/lockctl)
	install -d $(DESTDIR)$(PREFIX)/etc/lockbroker
	@# never overwrite a conf an operator may have edited
	@if [ -e $(DESTDIR)$(PREFIX)/etc/lockbroker/lockbrokerd.conf ]; then \
	  echo "install: keeping existing $(PREFIX)/etc/lockbroker/lockbrokerd.conf"; \
	else install -m 644 conf/lockbrokerd.conf $(DESTDIR)$(PREFIX)/etc/lockbroker/lockbrokerd.conf; fi
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 644 systemd/lockbrokerd.service $(DESTDIR)$(PREFIX)/lib/systemd/system/lockbrokerd.service
	install -d $(DESTDIR)$(PREFIX)/share/man/man8
	install -m 644 daemon/lockbrokerd.8 $(DESTDIR)$(PREFIX)/share/man/man8/lockbrokerd.8
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 lockctl/lockctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/lockctl.1

# make deb: the Debian package (debian/, debhelper), built through this
# Makefile in a copy of the tree (build/deb/lockbrokerd-VERSION), so the
# source tree is left as it was.  Out: build/deb/lockbrokerd_VERSION_ARCH.deb
# (with its -dbgsym, .changes and .buildinfo), the build's log in
# build/deb/build.log and lintian's report in build/deb/lintian.txt, whose
# errors fail.  debian/changelog's version must be VERSION.
DEB_DIR := build/deb
DEB_SRC := $(DEB_DIR)/lockbrokerd-$(VERSION)
deb: deps
	@v=$$(dpkg-parsechangelog -l debian/changelog -S Version) || exit 1; \
	if [ "$$v" != "$(VERSION)" ]; then \
	  echo "deb: debian/changelog is at $$v but VERSION is $(VERSION):" \
	    "add an entry for $(VERSION) at its top (dch -v $(VERSION))"; exit 1; fi
	rm -rf $(DEB_DIR)
	mkdir -p $(DEB_SRC)
	tar -cf - --exclude=./build --exclude=./.git . | tar -xf - -C $(DEB_SRC)
	@# This make's command-line variables (SANITIZE=1, ...) must not reach
	@# the package's build: make hands them on in MAKEFLAGS and the
	@# environment.
	@echo "deb: dpkg-buildpackage in $(DEB_SRC), log in $(DEB_DIR)/build.log"
	@cd $(DEB_SRC) && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u SANITIZE \
	  dpkg-buildpackage -b -us -uc -Jauto >../build.log 2>&1 || \
	  { tail -40 ../build.log; echo "deb: dpkg-buildpackage failed"; exit 1; }
	@lintian --allow-root --fail-on error $(DEB_DIR)/lockbrokerd_$(VERSION)_*.changes \
	  >$(DEB_DIR)/lintian.txt 2>&1; rc=$$?; cat $(DEB_DIR)/lintian.txt; \
	  [ $$rc = 0 ] || { echo "deb: lintian found errors"; exit 1; }
	@ls $(DEB_DIR)/lockbrokerd_$(VERSION)_*.deb

# libFuzzer targets (clang + libfuzzer-14-dev): the protocol parser, and
# the acl_file parser with its glob matcher.  FUZZ_SECONDS is the total:
# two thirds go to the protocol parser, one third to the access lists.
FUZZ_SECONDS ?= 60
# (at least 1 s each: libFuzzer takes -max_total_time=0 as "no limit")
FUZZ_ACL_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) / 3 )); [ $$s -ge 1 ] || s=1; echo $$s)
FUZZ_PROTO_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) - $(FUZZ_ACL_SECONDS) )); [ $$s -ge 1 ] || s=1; echo $$s)
FUZZ_CFLAGS := -std=c11 -g -O1 -Wall -Wextra -Werror \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
# New inputs go to build/fuzz/corpus (protocol) and build/fuzz/acl/corpus,
# crashes to build/fuzz/crash-* and build/fuzz/acl-crash-*; each fuzzer's
# exit status is kept (a pipe into tail would hide a crash), and the
# second does not run when the first failed.
fuzz: deps
	@mkdir -p build/fuzz/corpus build/fuzz/acl/corpus
	clang $(FUZZ_CFLAGS) -Iproto \
	  -o build/fuzz/fuzz_proto tests/fuzz/fuzz_proto.c proto/proto.c
	clang $(FUZZ_CFLAGS) $(DAEMON_INC) \
	  -o build/fuzz/fuzz_acl tests/fuzz/fuzz_acl.c $(call dsrc,acl)
	@build/fuzz/fuzz_proto -max_total_time=$(FUZZ_PROTO_SECONDS) -max_len=8192 \
	  -dict=tests/fuzz/proto.dict -artifact_prefix=build/fuzz/ \
	  build/fuzz/corpus tests/fuzz/corpus >build/fuzz/fuzz.log 2>&1; \
	  rc=$$?; if [ $$rc = 0 ]; then grep -E 'DONE|^Done' build/fuzz/fuzz.log; \
	  else tail -30 build/fuzz/fuzz.log; fi; [ $$rc = 0 ] || exit $$rc; \
	  build/fuzz/fuzz_acl -max_total_time=$(FUZZ_ACL_SECONDS) -max_len=16384 \
	  -dict=tests/fuzz/acl.dict -artifact_prefix=build/fuzz/acl- \
	  build/fuzz/acl/corpus tests/fuzz/acl_corpus >build/fuzz/fuzz_acl.log 2>&1; \
	  rc=$$?; if [ $$rc = 0 ]; then grep -E 'DONE|^Done' build/fuzz/fuzz_acl.log; \
	  else tail -30 build/fuzz/fuzz_acl.log; fi; exit $$rc

# make bench: the load generator (tests/bench/lbbench.c, libevent + hiredis)
# and its driver, which starts its own redis-server and brokers on free
# ports, runs every measurement (about two minutes, the Redis Cluster rows
# included) and prints the tables, also written to $(BUILD)/bench/results.txt
# (build/bench/results.txt by default).  See docs/BENCHMARKS.md.
BENCH_PKGS := hiredis libevent openssl
$(BUILD)/lbbench: $(wildcard tests/bench/*.c)
	@mkdir -p $(@D)
	$(CC) $(WARN) $(CFLAGS) $(SANFLAGS) $(shell pkg-config --cflags $(BENCH_PKGS)) \
	  -o $@ $^ $(shell pkg-config --libs $(BENCH_PKGS)) $(LDFLAGS)

# The bench compares this build with the broker of an earlier commit
# (BENCH_BASE), built from that commit's own tree in the same run (A/B:
# the same machine and load): pairs/s and every process's CPU per pair,
# memory per lock and per session, the Cluster rows.  The hand-off targets
# are held to another commit's broker (BENCH_HANDOFF_BASE), in alternated
# runs.  Either one empty (BENCH_BASE=) leaves its comparison out.
BENCH_BASE ?= 27629bd
BENCH_HANDOFF_BASE ?= a84f56f
BENCH_BASE_BIN := $(if $(BENCH_BASE),build/bench/base-$(BENCH_BASE)/build/lockbrokerd)
BENCH_HANDOFF_BIN := $(if $(BENCH_HANDOFF_BASE),build/bench/base-$(BENCH_HANDOFF_BASE)/build/lockbrokerd)
build/bench/base-%/build/lockbrokerd:
	rm -rf build/bench/base-$* && mkdir -p build/bench/base-$*
	git archive $* | tar -x -C build/bench/base-$*
	$(MAKE) --no-print-directory -C build/bench/base-$* build/lockbrokerd

bench: deps
	@$(MAKE) --no-print-directory all $(BUILD)/lbbench $(BENCH_BASE_BIN) $(BENCH_HANDOFF_BIN)
	$(PY) tests/bench/run.py --broker $(BUILD)/lockbrokerd --tool $(BUILD)/lbbench \
	  --scripts scripts --out $(BUILD)/bench/results.txt \
	  $(if $(BENCH_BASE_BIN),--baseline-broker $(BENCH_BASE_BIN)) \
	  $(if $(BENCH_HANDOFF_BIN),--handoff-baseline-broker $(BENCH_HANDOFF_BIN))
