# rlgate build.  Everything generated goes to $(BUILD); nothing in git is.
#   make              BPF objects, skeletons, rlagent, rlctl, tools, test programs
#   make SANITIZE=1   user space with ASan/UBSan (into build-san/)
#   make test         dependencies, build, every suite, one summary line
#   make test-san     the unit suite and the e2e files of the fault paths with
#                     rlagent, rlctl and the tests built with ASan/UBSan
#   make bench        per-packet and fleet benchmarks
#   make bench-peers  rlgate against nftables, iptables and HAProxy, and a SYN flood
#   make demo         the quick start: a lab, a limit, load, a report

ifeq ($(SANITIZE),1)
BUILD ?= build-san
else
BUILD ?= build
endif

# The one version string of rlagent, rlctl and the package (the upstream
# part of debian/changelog's version must match: tests/pkg/deb.bats checks).
VERSION := 0.1.0

CC ?= cc
CLANG ?= clang
BPFTOOL ?= bpftool
ARCH := $(shell uname -m)
# The kernel's name for the architecture, for bpf_tracing.h and friends.
BPF_ARCH := $(patsubst x86_64,x86,$(patsubst aarch64,arm64,$(patsubst \
	    ppc64le,powerpc,$(patsubst s390x,s390,$(patsubst riscv64,riscv,$(ARCH))))))
# Debian's multiarch include dir (asm/types.h for the BPF target).
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null || echo $(ARCH)-linux-gnu)

# A recipe that fails leaves no half-written target behind.
.DELETE_ON_ERROR:

CFLAGS ?= -O2 -g
CFLAGS += -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -MMD -MP \
	  -I$(BUILD) -Ibpf -Iuser/lib -DRLGATE_VERSION='"$(VERSION)"'
LDFLAGS ?=
# Each program records only the libraries it calls into.
LDFLAGS += -Wl,--as-needed
ifeq ($(SANITIZE),1)
CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=address,undefined
endif

BPF_CFLAGS := -O2 -g -target bpf -mcpu=v3 -D__TARGET_ARCH_$(BPF_ARCH) \
	      -I/usr/include/$(MULTIARCH) -Ibpf -Wall -Wextra -Werror \
	      -Wno-unused-parameter

LIBS_BPF := -lbpf -lelf -lz
LIBS_ALL := $(LIBS_BPF) -luring -lhiredis -lssl -lcrypto -ljansson -lm

