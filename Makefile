# bootops — make targets. Every target installs what it needs.
#   make build   the bootops binary (bin/bootops)
#   make microos the Micro-OS (Debian's kernel + an initramfs with the agent)
#   make check   the inner loop (under 5 minutes warm): vet for every build
#                tag, staticcheck, the unit tests under the race detector
#                (-short: the slow ones wait for make test)
#   make test    make check, then every test: unit, golden, differential, CLI,
#                and the end-to-end boots of QEMU VMs in network namespaces (root)
#   make e2e     only the end-to-end boots
#   make browser only the dashboard's test in headless Chromium
#   make demo    PXE-boot a VM from the demo repository in sites/
#   make package the Debian package, to out/ (docs/install.md)
#   make image   the container image, to out/image/ (docs/container.md)
#   make api-diff  breaking changes of api/openapi.json since BASE
#   make bench   benchmarks, written to test/bench/results/ (see BENCHMARKS.md); the goals last (goals.md)
#   make fuzz    every fuzz target for a while (FUZZTIME=2m each; FUZZ=regexp)

GO       ?= go
SHELL    := /bin/bash
BIN      := bin/bootops
AGENT    := bin/bootops-agent
FUZZTIME ?= 2m
CUE_VERSION := v0.17.1
# What the tests (a Git server, VMs, BMC simulators) and the demo need: Debian packages only (README, "Two commands").
LAB_DEBS := git python3-yaml openssh-server openssh-client e2fsprogs fdisk iproute2 qemu-system-x86 ipxe-qemu ipxe ovmf dnsmasq-base busybox-static linux-image-amd64 isc-dhcp-server isc-dhcp-client kea-dhcp4-server chromium sbsigntool systemd-boot-efi efitools shim-signed grub-efi-amd64-signed binutils openssl tcpdump openipmi ipmitool nftables swtpm swtpm-tools osslsigncode radvd kea-dhcp6-server dhcpcd-base tpm2-tools python3-pyghmi xorriso isolinux syslinux-common mtools cryptsetup-bin nvme-cli hdparm clevis clevis-tpm2 clevis-luks jose qemu-system-arm qemu-efi-aarch64 qemu-user-static binfmt-support arch-test ca-certificates

export GOFLAGS := -buildvcs=false
# What bootops version prints: -buildvcs=false leaves the build info no
# commit, so the version comes from Git here ("dev" outside a checkout).
BUILD_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build agent microos check vet lint test e2e e2e-run browser lab-deps unit-deps demo bench fuzz clean go-check agent-arm64 microos-arm64 image image-test api-diff package package-test

build: go-check
	$(GO) build -ldflags "-X main.version=$(BUILD_VERSION)" -o $(BIN) ./cmd/bootops

# The agent is static (it runs in the Micro-OS, with no libc) and built
# reproducibly: the same source gives the same binary, so the same initrd.
agent: go-check
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -buildid=" -o $(AGENT) ./cmd/bootops-agent

# The agent for 64-bit ARM machines' Micro-OS (docs/arm64.md).
agent-arm64: go-check
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -trimpath -ldflags "-s -w -buildid=" -o $(AGENT)-arm64 ./cmd/bootops-agent

# An arm64 Micro-OS from Debian's arm64 packages (unpacked, not installed:
# test/arm64/root.sh), into sites/microos/arm64/.
ARM64_ROOT ?= $(HOME)/.cache/bootops/arm64
microos-arm64: build agent-arm64 lab-deps
	bash test/arm64/root.sh $(ARM64_ROOT) >/dev/null
	$(BIN) microos build --arch arm64 --root $(ARM64_ROOT)/root --kernel "$$(ls $(ARM64_ROOT)/root/boot/vmlinuz-* | sort -V | tail -1)" --agent $(AGENT)-arm64 -o sites/microos/arm64

# The default Micro-OS from Debian's kernel, into sites/microos/ (the demo
# repository's MicroOS object points there).
microos: build agent lab-deps
	$(BIN) microos build --kernel "$$(ls /boot/vmlinuz-* | sort -V | tail -1)" --agent $(AGENT) -o sites/microos

