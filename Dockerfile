# sluice serve in a container: a static binary (no cgo) on distroless's
# static image, which has no shell and no package manager, run as its
# nonroot user (uid 65532).
#
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 -p 8081:8081 sluice --config /etc/ratelimit --store redis://redis:6379/0
#
# Arguments after the image name are serve's flags (sluice serve --help);
# the default CMD listens on every interface, an empty configuration over
# memory. `--envoy-env` reads envoyproxy/ratelimit's environment instead.
# cmd/sluice's container_test.go builds the binary with the `go build` line
# below, read from this file, and runs it from an empty directory with an
# empty environment.

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
EXPOSE 8080 8081
ENTRYPOINT ["/sluice", "serve"]
CMD ["--grpc", "0.0.0.0:8081", "--http", "0.0.0.0:8080"]
