# Everything a user or CI needs: `make build`, `make run`, `make test`. A fresh machine needs only Go
# (and apt, for the optional dig in `make run`'s hints); the control-plane binaries are built from
# the Go module proxy once and cached outside the clone, keyed by version.

SHELL := /bin/bash
GO    ?= go
# Every go command here builds as the binaries are built (static, -trimpath): vet, the tests and
# the tools then share one compile of each package, where cgo and full paths by default made the
# vet and test phases compile the whole dependency graph a second time (523 s of a cold make
# test's vet). No test needs cgo in process; the cgo build of the lookup helper says so itself.
export CGO_ENABLED := 0
export GOFLAGS     := $(if $(filter -trimpath,$(GOFLAGS)),$(GOFLAGS),-trimpath $(GOFLAGS))

# The build's version, one per commit, sorting as SemVer after every release before it: a release
# tag vX.Y.Z on a clean work tree gives X.Y.Z; any other commit the next minor release after
# CHANGELOG.md's latest, as a pre-release counted by the commits of its history, with the commit (and
# .dirty when the work tree has changes) as build metadata: 0.2.0-dev.<n>+g<commit>[.dirty]. It names
# the chart and the CLI's version; the image's tag and label values, where + is not allowed, have _.
RELEASED := $(shell awk '$$1 == "##" && $$2 ~ /^[0-9]+[.][0-9]+[.][0-9]+$$/ {print $$2; exit}' docs/CHANGELOG.md)
NEXT     := $(shell echo '$(RELEASED)' | awk -F. '{print $$1 "." $$2 + 1 ".0"}')
VERSION ?= $(shell dirty=$$(git diff --quiet HEAD 2>/dev/null || echo .dirty); \
	v=$$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null) && [ -z "$$dirty" ] && echo "$${v#v}" || \
	echo "$(NEXT)-dev.$$(git rev-list --count HEAD 2>/dev/null || echo 0)+g$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$dirty")
LDFLAGS := -s -w -X github.com/coredns/coredns/coremain.GitCommit=$(VERSION)
# The image `make image` builds, and the one bin/linkerd-global renders by default: a build of the
# CLI renders the image of the same commit (make build image IMAGE_REPO=registry.example.com/x).
IMAGE_REPO ?= ghcr.io/globaldns/coredns-global
IMAGE_TAG  ?= $(subst +,_,$(VERSION))
IMAGE      ?= $(IMAGE_REPO):$(IMAGE_TAG)
# The CLI's check warns of a Kubernetes outside K8S_TESTED (below; hence = not :=).
CLI_LDFLAGS = -s -w -X main.version=$(VERSION) -X main.image=$(IMAGE) -X "main.kubernetesTested=$(K8S_TESTED)"

# The pinned control plane: versions come from the tool modules' go.mod files. `make test-k8s
# K8S=1.30.14` builds another Kubernetes release's the same way, from a module generated beside its
# binaries (KUBE_MODULE), and runs the integration suite against it.
K8S_PINNED   := $(shell awk '$$1 == "require" && $$2 == "k8s.io/kubernetes" {print $$3}' test/controlplane/kube/go.mod)
K8S_VERSION  ?= $(K8S_PINNED)
ETCD_VERSION := $(shell awk '$$1 == "require" && $$2 == "go.etcd.io/etcd/server/v3" {print $$3}' test/controlplane/etcd/go.mod)
CACHE_HOME   := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)
# The tools are linked without a symbol table or DWARF, as their own releases are (Kubernetes'
# hack/lib/golang.sh since kubernetes#108371, Helm's Makefile): nothing here debugs them, so their
# links need not write DWARF (a cold control plane's build: 296 to 309 s, within run-to-run noise).
TOOL_LDFLAGS := -s -w
# The Kubernetes binaries report their release, as released builds do (/version: Helm checks a
# chart's kubeVersion against it); "_r2" in the cache key is that recipe.
K8S_MINOR    := $(word 2,$(subst ., ,$(K8S_VERSION)))
K8S_LDFLAGS  := $(TOOL_LDFLAGS) -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) -X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=$(K8S_MINOR) -X k8s.io/component-base/version.gitTreeState=clean
CONTROLPLANE ?= $(CACHE_HOME)/globaldns/controlplane/kubernetes-$(K8S_VERSION)_etcd-$(ETCD_VERSION)_r2
KUBE_MODULES := $(CACHE_HOME)/globaldns/controlplane/modules
KUBE_MODULE  := $(if $(filter $(K8S_PINNED),$(K8S_VERSION)),test/controlplane/kube,$(KUBE_MODULES)/kube-$(K8S_VERSION))
# promtool checks and unit-tests deploy/monitoring's alerting rules; pinned like the control plane,
# built without the cloud service discoveries (remove_all_sd): 1.5 minutes cold instead of 8.
PROM_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/prometheus/prometheus" {print $$3}' test/tools/promtool/go.mod)
PROMTOOL     ?= $(CACHE_HOME)/globaldns/tools/promtool-$(PROM_VERSION)/promtool
# Helm 3 and 4, which the chart's tests lint, render and install it with; pinned likewise.
HELM3_VERSION := $(shell awk '$$1 == "require" && $$2 == "helm.sh/helm/v3" {print $$3}' test/tools/helm3/go.mod)
HELM4_VERSION := $(shell awk '$$1 == "require" && $$2 == "helm.sh/helm/v4" {print $$3}' test/tools/helm4/go.mod)
HELM3 ?= $(CACHE_HOME)/globaldns/tools/helm-$(HELM3_VERSION)/helm
HELM4 ?= $(CACHE_HOME)/globaldns/tools/helm-$(HELM4_VERSION)/helm

