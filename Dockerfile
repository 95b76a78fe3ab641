# dlqctl in a container (the exporter's image: deploy/kubernetes/).
#   docker build -t dlqctl .
#   docker run --rm -p 9797:9797 -e DLQCTL_SERVER=http://queen:6632 dlqctl exporter
# One static binary (CGO off: the SQLite ledger is pure Go) on a base with
# nothing else in it, run as a non-root user.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/dlqctl/dlqctl/internal/build.Version=${VERSION}" \
    -o /out/dlqctl ./cmd/dlqctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dlqctl /usr/local/bin/dlqctl
# The default SQLite ledger lives under $XDG_STATE_HOME: a writable place
# for a container that has no home. Point DLQCTL_LEDGER at the team's
# shared PostgreSQL ledger in production.
ENV XDG_STATE_HOME=/tmp/state XDG_CONFIG_HOME=/etc
EXPOSE 9797
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/dlqctl"]
CMD ["exporter"]
