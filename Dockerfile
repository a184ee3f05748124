# syntax=docker/dockerfile:1
#
# The dgl-operator images, from one file:
#
#   --target operator  the controller, `dgl-operator`: glibc + the binary,
#                      runs as 65532 (nonroot), no shell, no package manager.
#   --target runtime   `dglrun`, `watcher-loop` and `dgl-partition` under
#                      /usr/local/bin, to copy into training images:
#                        COPY --from=localhost/dgl-operator-runtime:0.1.0 \
#                             /usr/local/bin/dglrun /usr/local/bin/watcher-loop /usr/local/bin/
#                      It also runs watcher-loop by itself (the launcher's init
#                      container, `--watcher-image`). The binaries need glibc >= 2.36
#                      (Debian 12, Ubuntu 22.04 or newer) in the training image.
#                      `dgl-partition` (the ranks of partition mode DistParMETIS)
#                      links OpenMPI: only images for that mode copy it, and they
#                      install Debian bookworm's `openmpi-bin` (libmpi.so.40,
#                      mpirun, orted), which it was built against; dglrun itself
#                      never links MPI.
#
# With a registry (Docker/BuildKit or podman, from the repository root):
#   docker build --target operator -t localhost/dgl-operator:0.1.0 .
#   docker build --target runtime  -t localhost/dgl-operator-runtime:0.1.0 .
# compiles the binaries in the `bins-cargo` stage (rust image + crates.io).
#
# Without a registry (this project's development machines), `cargo xtask images`
# builds the binaries on the (Debian 12) host with cargo and passes them in:
#   --build-arg BINARIES=prebuilt --build-context prebuilt=<dir with the 4 binaries>
#   --build-arg DEBIAN_IMAGE=<a bookworm image it made with debootstrap>
# so no stage pulls anything. Host-built binaries link against the host's glibc,
# so the host must not be newer than DEBIAN_IMAGE (bookworm, glibc 2.36).

ARG DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim
ARG RUST_IMAGE=docker.io/library/rust:1.85-bookworm
# Where the binaries come from: "cargo" (built in a container) or "prebuilt".
ARG BINARIES=cargo

# ---- binaries compiled in a container (needs a registry for RUST_IMAGE and crates.io)
FROM ${RUST_IMAGE} AS bins-cargo
# dgl-partition's MPI transport: OpenMPI's headers, libclang for bindgen.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libopenmpi-dev libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p dgl-operator -p dglrun -p watcher-loop \
        -p dgl-partition --features dgl-partition/mpi \
 && mkdir -p /out \
 && cp target/release/dgl-operator target/release/dglrun target/release/watcher-loop \
       target/release/dgl-partition /out/

# ---- binaries compiled on the host (`--build-context prebuilt=<dir>`)
FROM scratch AS bins-prebuilt
COPY --from=prebuilt dgl-operator dglrun watcher-loop dgl-partition /out/

FROM bins-${BINARIES} AS bins

# ---- a distroless-like root: the dynamic loader, glibc, libgcc_s (what
# `ldd` lists for the Rust binaries), CA certificates if the base has them,
# and passwd/group entries for root and nonroot (65532).
FROM ${DEBIAN_IMAGE} AS cc-root
RUN set -eu; \
    mkdir -p /cc/lib/x86_64-linux-gnu /cc/lib64 /cc/etc/ssl/certs /cc/tmp /cc/home/nonroot; \
    for lib in libc.so.6 libm.so.6 libgcc_s.so.1; do \
        cp -L "/lib/x86_64-linux-gnu/$lib" /cc/lib/x86_64-linux-gnu/; \
    done; \
    cp -L /lib64/ld-linux-x86-64.so.2 /cc/lib64/; \
    if [ -f /etc/ssl/certs/ca-certificates.crt ]; then cp /etc/ssl/certs/ca-certificates.crt /cc/etc/ssl/certs/; fi; \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /cc/etc/passwd; \
    printf 'root:x:0:\nnonroot:x:65532:\n' > /cc/etc/group; \
    chown 65532:65532 /cc/home/nonroot; \
    chmod 1777 /cc/tmp

FROM scratch AS cc
COPY --from=cc-root /cc/ /
# Pods name the programs (`command: [dglrun]`), so PATH must find them.
ENV PATH=/usr/local/bin:/usr/bin:/bin

# ---- the operator
FROM cc AS operator
COPY --from=bins /out/dgl-operator /usr/local/bin/dgl-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/dgl-operator"]
CMD ["run"]

# ---- dglrun + watcher-loop (+ dgl-partition, which needs OpenMPI from the
# training image to run)
FROM cc AS runtime
COPY --from=bins /out/dglrun /out/watcher-loop /out/dgl-partition /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/watcher-loop"]
