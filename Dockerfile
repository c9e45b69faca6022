# sluice serve in a container: a static binary (no cgo) on distroless's
# static image, which has no shell and no package manager, run as its
# nonroot user (uid 65532).
#
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 -p 8081:8081 -v "$PWD/examples/serve:/etc/ratelimit:ro" sluice
#
# The image listens on every interface (gRPC 8081, HTTP 8080) and reads
# its rules from the volume /etc/ratelimit (left empty: every descriptor
# is OK), over memory. Arguments after the image name are more of serve's
# flags (sluice serve --help), added to those defaults, which come from the
# environment ($SLUICE_GRPC_ADDR, $SLUICE_HTTP_ADDR, $SLUICE_CONFIG, set
# below); `--envoy-env` reads envoyproxy/ratelimit's environment instead.
# docs/serve.md#a-container has the same over Redis.
# cmd/sluice's container_test.go builds the binary with the `go build` line
# below, read from this file, and runs each `docker run` line of the docs
# as this image would run it (ENTRYPOINT, CMD, ENV, volumes and ports).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum go.work go.work.sum ./
COPY cmd/sluice/go.mod cmd/sluice/go.sum cmd/sluice/
RUN go mod download
COPY . .
WORKDIR /src/cmd/sluice
# GOFLAGS passes flags to go build: --build-arg GOFLAGS=-buildvcs=false
# where the context's .git cannot be read (a git worktree's points
# outside it).
ARG GOFLAGS
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/sluice .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
USER nonroot:nonroot
VOLUME /etc/ratelimit
ENV SLUICE_GRPC_ADDR=0.0.0.0:8081 SLUICE_HTTP_ADDR=0.0.0.0:8080 SLUICE_CONFIG=/etc/ratelimit
EXPOSE 8080 8081
ENTRYPOINT ["/sluice", "serve"]
