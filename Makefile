# Thin wrapper over CMake. `make demo` and `make test` are the two commands
# a fresh machine needs (README.md).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local
comma := ,

.PHONY: all configure demo deps test sanitize install clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

# $(call cmake_configure,DIR,FLAGS): CMake writes DIR/Makefile only when a
# configure succeeds; without it (a configure that failed) DIR is configured
# again from a fresh cache, so a bad CUDA_HOME is never remembered.
define cmake_configure
	@test -f $(1)/Makefile || { rm -f $(1)/CMakeCache.txt; cmake -S . -B $(1) $(2); }
endef

configure:
	$(call cmake_configure,$(BUILD),$(CMAKE_FLAGS))

demo: all
	./scripts/demo.sh $(BUILD)

# What the suite needs from the system (scripts/deps.sh holds the list;
# CI and `make test` use it too).
deps:
	@scripts/deps.sh

# The whole GPU-free suite: the plain build, then ASan+UBSan and TSan builds
# of the fast tests. Each phase writes CTest's JUnit file; the last lines
# are the summary of all three (scripts/test_summary.py), also when a phase
# failed (the phases after it do not run).
CTEST = ctest --output-on-failure -j $(JOBS) --timeout 300
test:
	@scripts/deps.sh --soft
	@rm -f $(BUILD)/junit.xml $(BUILD)-asan/junit.xml $(BUILD)-tsan/junit.xml
	@$(MAKE) --no-print-directory all && \
	  $(CTEST) --test-dir $(BUILD) --output-junit junit.xml && \
	  $(MAKE) --no-print-directory sanitize; \
	  scripts/test_summary.py suite=$(BUILD)/junit.xml asan+ubsan=$(BUILD)-asan/junit.xml \
	    tsan=$(BUILD)-tsan/junit.xml

# ASan+UBSan and TSan builds of the fast unit and integration tests.
sanitize:
	$(call cmake_configure,$(BUILD)-asan,-DCUSHARE_SANITIZE=address$(comma)undefined -DCMAKE_BUILD_TYPE=Debug)
	cmake --build $(BUILD)-asan -j $(JOBS)
	$(CTEST) --test-dir $(BUILD)-asan -L sanitize --output-junit junit.xml
	$(call cmake_configure,$(BUILD)-tsan,-DCUSHARE_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug)
	cmake --build $(BUILD)-tsan -j $(JOBS)
	$(CTEST) --test-dir $(BUILD)-tsan -L tsan --output-junit junit.xml

# The command and its benchmark harness (cushare-bench) in PREFIX/bin, the
# library in PREFIX/lib (where both look for it), README, LICENSE and docs
# in PREFIX/share/doc/cushare.
# DESTDIR stages a package as usual.
install: configure
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	cmake --build $(BUILD) -j $(JOBS) --target cushare_cli cushare_bench libcushare
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
