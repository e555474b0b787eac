# One image for every computeall service; docker-compose.yml picks the service per container.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY computeall computeall
COPY libs libs
COPY services services
COPY cli cli
COPY examples examples
# torch first and pinned, so the project install cannot pull another build
RUN pip install --no-cache-dir torch==2.13.0 \
 && pip install --no-cache-dir .
ENV COMPUTEALL_DATA_DIR=/data
VOLUME /data
ENTRYPOINT ["python", "-m"]
