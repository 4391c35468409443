# syntax=docker/dockerfile:1
# KAE device plugin image: `kae-deviceplugin serve` on a slim Python base, for linux/arm64 (Kunpeng)
# and linux/amd64. The build stage turns the source tree into a wheel and installs that wheel (and
# only it, with its dependencies) into a virtual environment; the runtime stage copies just that
# environment, so no source tree, compiler or pip cache reaches the image.
#
#   docker buildx build --platform linux/arm64,linux/amd64 --build-arg VERSION=<version> \
#       -t <repo>/kae-device-plugin:<version> .
#   scripts/build-image.sh     (buildah, from a locally bootstrapped Debian base; see its header)
#   docs/image.md              (both architectures, a manifest list, pushing, offline clusters)
#
# BASE_IMAGE must provide python3 (3.11+) with the venv module. The default is the official slim
# image, whose tag is multi-arch; scripts/build-image.sh passes a debootstrapped Debian instead.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY kae_deviceplugin ./kae_deviceplugin
# grpcio and protobuf publish manylinux wheels for aarch64 and x86_64, so nothing compiles here;
# so do google-re2 and pendulum, which the `kubectl` extra (the CEL library of `kubectl kae why`,
# about 7 MiB) brings: the image carries the kubectl plugin ready to run.
# ensurepip seeds the venv with pip and (Python < 3.12) setuptools; neither is needed at run time,
# so both are removed, and the step fails if any of their files is left. VERSION (the image label)
# must be the package's own `__version__` when given: the step fails on a mismatch.
ARG VERSION=""
RUN python3 -m venv /opt/kae \
    && /opt/kae/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && wheel="$(echo /wheels/kae_deviceplugin-*.whl)" \
    && /opt/kae/bin/pip install --only-binary=:all: "${wheel}[kubectl]" \
    && /opt/kae/bin/pip uninstall --yes setuptools pip \
    && left="$(find /opt/kae/bin /opt/kae/lib/python3*/site-packages -maxdepth 1 \
        \( -name 'pip*' -o -name 'setuptools*' -o -name '_distutils_hack' \
        -o -name 'distutils-precedence.pth' \))" \
    && if [ -n "${left}" ]; then echo "left in the venv: ${left}" >&2; exit 1; fi \
    && /opt/kae/bin/kubectl-kae --version \
    && built="$(/opt/kae/bin/kae-deviceplugin --version)" \
    && echo "${built}" \
    && if [ -n "${VERSION}" ] && [ "${built##* }" != "${VERSION}" ]; then \
        echo "VERSION=${VERSION} but the package says: ${built}" >&2; exit 1; fi

FROM ${BASE_IMAGE}
# VERSION: the `__version__` literal of kae_deviceplugin/__init__.py (scripts/build-image.sh reads it).
ARG VERSION=unknown
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="kae-device-plugin" \
      org.opencontainers.image.description="Kubernetes device plugin for the Kunpeng Acceleration Engine (HPRE, SEC, ZIP)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="openFuyao"
COPY --from=build /opt/kae /opt/kae
ENV PATH=/opt/kae/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GRPC_VERBOSITY=ERROR
# Non-root by default, for `list`, `demo` and `check-config`. `serve` on a node must run as uid 0
# (with every capability dropped): the kubelet's device-plugin directory and sockets belong to
# root. The Helm chart sets that explicitly; see deploy/helm/kae-device-plugin/README.md.
USER 65532:65532
ENTRYPOINT ["kae-deviceplugin", "serve"]
