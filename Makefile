# chunkraft — see README.md.
GO       ?= go
BIN      := bin
TOOLS    := $(CURDIR)/.tools/bin
STATICCHECK_VERSION := v0.8.2

.PHONY: all build test deps cluster cluster-down proto lint fmt clean

all: build

## build: the binaries into bin/ (stamped with the git commit for --version
## when git can read the checkout; an environment's GOFLAGS=-buildvcs=false is
## overridden, and a checkout git refuses builds unstamped)
build:
	$(GO) build -buildvcs=auto -o $(BIN)/ ./cmd/... 2>/dev/null || $(GO) build -buildvcs=false -o $(BIN)/ ./cmd/...

## test: the programs the tests run (scripts/deps.sh: installed with apt-get
## as root, else named), then vet and every test (multi-process tests use the
## built binaries)
test:
	@scripts/deps.sh test
	@$(MAKE) --no-print-directory build
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 25m ./...

## deps: install (as root with apt-get) or name what make test runs besides Go
deps:
	@scripts/deps.sh test

## cluster: a local 3-node cluster with pool 1, copysets 1..16
cluster:
	@scripts/deps.sh cluster
	@$(MAKE) --no-print-directory build
	scripts/cluster.sh up

cluster-down:
	scripts/cluster.sh down

## proto: regenerate Go code from proto/ (needs Debian's protobuf-compiler)
proto:
	scripts/genproto.sh

## lint: gofmt, go vet, staticcheck (pinned)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(TOOLS)/staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

clean:
	rm -rf $(BIN) .tools
