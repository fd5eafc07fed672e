FROM python:3.11-slim
WORKDIR /app
ENV HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
# torch first, pinned, CPU build: a looser spec pulls a multi-GB CUDA build.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md NOTICE ./
# The HTTP client ships inside the server (its models declare the API's answers).
COPY clients/python clients/python
COPY agent_memory agent_memory
COPY storage storage
COPY jobs jobs
COPY serve_app serve_app
COPY cli cli
COPY cluster cluster
COPY examples examples
RUN pip install --no-cache-dir .
EXPOSE 8000
CMD ["agent-memory", "serve", "--host", "0.0.0.0"]
