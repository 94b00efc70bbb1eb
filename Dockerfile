# syntax=docker/dockerfile:1
# The fleetdb hub image: a static binary on distroless, running as non-root.
#
#   docker build -t ghcr.io/fleetdb/fleetdb-hub:dev .
FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# Dependencies first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w" -o /fleetdb-hub ./cmd/fleetdb-hub

FROM gcr.io/distroless/static:nonroot
COPY --from=build /fleetdb-hub /fleetdb-hub
USER 65532:65532
ENTRYPOINT ["/fleetdb-hub"]