# Go itself is the one thing a target cannot install from Debian at the
# version go.mod needs; say so plainly instead of failing obscurely.
go-check:
	@command -v $(GO) >/dev/null || { echo "make: Go is required (see go.mod for the version)"; exit 1; }

lab-deps:
	@bash test/deps.sh $(LAB_DEBS)

# What the unit tests run besides Go: busybox (the Micro-OS's /init), the
# boot media's tools and loaders (package media).
UNIT_DEBS := busybox-static xorriso isolinux syslinux-common mtools shim-signed grub-efi-amd64-signed systemd-boot-efi binutils fdisk
unit-deps:
	@bash test/deps.sh $(UNIT_DEBS)

# The daemon's packages run under the race detector; the rest as they are.
MODULE    := github.com/bootops/bootops
RACE_DIRS := agent boot daemon hub power reconciler sitecluster swarm
RACE_PKGS := $(foreach d,$(RACE_DIRS),./$(d)/...)
empty :=
space := $(empty) $(empty)
OTHER_PKGS = $$($(GO) list ./... | grep -v -E '^$(MODULE)/($(subst $(space),|,$(RACE_DIRS)))(/|$$)')
# Each build tag with the packages that have files behind it.
VET_TAGS := e2e:./test/e2e e2e,edgebench:./test/e2e e2e,fdebench:./test/e2e e2e,erasebench:./test/e2e e2e,armbench:./test/e2e e2e:./test/redfishvm e2e:./test/ovmfvars e2e:./boot/dhcp6 e2e:./boot/floatip browser:./test/browser image:./packaging/image \
	package:./test/package swtpm:./tpm swtpm:./boot/agentapi ipmi:./daemon
STATICCHECK_VERSION := v0.8.2
STATICCHECK := .cache/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck
# The end-to-end tests run side by side (each in namespaces of its own),
# their VMs within the run's VM slots (test/e2e/slots_test.go; -parallel 40
# puts every test in its line at once, so the longest go first); -v prints
# each one's time. The timeouts leave wide margins: a warm run
# takes a fraction of them.
E2E_FLAGS := -count=1 -tags e2e -timeout 74m -parallel 40 -v

# The inner loop: what a change must pass before it is pushed.
check: go-check unit-deps lint
	$(GO) test -count=1 -race -short -timeout 15m ./...

