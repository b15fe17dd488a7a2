# rlgate build.  Everything generated goes to $(BUILD); nothing in git is.
#   make              BPF objects, skeletons, rlagent, rlctl, tools, test programs
#   make SANITIZE=1   user space with ASan/UBSan (into build-san/)
#   make test         dependencies, build, every suite, one summary line
#   make bench        per-packet and fleet benchmarks
#   make demo         the quick start: a lab, a limit, load, a report

ifeq ($(SANITIZE),1)
BUILD ?= build-san
else
BUILD ?= build
endif

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
	  -I$(BUILD) -Ibpf -Iuser/lib
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
LIBS_ALL := $(LIBS_BPF) -luring -lhiredis -ljansson -lm

# --- BPF ---------------------------------------------------------------------
BPF_SRCS := $(wildcard bpf/*.bpf.c) $(wildcard tests/bpf/*.bpf.c)
BPF_OBJS := $(addprefix $(BUILD)/,$(notdir $(BPF_SRCS:.bpf.c=.bpf.o)))
SKELS := $(BPF_OBJS:.bpf.o=.skel.h)

vpath %.bpf.c bpf tests/bpf
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
PRELOAD_SRCS := $(wildcard user/preload/*.c)
XDPTEST_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out %.bpf.c,$(wildcard tests/bpf/*.c)))
LOADER_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/e2e/loader/*.c))
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
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
ifneq ($(PRELOAD_SRCS),)
PROGS += $(BUILD)/librlpreload.so
endif
ifneq ($(XDPTEST_OBJS),)
PROGS += $(BUILD)/tests/test_xdp
endif
ifneq ($(LOADER_OBJS),)
PROGS += $(BUILD)/tests/rlload
endif

.PHONY: all deps test bench demo clean
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

$(BUILD)/librlpreload.so: $(PRELOAD_SRCS) $(LIB_SRCS) | $(SKELS)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $(PRELOAD_SRCS) -ldl -lpthread

$(BUILD)/tests/test_xdp: $(XDPTEST_OBJS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL) -lpthread

$(BUILD)/tests/rlload: $(LOADER_OBJS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

$(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_ALL)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# --- workflows -----------------------------------------------------------------
deps:
	tools/deps.sh

test: deps
	$(MAKE) all
	tools/run-tests.sh $(BUILD)

bench: deps
	$(MAKE) all
	tools/bench.sh $(BUILD)

demo: deps
	$(MAKE) all
	tools/demo.sh $(BUILD)

clean:
	rm -rf build build-san
