# fleetdb developer entry points. Every target builds what it needs itself.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO ?= go
TOOLS := $(GO) tool -modfile=tools/go.mod
CONTROLLER_GEN := $(TOOLS) controller-gen
CRD_REF_DOCS := $(TOOLS) crd-ref-docs
GOLANGCI_LINT := $(TOOLS) golangci-lint

.PHONY: all
all: generate build

.PHONY: toolchain
toolchain: ## Build the pinned control-plane binaries (cached; prints nothing when up to date).
	@hack/toolchain.sh >/dev/null

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs and RBAC from markers, and the API reference (docs/reference/api.md).
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./apis/...
	$(CONTROLLER_GEN) crd paths=./apis/... output:crd:artifacts:config=deploy/crds
	$(CONTROLLER_GEN) rbac:roleName=fleetdb-hub paths="./hub/...;./clusters/..." output:rbac:artifacts:config=deploy/rbac
	$(CRD_REF_DOCS) --source-path=./apis/v1alpha1 --config=tools/crd-ref-docs.yaml --renderer=markdown \
	  --output-path=docs/reference/api.md --log-level=ERROR

.PHONY: build
build: ## Build everything, and bin/kubectl-fleetdb (the kubectl plugin: put bin/ on PATH).
	$(GO) build ./...
	$(GO) build -o bin/kubectl-fleetdb ./cmd/kubectl-fleetdb

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
	@test -z "$$(git status --porcelain --untracked-files=all -- apis deploy docs/reference)" || { git status --porcelain -- apis deploy docs/reference; echo "verify: untracked generated files"; exit 1; }

# NODES=real: members whose nodes run real pods and the real CloudNativePG
# operator (root, no Docker; docs/realnodes.md); default simulated (kwok).
NODES ?= simulated
.PHONY: run
run: ## The main job: start the local fleet (hub + 2 members, no Docker) and run the hub on it; NODES=real for real pods.
	FLEET_NODES=$(NODES) hack/run.sh

.PHONY: fleet-up
fleet-up: ## Start the local fleet only (NODES=real: with real nodes).
	FLEET_NODES=$(NODES) hack/fleet.sh up

.PHONY: fleet-down
fleet-down: ## Stop and remove the local fleet, its real nodes too.
	hack/fleet.sh down

# ---- real nodes: members whose node runs real pods (root, no Docker; docs/realnodes.md) ----
REALNODE_MEMBERS ?= member-1 member-2
.PHONY: realnode-tools realnode-up realnode-down realnode-check
realnode-tools: ## Build the real-node binaries and images (cached; prints nothing when up to date).
	@hack/realnode-tools.sh >/dev/null
	@hack/realnode-images.sh >/dev/null
realnode-up: ## Give each member of a running local fleet a real node (containerd, kubelet, kube-proxy) and the real CloudNativePG operator.
	for m in $(REALNODE_MEMBERS); do hack/realnode.sh up $$m && hack/realnode.sh cnpg $$m; done
realnode-down: ## Remove every real node of the local fleet, leaving nothing on the host.
	hack/realnode.sh down-all
realnode-check: ## Fail when a real node left anything on the host (processes, namespaces, links, routes, cgroups, mounts, rules).
	hack/realnode.sh check

.PHONY: test
test: toolchain ## Run every test against real control planes (builds the toolchain on first use).
	hack/test.sh

# ---- kind: a hub and two members in Docker (needs Docker; not needed by `make test`) ----
# kind itself is pinned and built from its Go module on first use; CI installs
# the same version and passes KIND=kind. KIND_VERSION must stay the version of
# sigs.k8s.io/kind in go.mod, whose default node image kind-configs/ pin.
KIND_VERSION := v0.32.0
KIND ?= $(GO) run sigs.k8s.io/kind@$(KIND_VERSION)
KUBECTL ?= kubectl
DOCKER ?= docker
IMG ?= ghcr.io/fleetdb/fleetdb-hub:latest
KIND_OUT := _output/kind
KIND_HUB := fleetdb-hub
KIND_MEMBERS := member-1 member-2
KIND_MEMBER_LABELS := fleetdb.io/sample=true,fleetdb.io/fleet=kind

