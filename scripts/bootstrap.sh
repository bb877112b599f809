#!/usr/bin/env bash
# Installs the build and test dependencies from Debian packages. Idempotent and quiet when
# everything is already present. Needs root or sudo for the install step only.
#
#   scripts/bootstrap.sh               everything: build, tests, deployment-manifest checks
#   scripts/bootstrap.sh --build-only  only what compiling needs (the container image's build
#                                      stage; configure it with -DMLASERVE_BUILD_TESTS=OFF)
#   scripts/bootstrap.sh --fuzz        everything, plus clang and its libFuzzer and sanitizer
#                                      runtimes (scripts/fuzz.sh)
# MLASERVE_BOOTSTRAP=build-only (or fuzz) in the environment does the same as the flag.
set -euo pipefail

mode=${MLASERVE_BOOTSTRAP:-all}
for arg in "$@"; do
  case "$arg" in
    --build-only) mode=build-only ;;
    --fuzz) mode=fuzz ;;
    *) echo "bootstrap: unknown argument $arg (--build-only or --fuzz)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev nlohmann-json3-dev libbenchmark-dev libboost-dev
  libboost-context-dev
)
if [ "$mode" != build-only ]; then
  packages+=(
    libgtest-dev libgmock-dev
    python3 python3-numpy python3-torch python3-grpcio python3-protobuf
    python3-yaml python3-jinja2 yamllint prometheus
    qemu-user  # emulated_cpus_test: the CPU kernels as an AVX2-only and a pre-AVX processor
  )
  # kubectl renders the Kubernetes manifests (kubectl kustomize); Debian ships it as
  # kubernetes-client. A kubectl already on PATH is kept.
  if ! command -v kubectl >/dev/null 2>&1; then packages+=(kubernetes-client); fi
  # The OpenAI-client integration test runs the official `openai` npm package under node
  # (tests/integration/openai/install.sh). A node already on PATH is kept.
  if ! command -v node >/dev/null 2>&1; then packages+=(nodejs); fi
  if ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi
fi
if [ "$mode" = fuzz ]; then
  packages+=(clang libclang-rt-dev libomp-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "bootstrap: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
