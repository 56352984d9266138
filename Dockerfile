# CrewAgent for Slack: `docker run -e SLACK_BOT_TOKEN -e SLACK_APP_TOKEN -e CREWAGENT_MODEL -e OPENAI_API_KEY \
#   --user "$(id -u):$(id -g)" -v /path/to/checkout:/project -v crewagent-data:/data IMAGE`
# Several replicas over one Postgres: see docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CREWAGENT_HOME=/data

# git (and ssh for SSH remotes): runs in a git checkout work in their own worktrees and push branches.
# ripgrep: fs_search uses it (and falls back to a slower Python scan without it).
RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client ripgrep \
    && rm -rf /var/lib/apt/lists/* \
    && git config --system --add safe.directory /project

WORKDIR /app
COPY pyproject.toml README.md ./
COPY core ./core
COPY bot ./bot
COPY cli ./cli
RUN pip install .
COPY examples ./examples
COPY manifest.yml ./

# /data is writable by any user the container runs as (`--user` matching the checkout's owner).
RUN useradd --create-home --uid 10001 crew \
    && mkdir -p /data /project \
    && chown crew:crew /data /project \
    && chmod 1777 /data
VOLUME ["/data"]
USER crew

# Slack events (HTTP mode) and GET /healthz (both modes).
EXPOSE 3000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=4).status != 200)"]
# serve refuses to start (and says how to fix it) when the mounted checkout is not writable.
ENTRYPOINT ["crewagent", "serve"]
# Mount the checkout the workflows work on at /project (or pass your own flags).
CMD ["--project", "/project"]
