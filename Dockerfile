# weir's container image: a build stage compiles weir and its plugins, the runtime stage holds
# the binary, the plugins, the trained default model (models/kjv-target.gguf) and a non-root
# user. docs/deployment.md ("Container image") describes it; scripts/build-image.sh builds
# and runs it with podman from a Debian base made locally with debootstrap.
#
#   CPU:   podman build --format docker -t weir:latest .
#   CUDA:  podman build --format docker -t weir:cuda --build-arg VARIANT=cuda .
#   run:   podman run -p 8000:8000 weir:latest                 (serves the default model)
#          podman run -p 8000:8000 -v $PWD/m.gguf:/models/m.gguf:ro weir:latest /models/m.gguf
#
# BASE_IMAGE must be Debian bookworm (the package names below are bookworm's); the build
# stage needs Debian's apt mirror, the CUDA variant NVIDIA's Debian 12 repository too.
# (--format docker keeps the HEALTHCHECK: the OCI image format has no health check field.)
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
ARG VARIANT=cpu
ARG CUDA_VERSION=12-8
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libuv1-dev node-llhttp libtomlplusplus-dev libcjson-dev libhiredis-dev \
 && if [ "$VARIANT" = cuda ]; then \
      apt-get install -y -q --no-install-recommends curl gnupg \
      && curl -fsSL -o /tmp/cuda-keyring.deb \
         https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
      && dpkg -i /tmp/cuda-keyring.deb && apt-get update -q \
      && apt-get install -y -q --no-install-recommends \
         cuda-nvcc-${CUDA_VERSION} cuda-cudart-dev-${CUDA_VERSION} cuda-cccl-${CUDA_VERSION} \
         libcublas-dev-${CUDA_VERSION}; \
    fi \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/local/cuda/bin:${PATH}
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY sdk sdk
COPY core core
COPY kernels kernels
COPY plugins plugins
COPY tools tools
COPY share share
COPY tests/CMakeLists.txt tests/CMakeLists.txt
RUN cuda=OFF; [ "$VARIANT" = cuda ] && cuda=ON; \
    cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEIR_TESTS=OFF \
          -DWEIR_CUDA=$cuda -DCMAKE_INSTALL_PREFIX=/opt/weir -DCMAKE_INSTALL_LIBDIR=lib \
 && cmake --build /build \
 && cmake --install /build

FROM ${BASE_IMAGE} AS runtime
ARG VARIANT=cpu
ARG CUDA_VERSION=12-8
ENV DEBIAN_FRONTEND=noninteractive
# Only the shared libraries weir and its CPU plugins link (llhttp and toml++ are compiled
# in; libc6 and libgcc-s1 are in every Debian base; hiredis is the redis response-cache
# plugin's). tests/container checks this list against ldd of the built binary and plugins.
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends libuv1 libcjson1 libstdc++6 libhiredis0.14 \
 && if [ "$VARIANT" = cuda ]; then \
      apt-get install -y -q --no-install-recommends curl ca-certificates \
      && curl -fsSL -o /tmp/cuda-keyring.deb \
         https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
      && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb && apt-get update -q \
      && apt-get install -y -q --no-install-recommends \
         cuda-cudart-${CUDA_VERSION} libcublas-${CUDA_VERSION}; \
    fi \
 && rm -rf /var/lib/apt/lists/* \
 && echo 'weir:x:10001:10001:weir:/var/lib/weir:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'weir:x:10001:' >> /etc/group \
 && mkdir -p /var/lib/weir && chown 10001:10001 /var/lib/weir
COPY --from=build /opt/weir /opt/weir
COPY models/kjv-target.gguf /opt/weir/share/weir/models/default.gguf
COPY etc/container/entrypoint.sh /usr/local/bin/weir-entrypoint
COPY etc/container/healthcheck.sh /usr/local/bin/weir-healthcheck
ENV PATH=/opt/weir/bin:${PATH} \
    WEIR_HOST=0.0.0.0 \
    WEIR_PORT=8000 \
    WEIR_MODEL=/opt/weir/share/weir/models/default.gguf \
    WEIR_DEVICE=${VARIANT}
# Non-root: uid 10001, no login shell, owns only its home.
USER 10001:10001
WORKDIR /var/lib/weir
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD ["/usr/local/bin/weir-healthcheck"]
ENTRYPOINT ["/usr/local/bin/weir-entrypoint"]
CMD []
