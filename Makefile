# fleetdb developer entry points. Every target builds what it needs itself.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO ?= go
TOOLS := $(GO) tool -modfile=tools/go.mod
CONTROLLER_GEN := $(TOOLS) controller-gen
GOLANGCI_LINT := $(TOOLS) golangci-lint

.PHONY: all
all: generate build

.PHONY: toolchain
toolchain: ## Build the pinned control-plane binaries (cached; prints nothing when up to date).
	@hack/toolchain.sh >/dev/null

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs and RBAC from markers.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./apis/...
	$(CONTROLLER_GEN) crd paths=./apis/... output:crd:artifacts:config=deploy/crds

.PHONY: build
build:
	$(GO) build ./...

.PHONY: vet
vet:
	$(GO) vet ./...

.PHONY: lint
lint: ## Run the pinned golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: generate ## Fail when generated files or go.mod/go.sum are not up to date.
	$(GO) mod tidy
	git diff --exit-code -- . ':(exclude)test/tools' || { echo "verify: the tree is not generated-clean (run make generate / go mod tidy and commit)"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- apis deploy)" || { git status --porcelain -- apis deploy; echo "verify: untracked generated files"; exit 1; }

.PHONY: test
test: toolchain ## Run every test against real control planes (builds the toolchain on first use).
	KUBEBUILDER_ASSETS="$$(hack/toolchain.sh)" $(GO) test -count=1 -timeout 40m ./...
