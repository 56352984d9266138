# CrewAgent for Slack: `docker run -e SLACK_BOT_TOKEN -e SLACK_APP_TOKEN -e CREWAGENT_MODEL -e OPENAI_API_KEY \
#   --user "$(id -u):$(id -g)" -v /path/to/checkout:/project -v /path/to/packages:/packages:ro \
#   [-v /path/to/crewagent.yml:/config/crewagent.yml:ro] -v crewagent-data:/data IMAGE`
# Every *.bmad file or package folder mounted under /packages is served (see docker/entrypoint.sh);
# with nothing there, the bundled example packages are.
# Several replicas over one Postgres: see docker-compose.yml.
# With `commands:` in crewagent.yml, the command sandbox needs user namespaces: add
#   --security-opt seccomp=unconfined --security-opt apparmor=unconfined (docs/commands.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CREWAGENT_HOME=/data \
    CREWAGENT_PROJECT=/project \
    CREWAGENT_PACKAGES=/packages

# git (and ssh for SSH remotes): runs in a git checkout work in their own worktrees and push branches.
# ripgrep (for fs_search) comes with `pip install` as the `ripgrep` wheel. libseccomp2: the command
# sandbox's seccomp filter.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git openssh-client libseccomp2 \
    && rm -rf /var/lib/apt/lists/* \
    && git config --system --add safe.directory /project

WORKDIR /app
COPY pyproject.toml README.md ./
COPY core ./core
COPY bot ./bot
COPY cli ./cli
COPY crewagent ./crewagent
COPY setup.py ./
RUN pip install .
COPY examples ./examples
COPY manifest.yml ./
COPY docker/entrypoint.sh /usr/local/bin/crewagent-entrypoint

# /data is writable by any user the container runs as (`--user` matching the checkout's owner).
RUN useradd --create-home --uid 10001 crew \
    && mkdir -p /data /project /packages /config \
    && chown crew:crew /data /project \
    && chmod 1777 /data
VOLUME ["/data"]
USER crew

# Slack events (HTTP mode) and GET /healthz (both modes).
EXPOSE 3000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=4).status != 200)"]
# No arguments: `crewagent serve` on CREWAGENT_PROJECT (/project) with a --package for each package under
# /packages, and --config /config/crewagent.yml when that file is mounted (or set CREWAGENT_CONFIG).
# Arguments starting with "-" are added to those (`docker run IMAGE --log-format json`); a flag given
# replaces only its own default (--project, --package, --config). Any other arguments run as a command
# (`docker run IMAGE crewagent validate /packages/team.bmad`).
# serve refuses to start (and says how to fix it) when the mounted checkout is not writable.
ENTRYPOINT ["sh", "/usr/local/bin/crewagent-entrypoint"]