# The tests and the demo find the binaries through these.
export GLOBAL_CONTROLPLANE_BIN := $(CONTROLPLANE)
export GLOBAL_KUBE_VERSION     := $(K8S_VERSION)
export GLOBAL_COREDNS_BIN      := $(CURDIR)/bin/coredns
export GLOBAL_CLI_BIN          := $(CURDIR)/bin/linkerd-global
export GLOBAL_IMAGE_TAR        := $(CURDIR)/bin/coredns-global.oci.tar
export GLOBAL_PROMTOOL_BIN     := $(PROMTOOL)
export GLOBAL_HELM3_BIN        := $(HELM3)
export GLOBAL_HELM4_BIN        := $(HELM4)

TEST_TIMEOUT ?= 45m

.PHONY: all build version image-tag image release release-files previous controlplane promtool helm test testbins testbuild test-k8s integration unit run dig dnsperf bench soak hunt vet fuzz clean help
all: build

help:
	@echo "make build         build bin/coredns (CoreDNS $(shell awk '$$1 == "github.com/coredns/coredns" {print $$2}' go.mod) + global) and bin/linkerd-global (the Linkerd extension CLI)"
	@echo "make version       print this build's version ($(VERSION)); make image-tag its image's tag ($(IMAGE_TAG))"
	@echo "make image         build $(IMAGE) for linux/amd64 and linux/arm64 into bin/coredns-global.oci.tar"
	@echo "make release       write the release of this build into $(RELEASE_DIR) and check it (docs/releasing.md)"
	@echo "make test-k8s K8S=1.30.14  run the integration suite against another Kubernetes release's control plane"
	@echo "make run           demo: local control plane + bin/coredns on 127.0.0.1:1053"
	@echo "make test          vet, unit and integration tests (builds the control plane, Helm and promtool once)"
	@echo "make fuzz          run every fuzz target for FUZZTIME (default $(FUZZTIME)) each"
	@echo "make hunt          play random histories against the README's oracle for HUNT (default $(HUNT))"
	@echo "make bench         measure against CoreDNS's own plugins; writes docs/benchmarks.md"
	@echo "make helm          build Helm $(HELM3_VERSION) and $(HELM4_VERSION) into $(CACHE_HOME)/globaldns/tools"
	@echo "make promtool      build promtool $(PROM_VERSION) (Prometheus) into $(PROMTOOL)"
	@echo "make controlplane  build etcd $(ETCD_VERSION), kube-apiserver, kube-controller-manager, kube-scheduler and kubectl $(K8S_VERSION) into $(CONTROLPLANE)"

# bin/linkerd-global, the Linkerd extension CLI (`linkerd global`), is a module of its own
# (deploy/linkerd-global): Helm's rendering libraries and cobra stay out of the plugin's build. Its
# version is the plugin's build string, so `linkerd global check` can compare the two, and it renders
# IMAGE, the image of its own commit.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/coredns ./coredns
	cd deploy/linkerd-global && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(CLI_LDFLAGS)' -o $(GLOBAL_CLI_BIN) .

# The version, and the image's tag (the version with _ for +), for commands: helm upgrade ...
# --set image.tag=$$(make -s image-tag).
version:
	@echo $(VERSION)
image-tag:
	@echo $(IMAGE_TAG)