vet: go-check
	$(GO) vet ./...
	@set -e; for tp in $(VET_TAGS); do echo "$(GO) vet -tags $${tp%%:*} $${tp#*:}"; $(GO) vet -tags $${tp%%:*} $${tp#*:}; done

# staticcheck, pinned, built once from the module proxy into .cache/tools;
# with every build tag's files too.
lint: vet $(STATICCHECK)
	$(STATICCHECK) ./...
	@set -e; for tp in $(VET_TAGS); do echo "staticcheck -tags $${tp%%:*} $${tp#*:}"; $(STATICCHECK) -tags $${tp%%:*} $${tp#*:}; done

$(STATICCHECK): | go-check
	GOBIN=$(CURDIR)/$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# The Debian test images (amd64: 13–21 min on a fresh machine; then arm64)
# start first, in the background and niced, one after the other: they are
# ready when the end-to-end tests need them.
test: go-check lab-deps
	@mkdir -p .cache; if [ "$$(id -u)" = 0 ]; then echo "the Debian test images: building (or cached) in the background, log in .cache/debian-image.log"; \
		(nice -n 10 bash -c 'bash test/image/cached.sh; bash test/image/cached.sh arm64' > .cache/debian-image.log 2>&1 &); fi
	@$(MAKE) --no-print-directory check
	$(GO) test -count=1 -race -timeout 30m $(RACE_PKGS)
	$(GO) test -count=1 -race -tags ipmi -timeout 10m -run IPMI ./daemon
	$(GO) test -count=1 -timeout 30m $(OTHER_PKGS)
	$(GO) test -count=1 -tags browser -timeout 20m ./test/browser
	$(GO) test -count=1 -tags swtpm -timeout 10m -run Swtpm ./tpm ./boot/agentapi
	$(GO) test -count=1 -tags e2e -timeout 10m -run 'Dhclient|Dhcpcd' ./boot/dhcp6
	$(GO) test -count=1 -tags e2e -timeout 5m ./boot/floatip
	@$(MAKE) --no-print-directory package-test
	@$(MAKE) --no-print-directory image-test
	@$(MAKE) --no-print-directory e2e-run

# The dashboard in headless Chromium (1,000 simulated nodes on a real
# daemon); screenshots and timings go to test/browser/out/.
browser: go-check lab-deps
	$(GO) test -count=1 -tags browser -timeout 10m -v ./test/browser

e2e: go-check lab-deps
	@$(MAKE) --no-print-directory e2e-run

# The VM tests, then a table of each one's time (slowest first), so growth
# shows before it breaks CI, and why each failed test failed, so the end of
# a CI log says it; the run's status is the tests'.
e2e-run:
	@mkdir -p .cache; set -o pipefail; \
	$(GO) test $(E2E_FLAGS) ./test/e2e ./test/redfishvm ./test/ovmfvars 2>&1 | tee .cache/e2e.log; status=$$?; \
	bash test/e2e/summary.sh .cache/e2e.log; \
	exit $$status

# The Debian package out/bootops_<version>_amd64.deb (docs/install.md): the
# version from `git describe --tags --always` unless VERSION=… is given; the
# same commit gives the same bytes (file times: the commit's, or SOURCE_DATE_EPOCH).
package: go-check
	$(GO) run ./packaging/cmd/mkdeb -o out $(if $(VERSION),-version $(VERSION))

# Install it on a clean Debian bookworm (mmdebstrap, cached in
# ~/.cache/bootops/mmdebstrap): files, user, units, serve and hub from their
# ExecStart, upgrade, remove, purge, lintian, systemd-analyze (root).
package-test: go-check
	@bash test/deps.sh mmdebstrap lintian
	$(GO) test -count=1 -tags package -timeout 20m -v ./test/package

# The container image (docs/container.md): static bootops and agent, Debian's
# boot binaries, CA certificates, no shell; stamped with the commit's time,
# so the same commit gives the same digest. Written to out/image/.
IMAGE_DEBS := ipxe shim-signed grub-efi-amd64-signed ca-certificates

image: go-check agent
	@bash test/deps.sh $(IMAGE_DEBS)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -buildid=" -o bin/image/bootops ./cmd/bootops
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) $(GO) run ./packaging/image/mkimage \
		-bootops bin/image/bootops -agent $(AGENT) -o out/image \
		-version $$(git describe --tags --always) -revision $$(git rev-parse HEAD)

# The image built twice (one digest), checked, and run with podman (root).
image-test: go-check
	@bash test/deps.sh $(IMAGE_DEBS) podman runc
	$(GO) test -count=1 -tags image -timeout 20m -v ./packaging/image

# The HTTP API's breaking changes since BASE (default: where this branch
# left origin/main, else the previous commit); exit 1 when there is one.
BASE ?= $(shell git merge-base HEAD origin/main 2>/dev/null || echo HEAD~1)
api-diff: go-check
	$(GO) run ./api/cmd/apidiff -base $(BASE) api/openapi.json

demo: build agent lab-deps
	@bash test/demo.sh

bench: build
	@bash test/bench/compile.sh
	@bash test/bench/gitops.sh
	@bash test/bench/import.sh
	@bash test/bench/wan.sh
	@bash test/bench/edge.sh
	@bash test/bench/fde.sh
	@bash test/bench/erase.sh
	@bash test/bench/cluster.sh
	$(GO) run ./test/fleet/sim -bootops $(BIN) -nodes 1000 -concurrency 100 -rounds 2
	@bash test/bench/goals.sh

fuzz: go-check
	@FUZZTIME=$(FUZZTIME) bash test/fuzz.sh

clean:
	rm -rf bin out .cache
