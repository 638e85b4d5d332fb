# gpupool's image: one image, a role per container (deploy/entrypoint.sh, docs/deploy.md).
#
# BASE is a Debian bookworm with python3.11 and its venv module: the public Python image by default,
# or the one scripts/image-build.sh makes from Debian's packages where no registry is reachable.
ARG BASE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE} AS builder
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# compilers for a dependency that has no wheel here; they stay in this stage
RUN apt-get update && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
# Dependencies first, from pyproject.toml and the lock alone, so that a code change reuses this layer.
# The runtime dependencies (and the k8s extra: the K8s run launcher's run pods load dagster-k8s) at
# the lock's exact versions; the lock has no hashes, so --require-hashes cannot apply. Anything
# installed that the lock does not pin, at that version, fails the build.
# A site whose PyPI is reached through a TLS-inspecting proxy passes its CA bundle as the build
# secret pip_ca (scripts/image-build.sh: PIP_CA_BUNDLE); it is never stored in a layer.
COPY pyproject.toml requirements.lock ./
RUN --mount=type=secret,id=pip_ca if [ -f /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
 && python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['k8s']))" > /tmp/runtime.txt \
 && pip install -r /tmp/runtime.txt -c requirements.lock \
 && ! pip freeze | grep -ivxFf requirements.lock
COPY . .
# Editable: the code finds models/ beside its packages (pipelines/paths.py), so /app is the tree it
# runs from. The dbt manifest is prepared here, once, so that no container parses (or writes) at start.
RUN --mount=type=secret,id=pip_ca if [ -f /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
 && pip install --no-deps -e . \
 && python -c "from pipelines.resources.dbt import prepared_project; prepared_project()" \
 && rm -rf models/logs

FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive
# WeasyPrint (the review pack's PDF) draws with Pango; Noto CJK gives the Chinese pack its glyphs
RUN apt-get update && apt-get install -y --no-install-recommends \
      ca-certificates libpango-1.0-0 libpangoft2-1.0-0 fonts-noto-cjk \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/gpupool --shell /usr/sbin/nologin gpupool \
 && mkdir -p /data/gpupool /opt/dagster/home \
 && chown -R gpupool:gpupool /data /opt/dagster/home
COPY --from=builder /opt/venv /opt/venv
# root-owned and read-only to the service user: nothing is written into the installed tree
COPY --from=builder /app /app
COPY deploy/entrypoint.sh /usr/local/bin/gpupool-entrypoint
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 \
    GPUPOOL_HOME=/data/gpupool DAGSTER_HOME=/opt/dagster/home HOME=/home/gpupool
USER gpupool
WORKDIR /home/gpupool
# the copy kept the manifest newer than every model file: a start never re-parses
RUN python -c "from pipelines.resources.dbt import is_stale; assert not is_stale(), 'dbt manifest is stale'"
VOLUME ["/data"]
EXPOSE 3000 4000 8080 8501 8765 9464
ENTRYPOINT ["gpupool-entrypoint"]
CMD ["help"]