# The image, without Docker: deploy/image (a module of its own) puts the two static builds into a
# multi-arch OCI image layout tarball, reproducibly (every timestamp is SOURCE_DATE_EPOCH, by
# default the commit's time). docker load, podman load, kind load image-archive and ctr import
# take it as it is.
# Tagged VERSION, every commit's image has a name of its own, so an upgrade changes the pod
# template and rolls.
IMAGE_SOURCE      ?= https://github.com/globaldns/global
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# bin/oci-image is the builder, which TestImage runs again to check that it is reproducible.
export GLOBAL_IMAGE_BUILDER := $(CURDIR)/bin/oci-image
# The image's architectures and a release's CLI platforms. make test builds and checks the
# linux/amd64 ones alone (the others are cross-compiles of everything, about a quarter of a cold
# make test each); make release builds every one and checks them (TestRelease, TestImage).
IMAGE_ARCHS   ?= amd64 arm64
CLI_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
export GLOBAL_IMAGE_ARCHS   = $(IMAGE_ARCHS)
export GLOBAL_CLI_PLATFORMS = $(CLI_PLATFORMS)
image:
	for arch in $(IMAGE_ARCHS); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/coredns-linux-$$arch ./coredns || exit 1; \
	done
	cd deploy/image && $(GO) build -o $(GLOBAL_IMAGE_BUILDER) .
	SOURCE_DATE_EPOCH=$(or $(SOURCE_DATE_EPOCH),0) $(GLOBAL_IMAGE_BUILDER) -tag '$(IMAGE)' -o $(GLOBAL_IMAGE_TAR) \
		$(foreach a,$(IMAGE_ARCHS),-$(a) $(CURDIR)/bin/coredns-linux-$(a)) \
		-source '$(IMAGE_SOURCE)' -revision '$(shell git rev-parse HEAD 2>/dev/null)' -version '$(VERSION)'

# The previous release, which the upgrade and version-skew tests (TestUpgradeRollback, TestCLIPathBack)
# install before this build and run beside it: its bin/coredns and its CLI, built from its commit as
# its `make build` built them, and its source (its chart). Bump both when a release is made
# (docs/releasing.md).
PREVIOUS_VERSION := 0.1.0
PREVIOUS_COMMIT  := f162abc64b896c9435f267f9b97995cdef133b19
PREVIOUS_DIR     := $(CURDIR)/bin/previous-$(PREVIOUS_VERSION)
export GLOBAL_PREVIOUS_DIR     := $(PREVIOUS_DIR)
export GLOBAL_PREVIOUS_VERSION := $(PREVIOUS_VERSION)
previous: $(PREVIOUS_DIR)/coredns $(PREVIOUS_DIR)/linkerd-global

$(PREVIOUS_DIR)/coredns:
	rm -rf $(PREVIOUS_DIR) && mkdir -p $(PREVIOUS_DIR)/src
	git cat-file -e $(PREVIOUS_COMMIT)^{commit} 2>/dev/null || git fetch --depth=1 origin $(PREVIOUS_COMMIT)
	git archive $(PREVIOUS_COMMIT) | tar -x -C $(PREVIOUS_DIR)/src
	cd $(PREVIOUS_DIR)/src && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X github.com/coredns/coredns/coremain.GitCommit=$(PREVIOUS_VERSION)' -o $@.tmp ./coredns
	mv $@.tmp $@

$(PREVIOUS_DIR)/linkerd-global: $(PREVIOUS_DIR)/coredns
	cd $(PREVIOUS_DIR)/src/deploy/linkerd-global && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.version=$(PREVIOUS_VERSION)' -o $@.tmp .
	mv $@.tmp $@

KUBE_TOOLS := kube-apiserver kube-controller-manager kube-scheduler kubectl
controlplane: $(CONTROLPLANE)/etcd $(addprefix $(CONTROLPLANE)/,$(KUBE_TOOLS))

# Each tool is built from its own small module (k8s.io/kubernetes cannot be `go install`ed), to a
# temporary name first so an interrupted build never leaves a broken binary in the cache.
$(CONTROLPLANE)/etcd:
	@mkdir -p $(@D)
	cd test/controlplane/etcd && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(TOOL_LDFLAGS)' -o $@.tmp go.etcd.io/etcd/server/v3
	mv $@.tmp $@

