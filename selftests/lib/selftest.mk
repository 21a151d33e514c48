# SPDX-License-Identifier: GPL-2.0
# Standalone build rules shared by the selftests (the same steps the harness runs from
# each test.toml). A test's Makefile sets NAME and includes this file; by default every
# *.bpf.c of its directory is a BPF object, and $(NAME).c plus the shared helpers of
# lib/ (check.c, cg_util.c, bpf_util.c) the userspace program:
#
#   make VMLINUX_H_DIR=/dir/with/vmlinux.h KDIR=/kernel/tree OUT=/build/dir
#   cd /build/dir && ./$(NAME)
#
# KDIR is the kernel tree whose tools/testing/selftests/kselftest.h the tests print
# KTAP through (or give KSFT_DIR, the directory holding kselftest.h).
#
# Each X.bpf.c becomes $(OUT)/X.bpf.o and a skeleton $(OUT)/X.skel.h whose C name is
# X_bpf; the userspace binary embeds the objects through their skeletons.

SRC_DIR     := $(patsubst %/,%,$(dir $(abspath $(firstword $(MAKEFILE_LIST)))))
LIB_DIR     := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
OUT         ?= $(SRC_DIR)/build
VMLINUX_H_DIR ?= $(OUT)
KSFT_DIR    ?= $(KDIR)/tools/testing/selftests
ifeq ($(wildcard $(KSFT_DIR)/kselftest.h),)
$(error no kselftest.h in '$(KSFT_DIR)': give KDIR=/path/to/kernel/tree or KSFT_DIR=)
endif
BPF_SRCS    ?= $(notdir $(wildcard $(SRC_DIR)/*.bpf.c))
USER_SRCS   ?= $(NAME).c ../lib/check.c ../lib/cg_util.c ../lib/bpf_util.c ../lib/inventory.c
# the inventory lists a test reads at run time (test.toml files), next to its program
INV_FILES   := $(notdir $(wildcard $(SRC_DIR)/*.inventory.toml))
INC_FLAGS   := -I$(LIB_DIR) -I$(KSFT_DIR)
DEPS        := $(wildcard $(SRC_DIR)/*.h) $(wildcard $(LIB_DIR)/*.h)

CLANG       ?= clang-19
BPFTOOL     ?= bpftool
ifeq ($(origin CC),default)
CC          := gcc
endif
# -fms-extensions: 6.19+ vmlinux.h embeds tagged structs unnamed (as the kernel's own BPF
# selftests build)
BPF_CFLAGS  ?= -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror -fms-extensions \
	       -Wno-microsoft-anon-tag
CFLAGS      ?= -O2 -g -Wall -Wextra
LDLIBS      := -lbpf -lelf -lz -lm

BPF_OBJS    := $(patsubst %.bpf.c,$(OUT)/%.bpf.o,$(BPF_SRCS))
SKELS       := $(patsubst %.bpf.c,$(OUT)/%.skel.h,$(BPF_SRCS))

.PHONY: all clean
.SECONDARY: $(BPF_OBJS)
all: $(OUT)/$(NAME) $(addprefix $(OUT)/,$(INV_FILES))

$(OUT):
	mkdir -p $@

# every BPF object depends on all of them: some include others
$(OUT)/%.bpf.o: $(SRC_DIR)/%.bpf.c $(addprefix $(SRC_DIR)/,$(BPF_SRCS)) $(DEPS) \
		$(VMLINUX_H_DIR)/vmlinux.h | $(OUT)
	cd $(SRC_DIR) && $(CLANG) $(BPF_CFLAGS) -I$(VMLINUX_H_DIR) -I. $(INC_FLAGS) \
		-c $*.bpf.c -o $@

# skeleton name: file name with '.' -> '_' (X.bpf.o -> X_bpf)
$(OUT)/%.skel.h: $(OUT)/%.bpf.o
	$(BPFTOOL) gen skeleton $< name $(subst .,_,$*)_bpf > $@.tmp && mv $@.tmp $@

$(OUT)/$(NAME): $(addprefix $(SRC_DIR)/,$(USER_SRCS)) $(DEPS) $(SKELS)
	$(CC) $(CFLAGS) -I$(OUT) -I$(SRC_DIR) $(INC_FLAGS) \
		$(addprefix $(SRC_DIR)/,$(USER_SRCS)) -o $@ $(LDLIBS)

$(OUT)/%.inventory.toml: $(SRC_DIR)/%.inventory.toml | $(OUT)
	cp -L $< $@

clean:
	rm -f $(BPF_OBJS) $(SKELS) $(OUT)/$(NAME) $(addprefix $(OUT)/,$(INV_FILES))