# --- BPF ---------------------------------------------------------------------
BPF_SRCS := $(wildcard bpf/*.bpf.c) $(wildcard tests/bpf/*.bpf.c) $(wildcard tools/synflood/*.bpf.c)
BPF_OBJS := $(addprefix $(BUILD)/,$(notdir $(BPF_SRCS:.bpf.c=.bpf.o)))
SKELS := $(BPF_OBJS:.bpf.o=.skel.h)

vpath %.bpf.c bpf tests/bpf tools/synflood
.SECONDARY: $(BPF_OBJS)

# Test programs may #include the shipped one: every object depends on it.
$(BUILD)/%.bpf.o: %.bpf.c bpf/rlgate.h bpf/rlgate.bpf.c | $(BUILD)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/%.bpf.o
	$(BPFTOOL) gen skeleton $< name $(subst .bpf.o,,$(notdir $<))_bpf > $@.tmp && mv $@.tmp $@

# --- user space --------------------------------------------------------------
LIB_SRCS := $(wildcard user/lib/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
LIB := $(BUILD)/librl.a

AGENT_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard user/agent/*.c)) $(BUILD)/obj/lua_scripts.o
LUA_SRCS := $(sort $(wildcard lua/*.lua))
RLCTL_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard user/rlctl/*.c))
LOADGEN_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/loadgen/*.c))
FLEETSIM_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/fleet-sim/*.c))
SYNFLOOD_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out %.bpf.c,$(wildcard tools/synflood/*.c)))
PRELOAD_SRCS := $(wildcard user/preload/*.c)
XDPTEST_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out %.bpf.c,$(wildcard tests/bpf/*.c)))
LOADER_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/e2e/loader/*.c))
POOLTOOL_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/e2e/pool/*.c))
ACCEPT_BENCH_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/bench/accept_bench.c))
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
# CHECK() and the TAP runner of every C test (tests/unit and tests/bpf).
CHECK_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/unit/check.c))
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/unit/%)

PROGS :=
ifneq ($(AGENT_OBJS),)
PROGS += $(BUILD)/rlagent
endif
ifneq ($(RLCTL_OBJS),)
PROGS += $(BUILD)/rlctl
endif
ifneq ($(LOADGEN_OBJS),)
PROGS += $(BUILD)/loadgen
endif
ifneq ($(FLEETSIM_OBJS),)
PROGS += $(BUILD)/fleet-sim
endif
ifneq ($(SYNFLOOD_OBJS),)
PROGS += $(BUILD)/synflood
endif
ifneq ($(PRELOAD_SRCS),)
PROGS += $(BUILD)/librlpreload.so
endif
ifneq ($(XDPTEST_OBJS),)
PROGS += $(BUILD)/tests/test_xdp
endif
ifneq ($(LOADER_OBJS),)
PROGS += $(BUILD)/tests/rlload
endif
ifneq ($(POOLTOOL_OBJS),)
PROGS += $(BUILD)/tests/rlpool
endif
ifneq ($(ACCEPT_BENCH_OBJS),)
PROGS += $(BUILD)/tests/accept_bench
endif

.PHONY: all deps test test-san bench bench-peers demo clean
all: $(SKELS) $(PROGS) $(UNIT_BINS)

$(BUILD):
	@mkdir -p $@

# Every user-space object may include a skeleton: build them first.
$(BUILD)/obj/%.o: %.c | $(SKELS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/lua_scripts.c: $(LUA_SRCS) tools/embed-lua.sh | $(BUILD)
	tools/embed-lua.sh $@ $(LUA_SRCS)

$(BUILD)/obj/lua_scripts.o: $(BUILD)/lua_scripts.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iuser/agent -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/rlagent: $(AGENT_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

$(BUILD)/rlctl: $(RLCTL_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

$(BUILD)/loadgen: $(LOADGEN_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

$(BUILD)/fleet-sim: $(FLEETSIM_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

$(BUILD)/synflood: $(SYNFLOOD_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

# The library links only what runs inside the program (the pool's reader
# side) and exports only the calls it wraps.  Never with the sanitizers: a
# preloaded ASan runtime would break the programs it is loaded into.
PRELOAD_LIB_SRCS := user/lib/pool.c user/lib/fdtab.c
$(BUILD)/librlpreload.so: $(PRELOAD_SRCS) $(PRELOAD_LIB_SRCS) $(wildcard user/lib/*.h) bpf/rlgate.h | $(BUILD)
	$(CC) $(filter-out -MMD -MP -fsanitize% -fno-sanitize%,$(CFLAGS)) -fPIC \
		-fvisibility=hidden -shared $(filter-out -fsanitize%,$(LDFLAGS)) \
		-Wl,-z,defs -o $@ $(PRELOAD_SRCS) $(PRELOAD_LIB_SRCS) -ldl -lpthread

$(BUILD)/tests/test_xdp: $(XDPTEST_OBJS) $(CHECK_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL) -lpthread

$(BUILD)/tests/rlload: $(LOADER_OBJS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

$(BUILD)/tests/rlpool: $(POOLTOOL_OBJS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

$(BUILD)/tests/accept_bench: $(ACCEPT_BENCH_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^

$(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(CHECK_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

# Tests of the agent's own files (the broker on a host of the test's own,
# the tenant tables): linked with them, and with malloc wrapped so that it
# fails when the test says.
AGENT_TESTS := $(BUILD)/tests/unit/test_broker_names $(BUILD)/tests/unit/test_agent_table \
	$(BUILD)/tests/unit/test_preload_heal
$(AGENT_TESTS): $(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(CHECK_OBJ) \
		$(filter-out $(BUILD)/obj/user/agent/main.o,$(AGENT_OBJS)) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -Wl,--wrap=malloc -o $@ $^ $(LIBS_ALL)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# --- workflows -----------------------------------------------------------------
deps:
	tools/deps.sh

test: deps
	$(MAKE) all
	tools/run-tests.sh $(BUILD)

# The e2e files that take the agent down its fault paths: stops and
# restarts on pins, Redis lost, killed and misbehaving (the fuzzers), a
# cluster's master killed, a Sentinel failover, preload pools, mutated
# control requests (fuzz.bats), and the stop storm of fleet agents with
# Redis dying under them.  Any sanitizer report fails them: an agent's
# in its log (tests/e2e/agent_helpers.bash checks every stop), a test
# program's or rlctl's in its exit status.  Not chaos.bats, fleet.bats and
# agent_control.bats: they judge deadlines of a second and rates, which a
# sanitizer build misses on a loaded machine (docs/testing.md).
SAN_E2E := agent_lifecycle.bats cluster.bats \
	   sentinel.bats fuzz.bats preload_agent.bats preload_trust.bats \
	   redis_tls.bats stop_storm.bats

test-san: deps
	$(MAKE) SANITIZE=1 all
	ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		RLGATE_UNIT_TIMEOUT=600 RLGATE_E2E_FILES="$(SAN_E2E)" \
		tools/run-tests.sh build-san unit e2e

bench: deps
	$(MAKE) all
	tools/bench.sh $(BUILD)

bench-peers: deps
	$(MAKE) all
	tools/bench-peers.sh $(BUILD)

# Only what the demo runs, built quietly: a newcomer reads the demo's
# twenty lines, not the compiler's.
DEMO_PROGS := $(BUILD)/rlagent $(BUILD)/rlctl $(BUILD)/loadgen $(BUILD)/pass.bpf.o
demo:
	@tools/deps.sh demo
	@echo "==> building rlagent, rlctl and loadgen into $(BUILD)/ (a minute or two the first time)"
	@$(MAKE) -s --no-print-directory $(DEMO_PROGS)
	@tools/demo.sh $(BUILD)

clean:
	rm -rf build build-san

# --- man pages, install, Debian package ----------------------------------------
#   make install [PREFIX=/usr/local] [DESTDIR=]    make uninstall (same vars)
#   make deb                                       build/rlgate_<version>_<arch>.deb
MAN_SRCS := $(wildcard docs/man/*.scd)
MANPAGES := $(MAN_SRCS:docs/man/%.scd=$(BUILD)/man/%)

.PHONY: man install uninstall deb test-deb
all: $(MANPAGES)
man: $(MANPAGES)

$(BUILD)/man/%: docs/man/%.scd
	@mkdir -p $(@D)
	scdoc < $< > $@

PREFIX ?= /usr/local
DESTDIR ?=
SBINDIR ?= $(PREFIX)/sbin
LIBDIR ?= $(PREFIX)/lib/rlgate
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/rlgate
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc

INSTALL_PROGS := $(filter $(BUILD)/rlagent $(BUILD)/rlctl,$(PROGS))
INSTALL_LIBS := $(filter %.so,$(PROGS))
INSTALL_DOCS := README.md $(wildcard docs/*.md)
# The plots the docs show, beside them as benchmarks.md links them; the
# installed README.md lies beside the docs it links to in docs/ in the tree.
INSTALL_PLOTS := $(wildcard docs/bench/*.svg)
INSTALL_RULES := $(wildcard contrib/prometheus/*.yml)
INSTALL_DASHBOARDS := $(wildcard contrib/grafana/*.json)

install: $(INSTALL_PROGS) $(INSTALL_LIBS) $(MANPAGES)
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSCONFDIR)/default $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(DOCDIR)
	install -m 0755 $(INSTALL_PROGS) $(DESTDIR)$(SBINDIR)/
	$(if $(INSTALL_LIBS),install -d $(DESTDIR)$(LIBDIR) && \
		install -m 0644 $(INSTALL_LIBS) $(DESTDIR)$(LIBDIR)/)
	sed -e 's|/usr/local/sbin/|$(SBINDIR)/|g' \
	    -e 's|/usr/local/share/doc/rlgate/|$(DOCDIR)/|g' \
	    -e 's|/etc/default/|$(SYSCONFDIR)/default/|g' \
		tools/rlagent.service > $(DESTDIR)$(UNITDIR)/rlagent.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/rlagent.service
	test -e $(DESTDIR)$(SYSCONFDIR)/default/rlagent || \
		install -m 0644 tools/rlagent.default $(DESTDIR)$(SYSCONFDIR)/default/rlagent
	install -m 0644 $(MANPAGES) $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 contrib/bash-completion/rlctl $(DESTDIR)$(BASHCOMPDIR)/rlctl
	install -m 0644 $(filter-out README.md,$(INSTALL_DOCS)) $(DESTDIR)$(DOCDIR)/
	sed -e 's|](docs/|](|g' README.md > $(DESTDIR)$(DOCDIR)/README.md
	chmod 0644 $(DESTDIR)$(DOCDIR)/README.md
	$(if $(INSTALL_PLOTS),install -d $(DESTDIR)$(DOCDIR)/bench && \
		install -m 0644 $(INSTALL_PLOTS) $(DESTDIR)$(DOCDIR)/bench/)
	$(if $(INSTALL_RULES),install -d $(DESTDIR)$(DOCDIR)/prometheus && \
		install -m 0644 $(INSTALL_RULES) $(DESTDIR)$(DOCDIR)/prometheus/)
	$(if $(INSTALL_DASHBOARDS),install -d $(DESTDIR)$(DOCDIR)/grafana && \
		install -m 0644 $(INSTALL_DASHBOARDS) $(DESTDIR)$(DOCDIR)/grafana/)

# Removes what install put there; /etc/default/rlagent only if unchanged.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(SBINDIR)/,$(notdir $(INSTALL_PROGS))) \
	      $(addprefix $(DESTDIR)$(LIBDIR)/,$(notdir $(INSTALL_LIBS))) \
	      $(DESTDIR)$(UNITDIR)/rlagent.service \
	      $(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(MANPAGES))) \
	      $(DESTDIR)$(BASHCOMPDIR)/rlctl \
	      $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(INSTALL_DOCS))) \
	      $(addprefix $(DESTDIR)$(DOCDIR)/bench/,$(notdir $(INSTALL_PLOTS))) \
	      $(addprefix $(DESTDIR)$(DOCDIR)/prometheus/,$(notdir $(INSTALL_RULES))) \
	      $(addprefix $(DESTDIR)$(DOCDIR)/grafana/,$(notdir $(INSTALL_DASHBOARDS)))
	if cmp -s tools/rlagent.default $(DESTDIR)$(SYSCONFDIR)/default/rlagent; then \
		rm -f $(DESTDIR)$(SYSCONFDIR)/default/rlagent; fi
	-rmdir $(DESTDIR)$(DOCDIR)/prometheus $(DESTDIR)$(DOCDIR)/grafana \
	       $(DESTDIR)$(DOCDIR)/bench \
	       $(DESTDIR)$(DOCDIR) $(DESTDIR)$(LIBDIR) 2>/dev/null

# The package is built from a copy of the tree in $(BUILD)/deb, so that
# dpkg-buildpackage writes nothing beside the tree.
DEB_VERSION = $(shell dpkg-parsechangelog -l debian/changelog -S Version)
DEB_ARCH = $(shell dpkg --print-architecture)
deb:
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb/rlgate
	tar -cf - --exclude='./build*' --exclude=./.git . | tar -C $(BUILD)/deb/rlgate -xf -
	cd $(BUILD)/deb/rlgate && dpkg-buildpackage -b -us -uc -Jauto
	cp $(BUILD)/deb/rlgate_$(DEB_VERSION)_$(DEB_ARCH).deb $(BUILD)/
	@echo "built $(BUILD)/rlgate_$(DEB_VERSION)_$(DEB_ARCH).deb"