# The Kubernetes tools in one go build: their links overlap the compiles of each other's packages.
$(addprefix $(CONTROLPLANE)/,$(KUBE_TOOLS)) &: | $(KUBE_MODULE)/go.mod
	@rm -rf $(CONTROLPLANE)/.build && mkdir -p $(CONTROLPLANE)/.build
	cd $(KUBE_MODULE) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o $(CONTROLPLANE)/.build/ \
		$(addprefix k8s.io/kubernetes/cmd/,$(KUBE_TOOLS))
	cd $(CONTROLPLANE)/.build && mv $(KUBE_TOOLS) .. && rmdir $(CONTROLPLANE)/.build

# Another release's module: the pinned one's tools.go, and a go.mod requiring that k8s.io/kubernetes
# with each staging module its replace block points at ./staging/src replaced by the published
# v0.<minor>.<patch> (as test/controlplane/kube/go.mod does for the pinned release).
$(KUBE_MODULES)/kube-%/go.mod:
	@mkdir -p $(@D)
	cp test/controlplane/kube/tools.go $(@D)/tools.go
	cd $(@D) && gomod=$$($(GO) mod download -json k8s.io/kubernetes@$* | awk -F'"' '$$2 == "GoMod" {print $$4}') && \
	test -n "$$gomod" && { printf 'module globaltest/controlplane/kube\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' $*; \
		awk -v v=$(subst v1.,v0.,$*) '$$2 == "=>" && $$3 ~ /^\.\/staging\// {print "\t" $$1 " => " $$1 " " v}' "$$gomod"; echo ')'; } > go.mod.tmp && \
	mv go.mod.tmp go.mod && $(GO) mod tidy

# cyclonedx-gomod, CycloneDX's SBOM generator for Go, which `make release` runs; pinned likewise.
CYCLONEDX_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/CycloneDX/cyclonedx-gomod" {print $$3}' test/tools/cyclonedx/go.mod)
CYCLONEDX         ?= $(CACHE_HOME)/globaldns/tools/cyclonedx-gomod-$(CYCLONEDX_VERSION)/cyclonedx-gomod

$(CYCLONEDX):
	@mkdir -p $(@D)
	cd test/tools/cyclonedx && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(TOOL_LDFLAGS)' -o $@.tmp github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod
	mv $@.tmp $@

# A release, into RELEASE_DIR: the image archive, the coredns binaries in it, the chart packaged for
# this build (its version, and this image by default), linkerd-global for linux and darwin on amd64
# and arm64, an SBOM of each binary (cyclonedx-gomod), CHANGELOG.md's section of the version and
# SHA256SUMS; then checked as an operator receives it (TestRelease, TestImage: the tests start a
# control plane, so the first release on a machine builds it). Made from a release tag vX.Y.Z, it
# is release X.Y.Z (docs/releasing.md); from any other commit, a snapshot of it with CHANGELOG.md's
# Unreleased section. release-files writes it unchecked: make test writes and checks one of the
# linux/amd64 platforms alone, in bin/test-release.
RELEASE_DIR ?= bin/release/$(VERSION)
export GLOBAL_RELEASE_DIR = $(abspath $(RELEASE_DIR))
release: release-files controlplane
	$(GO) test -count=1 -run '^(TestRelease|TestImage)$$' ./test/integration
	@echo "release $(VERSION) in $(RELEASE_DIR), checked"

release-files: image $(HELM4) $(CYCLONEDX)
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	cp $(GLOBAL_IMAGE_TAR) $(RELEASE_DIR)/coredns-global-$(VERSION).oci.tar
	for arch in $(IMAGE_ARCHS); do cp bin/coredns-linux-$$arch $(RELEASE_DIR)/coredns-$(VERSION)-linux-$$arch || exit 1; done
	for p in $(CLI_PLATFORMS); do \
		(cd deploy/linkerd-global && CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags '$(CLI_LDFLAGS)' \
			-o $(abspath $(RELEASE_DIR))/linkerd-global-$(VERSION)-$${p%/*}-$${p#*/} .) || exit 1; \
	done
	$(GO) run ./deploy/release -dir $(RELEASE_DIR) -version $(VERSION) -image $(IMAGE) -helm $(HELM4) -cyclonedx $(CYCLONEDX)

helm: $(HELM3) $(HELM4)

$(HELM3) $(HELM4):
	@mkdir -p $(@D)
	cd test/tools/helm$(if $(filter $(HELM3),$@),3,4) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(TOOL_LDFLAGS)' -o $@.tmp \
		helm.sh/helm/v$(if $(filter $(HELM3),$@),3,4)/cmd/helm
	mv $@.tmp $@

