# Thin wrapper over CMake. `make demo` and `make test` are the two commands
# a fresh machine needs (README.md).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all configure demo test sanitize clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

demo: all
	./scripts/demo.sh $(BUILD)

test: all
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 300
	$(MAKE) sanitize

# ASan+UBSan and TSan builds of the fast unit and integration tests.
sanitize:
	@test -f $(BUILD)-asan/CMakeCache.txt || cmake -S . -B $(BUILD)-asan -DCUSHARE_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(BUILD)-asan -j $(JOBS)
	ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS) -L sanitize --timeout 300
	@test -f $(BUILD)-tsan/CMakeCache.txt || cmake -S . -B $(BUILD)-tsan -DCUSHARE_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(BUILD)-tsan -j $(JOBS)
	ctest --test-dir $(BUILD)-tsan --output-on-failure -j $(JOBS) -L tsan --timeout 300

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
