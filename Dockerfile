# mlaserve container image (docs/deployment.md).
#
#   docker build -t mlaserve:0.1.0 .                      CUDA image (the default target)
#   docker build --target cpu -t mlaserve:0.1.0-cpu .     CPU-only image, Debian bookworm
#
# The build stages run the same scripts as CI (scripts/bootstrap.sh, scripts/build.sh); the
# runtime stages carry only the binary, the shared libraries it links, and the embedded
# default model (scripts/stage-runtime.sh lays them out).
#
# Build arguments: CUDA_VERSION, UBUNTU_VERSION (the CUDA images' base), CUDA_ARCHITECTURES
# (CMAKE_CUDA_ARCHITECTURES, e.g. 90a or "80;90a"), DEBIAN_RELEASE (the CPU image).

ARG CUDA_VERSION=12.6.3
ARG UBUNTU_VERSION=24.04
ARG DEBIAN_RELEASE=bookworm

# ---- CPU-only: build on Debian --------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE} AS build-cpu
ENV DEBIAN_FRONTEND=noninteractive
# The source sits at the same path in every stage: the default model's path is compiled in.
WORKDIR /opt/mlaserve
COPY scripts/bootstrap.sh scripts/
RUN scripts/bootstrap.sh --build-only
COPY . .
RUN scripts/build.sh -DCMAKE_BUILD_TYPE=Release -DMLASERVE_BUILD_TESTS=OFF \
      -DMLASERVE_ENABLE_CUDA=OFF \
 && scripts/stage-runtime.sh build /stage

# ---- CPU-only runtime ------------------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE}-slim AS cpu
COPY --from=build-cpu /stage/ /
RUN ldconfig \
 && groupadd --system --gid 10001 mlaserve \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin mlaserve
USER 10001:10001
EXPOSE 50051 8000 9400
ENTRYPOINT ["mlaserve"]

# ---- CUDA: build on the CUDA development image ---------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu${UBUNTU_VERSION} AS build
ARG CUDA_ARCHITECTURES=90a
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /opt/mlaserve
COPY scripts/bootstrap.sh scripts/
RUN scripts/bootstrap.sh --build-only
COPY . .
RUN scripts/build.sh -DCMAKE_BUILD_TYPE=Release -DMLASERVE_BUILD_TESTS=OFF \
      -DMLASERVE_ENABLE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" \
 && scripts/stage-runtime.sh build /stage

# ---- CUDA runtime (the default target) -------------------------------------------------------
# The `base` flavor: the CUDA runtime the binary needs is linked statically or staged with it.
FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu${UBUNTU_VERSION} AS cuda
COPY --from=build /stage/ /
RUN ldconfig \
 && groupadd --system --gid 10001 mlaserve \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin mlaserve
USER 10001:10001
EXPOSE 50051 8000 9400
ENTRYPOINT ["mlaserve"]