promtool: $(PROMTOOL)

$(PROMTOOL):
	@mkdir -p $(@D)
	cd test/tools/promtool && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(TOOL_LDFLAGS)' -tags remove_all_sd -o $@.tmp github.com/prometheus/prometheus/cmd/promtool
	mv $@.tmp $@

vet:
	@unformatted=$$(gofmt -l coredns plugin test deploy); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd deploy/image && $(GO) vet ./...
	cd deploy/linkerd-global && $(GO) vet ./...

# make test builds what the tests run (release-files builds the image first; of linux/amd64
# alone, in bin/test-release), then runs them, each phase timed: the times are printed at the end
# (and kept in bin/test-phases). Tests marked t.Parallel run TEST_PARALLEL at a time: the
# integration suite's mostly wait on processes (test/integration/main_test.go says which may run
# beside others). vet runs beside the tests, at nice 19: the suite leaves the cores idle for about
# a third of its run (mostly at its end, when only its longest tests are left; sampled from
# /proc/stat), which vet's analysis, 78 s of a cold make test run before the tests, now fills;
# its failure fails make test at the end, with its output.
TEST_PHASES   := build release-files previous controlplane helm promtool testbins testbuild dig
TEST_PARALLEL ?= 8
PHASES_LOG    := $(CURDIR)/bin/test-phases
VET_LOG       := $(CURDIR)/bin/vet.log
timed = (s=$$(date +%s); $(2); rc=$$?; echo "$(1): $$(( $$(date +%s) - s )) s" >> $(PHASES_LOG); exit $$rc)
# make test, and the suite run alone after it or for another Kubernetes, check the release of
# linux/amd64 that make test builds.
test integration test-k8s: IMAGE_ARCHS   := amd64
test integration test-k8s: CLI_PLATFORMS := linux/amd64
test integration test-k8s: RELEASE_DIR   := bin/test-release/$(VERSION)
test:
	@mkdir -p bin && : > $(PHASES_LOG)
	@for p in $(TEST_PHASES); do $(call timed,make $$p,$(MAKE) --no-print-directory $$p IMAGE_ARCHS='$(IMAGE_ARCHS)' \
		CLI_PLATFORMS='$(CLI_PLATFORMS)' RELEASE_DIR='$(RELEASE_DIR)') || exit 1; done
	@command -v dig >/dev/null || { echo "the tests send queries with dig -b: install Debian's bind9-dnsutils"; exit 1; }
	@$(call timed,make vet (beside the tests),nice -n 19 $(MAKE) --no-print-directory vet >$(VET_LOG) 2>&1) & vet=$$!; rc=0; \
	$(call timed,go test ./...,$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) ./...) || rc=1; \
	$(call timed,go test deploy/image,cd deploy/image && $(GO) test -count=1 ./...) || rc=1; \
	$(call timed,go test deploy/linkerd-global,cd deploy/linkerd-global && $(GO) test -count=1 ./...) || rc=1; \
	wait $$vet || { sed 's/^/vet: /' $(VET_LOG); echo "make vet failed (its output above, kept in $(VET_LOG))"; rc=1; }; \
	echo "make test's phases:"; sed 's/^/  /' $(PHASES_LOG); exit $$rc

# Every test binary compiled (run by /bin/true), so that the tests then run on a machine no
# compiler competes for: on a cold cache, test binaries compiling beside the running integration
# suite stalled its replicas past the 2 s the tests that count failed queries allow.
testbuild:
	$(GO) test -count=1 -exec /bin/true ./... >/dev/null
	cd deploy/image && $(GO) test -count=1 -exec /bin/true ./... >/dev/null
	cd deploy/linkerd-global && $(GO) test -count=1 -exec /bin/true ./... >/dev/null

# The helpers the tests run, built here so that no test runs a compiler: the resolver client of
# the short-name tests, pure Go and (where a C compiler is) cgo.
export GLOBAL_LOOKUP_BIN     := $(CURDIR)/bin/lookup
export GLOBAL_LOOKUP_CGO_BIN := $(CURDIR)/bin/lookup-cgo
testbins:
	CGO_ENABLED=0 $(GO) build -o $(GLOBAL_LOOKUP_BIN) ./test/integration/testdata/lookup
	CGO_ENABLED=1 $(GO) build -o $(GLOBAL_LOOKUP_CGO_BIN) ./test/integration/testdata/lookup || \
		{ rm -f $(GLOBAL_LOOKUP_CGO_BIN); echo "no cgo build of the lookup helper: the tests use glibc through getent only"; }

