# CrewAgent for Slack: `docker run -e SLACK_BOT_TOKEN -e SLACK_APP_TOKEN -e CREWAGENT_MODEL -e OPENAI_API_KEY \
#   -v /path/to/checkout:/project -v crewagent-data:/data IMAGE`
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CREWAGENT_HOME=/data

# git (and ssh for SSH remotes): runs in a git checkout work in their own worktrees and push branches.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client \
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

RUN useradd --create-home --uid 10001 crew \
    && mkdir -p /data /project \
    && chown crew:crew /data /project
VOLUME ["/data"]
USER crew

# HTTP mode listens here (Socket Mode needs no inbound port).
EXPOSE 3000
ENTRYPOINT ["crewagent", "serve"]
# Mount the checkout the workflows work on at /project (or pass your own flags).
CMD ["--project", "/project"]
