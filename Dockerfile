# The portal image: one image, four roles (web, worker, beat, watcher) chosen by the command.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DATA_DIR=/var/lib/portal \
    GUNICORN_BIND=0.0.0.0:8000
WORKDIR /app
COPY pyproject.toml README.md ./
COPY portal ./portal
COPY quotas ./quotas
COPY scheduling ./scheduling
COPY lab ./lab
COPY notifications ./notifications
COPY observability ./observability
COPY workloads ./workloads
COPY engine ./engine
COPY simulator ./simulator
COPY billing ./billing
COPY csvsafe ./csvsafe
COPY templates ./templates
COPY manage.py ./
RUN pip install --no-cache-dir . \
 && useradd --system --uid 10001 --home /var/lib/portal portal \
 && mkdir -p /var/lib/portal && chown portal /var/lib/portal \
 && SECRET_KEY=build-only-not-secret-000000000000000000 python manage.py collectstatic --noinput
USER 10001
EXPOSE 8000
# portal/gunicorn_conf.py: 3 workers on :8000, and Prometheus multiprocess mode so /metrics sums the workers.
CMD ["gunicorn", "-c", "python:portal.gunicorn_conf", "portal.wsgi:application"]