# The integration suite (and the harness's own tests) against another Kubernetes release's control
# plane, K8S=<version> from the module proxy (make test-k8s K8S=1.30.14), built once like the pinned
# one and cached beside it. The chart's kubeVersion states the oldest (docs/install.md).
K8S ?=
# The oldest and the newest Kubernetes releases make test-k8s passed with (the module proxy serves
# k8s.io/kubernetes 1.29.6 and later; 1.30 is the first with admissionregistration.k8s.io/v1): the
# chart's kubeVersion needs the oldest, docs/install.md states the range, and linkerd global check
# warns outside it (TestKubernetesRange).
K8S_TESTED := v1.30.14 v1.37.2
export GLOBAL_K8S_TESTED := $(K8S_TESTED)
test-k8s: build release-files previous helm promtool testbins dig
	@test -n "$(K8S)" || { echo "usage: make test-k8s K8S=<Kubernetes version>, e.g. K8S=1.30.14"; exit 1; }
	$(MAKE) controlplane K8S_VERSION=v$(patsubst v%,%,$(K8S))
	$(MAKE) integration K8S_VERSION=v$(patsubst v%,%,$(K8S))

# The tests under test/ alone, on what is built (TESTFLAGS='-run TestHA -v' picks and shows).
TESTFLAGS ?=
integration:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) $(TESTFLAGS) ./test/...

# The soak: TestRandomHistory's history and faults, one after another, under about 2,000 queries a second,
# for SOAK (a Go duration), reported into docs/soak.md. SOAKFLAGS passes more (-seed N).
SOAK ?= 30m
SOAKFLAGS ?=
soak: build controlplane
	$(GO) test -count=1 -timeout 0 ./test/integration -run '^TestSoak$$' -v -soak $(SOAK) -soak-out $(CURDIR)/docs/soak.md $(SOAKFLAGS)

# The hunt: TestDifferential's random histories, asked of ServeDNS and checked against the README's
# oracle (test/oracle), new seeds for HUNT (a Go duration); `make test` plays seeds 0 to 15. A
# failure prints its seed and the command that replays it.
HUNT ?= 10m
hunt:
	$(GO) test -count=1 -timeout 0 ./plugin/global -run '^TestDifferential$$' -v -differential.for $(HUNT)

# Fuzzing, each target for FUZZTIME; `make test` runs their seed corpora (testdata/fuzz) too.
FUZZTIME ?= 60s
FUZZ_TARGETS := plugin/global:FuzzServeDNS plugin/global:FuzzParse plugin/global/watch:FuzzIndex plugin/global/writer:FuzzHostnames
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "== $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test ./$$pkg -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

# unit runs only the tests that need neither the control plane nor bin/coredns.
unit:
	$(GO) test -count=1 ./plugin/... ./coredns/...

# The demo runs as a binary of its own (not `go run`) so Ctrl-C reaches it and it stops every
# process it started.
run: build controlplane dig
	$(GO) build -o bin/demo ./test/cmd/demo
	bin/demo

# The benchmarks: throughput and latency with dnsperf (installed from Debian when missing), change
# propagation, writer cost, memory at 120k records and Go micro-benchmarks, written to
# docs/benchmarks.md. BENCHFLAGS passes options through (go run ./test/bench -h lists them).
BENCHFLAGS ?=
bench: build controlplane dnsperf
	$(GO) run ./test/bench -out docs/benchmarks.md $(BENCHFLAGS)

# dnsperf drives the throughput rows, valgrind (callgrind) counts the plain names' instructions.
dnsperf:
	@command -v dnsperf >/dev/null && command -v valgrind >/dev/null || { echo "installing dnsperf and valgrind (Debian)"; \
		$(SUDO) apt-get install -y dnsperf valgrind >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update >/dev/null 2>&1 && $(SUDO) apt-get install -y dnsperf valgrind >/dev/null; }; }

# dig: `make run` suggests it (installed best-effort, the demo prints its own answers); `make test`
# needs it (TestClientRankedAnswers sends from a Node's address with dig -b).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
dig:
	@command -v dig >/dev/null || { echo "installing dig (Debian bind9-dnsutils)"; \
		$(SUDO) apt-get install -y bind9-dnsutils >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update >/dev/null 2>&1 && $(SUDO) apt-get install -y bind9-dnsutils >/dev/null 2>&1; } || \
		echo "could not install dig: the demo prints its own answers"; }

clean:
	rm -rf bin
