# The perimeter's image: Debian's nginx (with its ssl, http_v2 and proxy modules), nothing else.
# The configuration (nginx/perimeter.conf) and the SuperLink's certificate are mounted by
# compose.perimeter.yml; the container runs as FL_UID:FL_GID (nginx needs no root for a port
# above 1024; its pid file and temporary folders go to /tmp). Build context: docker/.
#
#   docker build --network host -f docker/perimeter.Dockerfile -t beyond-averaging/perimeter:latest docker
#   (no registry: --build-arg BASE_IMAGE=local/debian-python:bookworm, see make-base.sh)
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN set -eu; export DEBIAN_FRONTEND=noninteractive; \
    apt-get update; \
    apt-get install -y --no-install-recommends nginx; \
    rm -rf /var/lib/apt/lists/*; \
    nginx -V 2>&1 | grep -q -- --with-http_ssl_module
ENTRYPOINT ["nginx"]
