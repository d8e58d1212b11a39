# syntax=docker/dockerfile:1
#
# The dkv image: the single binary `dkv` (subcommands operator, crd, backup,
# member-init, ...) on a distroless, non-root base, built without local mode
# (`--no-default-features`: kube-local is not linked into the image) and with
# the `image` profile (Cargo.toml: fat LTO, optimized for size; its code pages
# are most of the operator's resident memory).
#
#   docker build -t ghcr.io/dkv-io/dkv:0.1.0 .
#
# Needs BuildKit (the default builder since Docker 23) for the cache mounts.

# ---- build -------------------------------------------------------------------
FROM rust:1-bookworm AS builder

# etcd-client compiles etcd's .proto files at build time. The version is the
# one Debian bookworm ships; pinning it exactly would only break on updates.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates

# Downloaded crates and compiled dependencies live in cache mounts, so a
# source change rebuilds only the workspace crates. The target directory is a
# cache, not a layer: copy the binary out in the same step.
# On x86_64 (where rustc links with LLD) the functions the operator runs from
# start-up to idle are placed first and together: its idle resident memory is
# about half (scripts/lib/image-build.sh, which bench/run.sh uses, builds the
# same way; scripts/image-symbol-order.sh regenerates the list).
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    if [ "$(uname -m)" = x86_64 ]; then \
      export RUSTFLAGS="-C link-arg=-Wl,--symbol-ordering-file=/src/crates/dkv-operator/image-symbol-order.txt -C link-arg=-Wl,--no-warn-symbol-ordering"; \
    fi \
    && cargo build --profile image --locked -p dkv-operator --no-default-features --bin dkv \
    && install -D -m 0755 target/image/dkv /out/dkv

# ---- runtime -----------------------------------------------------------------
# glibc + libgcc, no shell, no package manager; TLS is rustls (no OpenSSL).
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="dkv" \
      org.opencontainers.image.description="Kubernetes operator for etcd clusters (DistributedKV)" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=builder /out/dkv /dkv

USER 65532:65532
ENTRYPOINT ["/dkv"]