.PHONY: kind-up
kind-up: ## Create the kind hub and members, install the CRDs on the hub, the CloudNativePG operator (the release pinned in test/tools/cnpg/go.mod, its manifest from the module) in the members, and join the members.
	@mkdir -p $(KIND_OUT)
	for c in hub $(KIND_MEMBERS); do \
	  name=$$(sed -n 's/^name: *//p' kind-configs/$$c.yaml); \
	  if $(KIND) get clusters 2>/dev/null | grep -qx "$$name"; then \
	    $(KIND) export kubeconfig --name "$$name" --kubeconfig $(KIND_OUT)/$$c.kubeconfig; \
	  else \
	    $(KIND) create cluster --config kind-configs/$$c.yaml --kubeconfig $(KIND_OUT)/$$c.kubeconfig --wait 180s; \
	  fi; \
	done
	$(KUBECTL) --kubeconfig $(KIND_OUT)/hub.kubeconfig apply --server-side -k deploy/crds
	$(KUBECTL) --kubeconfig $(KIND_OUT)/hub.kubeconfig wait --for=condition=Established --timeout=60s \
	  crd/databases.fleetdb.io crd/memberclusters.fleetdb.io
	$(GO) build -o bin/kubectl-fleetdb ./cmd/kubectl-fleetdb
	hack/cnpg.sh operator >$(KIND_OUT)/cnpg-operator.yaml
	for m in $(KIND_MEMBERS); do \
	  $(KUBECTL) --kubeconfig $(KIND_OUT)/$$m.kubeconfig apply --server-side --force-conflicts -f $(KIND_OUT)/cnpg-operator.yaml >/dev/null && \
	  $(KUBECTL) --kubeconfig $(KIND_OUT)/$$m.kubeconfig -n cnpg-system rollout status deployment/cnpg-controller-manager --timeout=300s || exit 1; \
	done
	for m in $(KIND_MEMBERS); do \
	  sc=$$($(KUBECTL) --kubeconfig $(KIND_OUT)/$$m.kubeconfig get storageclass \
	    -o jsonpath='{range .items[?(@.metadata.annotations.storageclass\.kubernetes\.io/is-default-class=="true")]}{.metadata.name}{end}'); \
	  test -n "$$sc" || { echo "kind-up: $$m has no default StorageClass (kind ships local-path 'standard')"; exit 1; }; \
	  name=$$(sed -n 's/^name: *//p' kind-configs/$$m.yaml); \
	  bin/kubectl-fleetdb join $$m \
	    --member-kubeconfig $(KIND_OUT)/$$m.kubeconfig --hub-kubeconfig $(KIND_OUT)/hub.kubeconfig \
	    --server https://$$name-control-plane:6443 --labels $(KIND_MEMBER_LABELS) --all-namespaces --wait=false || exit 1; \
	done

.PHONY: kind-load
kind-load: ## Build the hub image and load it into the kind hub.
	$(DOCKER) build -t $(IMG) .
	$(KIND) load docker-image $(IMG) --name $(KIND_HUB)

# kind-deploy runs $(IMG) and restarts the hub: a re-loaded image keeps its tag.
.PHONY: kind-deploy
kind-deploy: ## Deploy the hub (deploy/hub) to the kind hub and wait for it and the members.
	$(KUBECTL) --kubeconfig $(KIND_OUT)/hub.kubeconfig apply --server-side --force-conflicts -k deploy/hub
	$(KUBECTL) --kubeconfig $(KIND_OUT)/hub.kubeconfig -n fleetdb-system set image deployment/fleetdb-hub hub=$(IMG)
	$(KUBECTL) --kubeconfig $(KIND_OUT)/hub.kubeconfig -n fleetdb-system rollout restart deployment/fleetdb-hub
	$(KUBECTL) --kubeconfig $(KIND_OUT)/hub.kubeconfig -n fleetdb-system rollout status deployment/fleetdb-hub --timeout=180s
	$(KUBECTL) --kubeconfig $(KIND_OUT)/hub.kubeconfig wait --for=condition=Ready --timeout=180s membercluster --all

.PHONY: kind-e2e
kind-e2e: ## Run the e2e suite against the kind fleet.
	FLEETDB_E2E_HUB_KUBECONFIG=$(CURDIR)/$(KIND_OUT)/hub.kubeconfig \
	FLEETDB_E2E_MEMBER_KUBECONFIGS=$$(for m in $(KIND_MEMBERS); do printf '%s=%s,' $$m $(CURDIR)/$(KIND_OUT)/$$m.kubeconfig; done | sed 's/,$$//') \
	FLEETDB_E2E_HUB_NAMESPACE=fleetdb-system \
	  $(GO) test -count=1 -timeout 70m ./test/e2e/... -args -fleet=kind

.PHONY: kind-down
kind-down: ## Delete the kind clusters.
	for c in hub $(KIND_MEMBERS); do \
	  $(KIND) delete cluster --name "$$(sed -n 's/^name: *//p' kind-configs/$$c.yaml)"; \
	done
	rm -rf $(KIND_OUT)

# ---- chaos (a program, not a test: it runs its own fleet; docs/reports/chaos.md) ----
CHAOS_ARGS ?=

.PHONY: chaos
chaos: toolchain ## Restart chaos: kill and restart the hub at random points of a random workload for 100 cycles and check the fleet (CHAOS_ARGS="-seed 42 -cycles 20").
	$(GO) build -o bin/fleetdb-chaos ./test/chaos/cmd/fleetdb-chaos
	bin/fleetdb-chaos $(CHAOS_ARGS)

# ---- benchmark (a program, not a test: it runs its own fleet; docs/reports/benchmarks.md) ----
BENCH_ARGS ?=

.PHONY: bench
bench: toolchain ## Fleet benchmark: fleetdb against a direct-apply floor on a local fleet of its own (BENCH_ARGS="-members 3 -burst 30").
	$(GO) build -o bin/fleetdb-bench ./test/bench
	bin/fleetdb-bench $(BENCH_ARGS)

SCALE_ARGS ?=

.PHONY: bench-scale
bench-scale: toolchain ## Scale mode of the bench: a fleet per member count, grown to 100/500/1,000 Databases; JSON, then plots with scaleplot (docs/reports/scale.md; SCALE_ARGS="-scale-members 1,5 -scale-databases 100,500").
	$(GO) build -o bin/fleetdb-bench ./test/bench
	bin/fleetdb-bench -scale $(SCALE_ARGS)
