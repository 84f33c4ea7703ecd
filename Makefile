# bootops — make targets. Every target installs what it needs.
#   make build   the bootops binary (bin/bootops)
#   make test    vet + every test (unit, golden, differential, CLI)
#   make demo    the most end-to-end thing that works today (see README)
#   make bench   benchmarks, written to test/bench/results/ (see BENCHMARKS.md)
#   make fuzz    run the fuzz targets for a while (FUZZTIME=2m each)

GO       ?= go
BIN      := bin/bootops
FUZZTIME ?= 2m
CUE_VERSION := v0.17.1

export GOFLAGS := -buildvcs=false

.PHONY: build test demo bench fuzz clean go-check

build: go-check
	$(GO) build -o $(BIN) ./cmd/bootops

# Go itself is the one thing a target cannot install from Debian at the
# version go.mod needs; say so plainly instead of failing obscurely.
go-check:
	@command -v $(GO) >/dev/null || { echo "make: Go is required (see go.mod for the version)"; exit 1; }

test: go-check
	$(GO) vet ./...
	$(GO) test -count=1 ./...

demo: build
	@bash test/demo.sh

bench: build
	@bash test/bench/compile.sh

fuzz: go-check
	$(GO) test ./compiler -run XXX -fuzz FuzzLoad -fuzztime $(FUZZTIME)
	$(GO) test ./compiler -run XXX -fuzz FuzzFastPathAgreesWithCUE -fuzztime $(FUZZTIME)

clean:
	rm -rf bin out .cache
