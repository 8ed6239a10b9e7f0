# edgefleet — see README.md. The two commands: make demo, make test.
SHELL   := /bin/bash
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/edgefleet/edgefleet/internal/version.Version=$(VERSION)
BINS    := edge origin probe fleet
# Debian packages the tests, the demo and the benchmarks run against.
DEB_PKGS := haproxy nginx-light libnginx-mod-stream slapd ldap-utils bind9 bind9-dnsutils \
            openssl iproute2 iptables conntrack ca-certificates \
            openssh-server openssh-client cloud-init prometheus systemd curl
export CGO_ENABLED = 0

.PHONY: all build deps test demo bench lint tools fuzz clean

all: build

build:
	@mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(BINS))

# deps installs the Debian packages when any is missing (quiet, idempotent).
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "deps: installing $$missing"; \
		export DEBIAN_FRONTEND=noninteractive; log=$$(mktemp); \
		apt-get install -y -q --no-install-recommends $$missing >$$log 2>&1 || \
		{ apt-get update -q >>$$log 2>&1 && apt-get install -y -q --no-install-recommends $$missing >>$$log 2>&1; } || \
		{ tail -20 $$log; rm -f $$log; exit 1; }; \
		rm -f $$log; \
	fi
	@$(GO) mod download

# The linters, pinned, built into bin/tools by `go install` (quietly: on a
# cold module cache Go prints `go: downloading …`, which is progress, not a
# finding). A version bump gets a fresh directory, so a stale binary is never
# run.
STATICCHECK_VERSION := v0.8.2
DEADCODE_VERSION    := v0.52.0
TOOLS := bin/tools/staticcheck-$(STATICCHECK_VERSION)-deadcode-$(DEADCODE_VERSION)

tools:
	@mkdir -p $(TOOLS)
	@for p in honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) \
	          golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION); do \
		log=$$(GOBIN=$(CURDIR)/$(TOOLS) $(GO) install $$p 2>&1) || { echo "install $$p:"; echo "$$log"; exit 1; }; \
	done

# lint: gofmt, go vet, staticcheck, and deadcode -test (nothing unreachable
# from a main or a test; an Example without an Output comment is compiled,
# not run, so deadcode counts it unreachable and it is let through).
# deadcode writes its findings to stdout and its own failures to stderr;
# only stdout is read as findings, so whatever the go command says on stderr
# while loading packages cannot pass for one.
lint: tools
	@log=$$($(GO) mod download 2>&1) || { echo "$$log"; exit 1; }
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...
	@out=$$($(TOOLS)/deadcode -test ./...) || exit 1; \
	out=$$(grep -v ': unreachable func: Example' <<<"$$out"); \
	if [ -n "$$out" ]; then echo "deadcode:"; echo "$$out"; exit 1; fi

# test is the one test command (README and .ci/run call it).
test: deps lint
	$(GO) test -count=1 -timeout 40m ./...

fuzz:
	./scripts/fuzz.sh

demo: deps build
	./scripts/demo.sh

bench: deps build
	./scripts/bench.sh

clean:
	rm -rf bin
