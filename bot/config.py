"""Bot configuration: `crewagent.yml` + CLI flags + environment, validated once at start-up.

Secrets only ever come from the environment. Every problem is reported as
"<file>: <key>: <reason>" so a bad deploy fails fast and says what to fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from crewagent.core.api.checkout import CheckoutSpec, ForgeSettings, GitSettings, scrub
from crewagent.core.api.errors import CrewError
from crewagent.core.api.runs import ModelChoice
from crewagent.core.api.tools import CommandsConfig, McpServerConfig, SystemToolPolicy
from crewagent.core.api.runs import Budgets

from .config_problems import problem_lines

DEFAULT_API_URL = "https://slack.com/api/"
DEFAULT_HOST = "0.0.0.0"  # HTTP mode listens on every interface unless told otherwise
EXAMPLE_PACKAGES = ("create-story-micro", "hello-branch", "multi-workflows")
REPO_ROOT = Path(__file__).resolve().parent.parent
DATABASE_ENV = "CREWAGENT_DATABASE_URL"
WORKERS_REMOVED = (
    "workers: is no longer supported; run several `crewagent serve` replicas over one Postgres "
    "database instead (database_url:, see docs/replicas-docker.md)"
)


class ConfigError(CrewError):
    def __init__(self, problems: list[str]) -> None:
        # One line (`error: FILE: KEY: reason; FILE: KEY: reason`), as every command-line error is.
        super().__init__("CONFIG_INVALID", "; ".join(problems), {"problems": problems})
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)  # docstrings: `crewagent config schema`


class Binding(_Strict):
    """A project and the packages offered for it.

    The project is a folder (`project`: a plain folder or a git clone) or a git URL the bot clones
    into its runtime home (`repo`). In a git repository every run gets its own worktree on a
    branch made from `branch` (default: the remote's default branch); `auto_push` pushes a
    completed run's branch without waiting for the Commit & push click.
    """

    project: Path | None = None
    """The project folder (a plain folder or a git clone); relative paths are read from the file's folder."""
    repo: str | None = None
    """A git URL the bot clones into CREWAGENT_HOME/checkouts/ (instead of `project`)."""
    branch: str | None = None
    """Git projects: the base branch runs start from (default: the remote's default branch)."""
    auto_push: bool = False
    """Git projects: push a completed run's branch without waiting for the Commit & push click."""
    packages: list[Path] = Field(default_factory=list)
    """Package folders or .bmad files offered in this channel (default: the top-level `packages`)."""

    @model_validator(mode="after")
    def _one_source(self) -> Binding:
        if self.project is not None and self.repo is not None:
            raise ValueError("give either project (a folder) or repo (a git URL), not both")
        if self.project is None and self.repo is None:
            raise ValueError("give project (a folder) or repo (a git URL)")
        return self

    def checkout_spec(self) -> CheckoutSpec:
        return CheckoutSpec(project=self.project, repo=self.repo, branch=self.branch, auto_push=self.auto_push)


class GitOptions(_Strict):
    """Git projects: time limits, worktree clean-up, and who commits (default: the Slack user)."""

    timeout: float = Field(default=120.0, gt=0)  # seconds for one git command (clone, fetch, push…)
    """Seconds one git command (clone, fetch, push…) may take."""
    worktree_retention_hours: float = Field(default=72.0, ge=0)  # completed runs' worktrees are removed after
    """Hours after a completed run's last change before its worktree is removed (its branch is kept)."""
    author_name: str | None = None  # commit author for every delivery instead of the Slack user's profile
    """Commit author for every delivery, instead of the Slack user's profile."""
    author_email: str | None = None
    """Commit author's e-mail for every delivery, instead of the Slack user's profile."""

    def settings(self) -> GitSettings:
        return GitSettings(timeout=self.timeout, retention_hours=self.worktree_retention_hours)


class Limits(_Strict):
    max_concurrent_runs: int = Field(default=8, ge=1)
    """Runs the model works on at once (across all replicas together); others wait their turn."""
    max_turns_without_progress: int = Field(default=40, ge=1)
    """A run that makes no progress for this many model turns fails (the runaway guard)."""
    max_turns_per_input: int = Field(default=400, ge=1)
    """Model turns one input may start before the run stops for the user."""
    status_update_interval: float = Field(default=1.0, ge=0)  # seconds between edits of one status message
    """Seconds between two redraws of one run's plan message."""
    # All chat.update calls together: chat.update is Tier 3 (about 50 per minute per workspace, with
    # bursts). 0.67 per second plus a burst of 10 stays within 50 in any minute; two thirds of the burst
    # are kept for what people must read (a reply's final text, Paused / Failed / Completed).
    status_edits_per_second: float = Field(default=0.67, gt=0)
    """Average rate of all chat.update calls together (Slack Tier 3: about 50 a minute)."""
    status_edit_burst: int = Field(default=10, ge=1)
    """chat.update calls allowed in a burst; two thirds are kept for what people must read."""
    stream_flush_interval: float = Field(default=1.0, ge=0)  # seconds between appends to one streamed reply
    """Seconds between two appends to one streamed reply."""
    status_line_interval: float = Field(default=2.0, ge=0)  # seconds between status-line changes of one thread
    """Seconds between two status-line changes in one thread."""
    status_lines_per_second: float = Field(default=1.5, gt=0)  # all status-line calls together
    """Rate of all status-line calls together."""
    # Seconds in-flight turns get on SIGTERM/SIGINT; with the rest of shutdown the process ends within
    # 5 s (well inside a container runtime's default 10 s grace). What is cut off stays resumable.
    shutdown_grace: float = Field(default=3.0, ge=0)
    """Seconds in-flight turns get on SIGTERM or Ctrl-C; what is cut off stays resumable."""
    run_token_budget: int | None = Field(default=None, ge=1)  # model tokens a run may use before it pauses
    """Model tokens a run may use before it pauses (default: no limit)."""
    home_refresh_interval: float = Field(default=10.0, ge=0)  # seconds between refreshes of one Home tab
    """Seconds between two refreshes of one person's Home tab."""


class ModelCalls(_Strict):
    """`llm:` in crewagent.yml. Unset keys fall back to CREWAGENT_LLM_TIMEOUT / CREWAGENT_LLM_RETRIES /
    CREWAGENT_LLM_STREAM, then to the defaults (60 s per attempt, 2 retries, streamed answers)."""

    timeout_seconds: float | None = Field(default=None, gt=0)  # per attempt
    """Seconds one model call may take (default: CREWAGENT_LLM_TIMEOUT, else 60)."""
    max_retries: int | None = Field(default=None, ge=0)  # attempts after the first
    """Attempts after a failed model call (default: CREWAGENT_LLM_RETRIES, else 2)."""
    stream: bool | None = None  # False: ask for whole answers (an endpoint that cannot stream)
    """false asks for whole answers, for an endpoint that cannot stream (default: CREWAGENT_LLM_STREAM, else true)."""


class Access(_Strict):
    allowed_channels: list[str] = Field(default_factory=list)
    """Channel ids the bot may be used in (empty: every channel it is in)."""
    allowed_users: list[str] = Field(default_factory=list)
    """User ids who may use the bot (empty: everyone in the workspace)."""
    admins: list[str] = Field(default_factory=list)
    """User ids who may act in every thread and see every run on the Home tab."""


class SlackSettings(BaseModel):
    bot_token: SecretStr | None = None
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    api_url: str = DEFAULT_API_URL

    @property
    def mode(self) -> Literal["socket", "http"] | None:
        """Socket Mode with an app token; HTTP with a signing secret; None if neither works."""
        if not self.bot_token:
            return None
        if self.app_token:
            return "socket"
        if self.signing_secret:
            return "http"
        return None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SlackSettings:
        def secret(name: str) -> SecretStr | None:
            value = env.get(name, "").strip()
            return SecretStr(value) if value else None

        api_url = env.get("SLACK_API_URL", "").strip() or DEFAULT_API_URL
        return cls(
            bot_token=secret("SLACK_BOT_TOKEN"),
            app_token=secret("SLACK_APP_TOKEN"),
            signing_secret=secret("SLACK_SIGNING_SECRET"),
            api_url=api_url if api_url.endswith("/") else api_url + "/",  # slack_sdk joins with urljoin
        )


class FileConfig(_Strict):
    """The shape of crewagent.yml (all keys optional)."""

    project: Path | None = None
    """The default binding's project folder (a plain folder or a git clone); --project and CREWAGENT_PROJECT win."""
    repo: str | None = None
    """The default binding as a git URL the bot clones into CREWAGENT_HOME/checkouts/ (instead of `project`)."""
    branch: str | None = None
    """Git projects: the base branch runs start from (default: the remote's default branch)."""
    auto_push: bool = False
    """Git projects: push a completed run's branch without waiting for the Commit & push click."""
    packages: list[Path] | None = None
    """Package folders or .bmad files offered by default; --package wins."""
    channels: dict[str, Binding] = Field(default_factory=dict)
    """Per-channel bindings, keyed by channel id: each its own project (or repo) and packages."""
    git: GitOptions = Field(default_factory=GitOptions)
    """Git projects: time limits, worktree clean-up and the commit author."""
    forge: ForgeSettings | None = None
    """Git projects: open a pull request after each Commit & push (GitHub's REST API; the token from `${VAR}`)."""
    model: str | None = None
    """The model name the endpoint serves (default: CREWAGENT_MODEL)."""
    models: ModelChoice | None = None
    """The models a thread may switch between with `*model NAME`: `{default: NAME, allowed: [NAMES]}`."""
    llm: ModelCalls = Field(default_factory=ModelCalls)
    """How model calls are made: time limit, retries, streaming."""
    limits: Limits = Field(default_factory=Limits)
    """Runs at once, runaway guards, Slack call rates, token budget."""
    tool_policy: SystemToolPolicy = Field(default_factory=SystemToolPolicy)
    """Which tools models get and how much a read or write may move."""
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)  # Claude Desktop's `mcpServers` shape
    """MCP servers whose tools agents may use, keyed by server name (the `mcpServers` shape of Claude Desktop, VS Code and Cursor)."""
    commands: CommandsConfig | None = None
    """Listing it turns the shell_run tool on: the command policy and the sandbox (docs/commands.md)."""
    access: Access = Field(default_factory=Access)
    """Who may use the bot, where, and who administers it."""
    budgets: Budgets = Field(default_factory=Budgets)
    """Daily model-token budgets per Slack user and per channel (none by default); see docs/operations.md."""
    metrics: bool = True
    """Serve GET /metrics (Prometheus' text format) on the HTTP port beside /healthz; false: no metrics are kept."""
    resume_on_start: bool = True
    """Resume the runs a stopped bot left in flight when it starts again."""
    log_level: str = "INFO"
    """DEBUG, INFO, WARNING or ERROR; DEBUG also logs tracebacks of expected failures."""
    database_url: str | None = None  # postgresql://… shared by replicas (also CREWAGENT_DATABASE_URL)
    """postgresql://… shared by replicas (also CREWAGENT_DATABASE_URL); default: the embedded store, one process."""
    lease_seconds: float = Field(default=3.0, gt=0)  # a dead replica's threads are taken over after this
    """Seconds after which another replica takes over the threads of one that stopped beating."""
    host: str = Field(default=DEFAULT_HOST, min_length=1)  # HTTP mode's listening address
    """The address the HTTP port listens on (--host wins); 127.0.0.1 behind a proxy on the same host."""


class BotConfig(BaseModel):
    """Everything `bot.serve.app.build` needs, paths absolute."""

    default: Binding
    channels: dict[str, Binding] = Field(default_factory=dict)
    model: str | None = None
    models: ModelChoice | None = None  # `*model`'s choices; None: only `model`
    llm: ModelCalls = Field(default_factory=ModelCalls)
    limits: Limits = Field(default_factory=Limits)
    tool_policy: SystemToolPolicy = Field(default_factory=SystemToolPolicy)  # `servers`: the mcp_servers names
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    access: Access = Field(default_factory=Access)
    budgets: Budgets = Field(default_factory=Budgets)
    metrics: bool = True  # GET /metrics (bot.metrics)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    home: Path | None = None  # CREWAGENT_HOME; None = the RuntimeStore default
    git: GitOptions = Field(default_factory=GitOptions)
    forge: ForgeSettings | None = None  # None: Commit & push stops at the pushed branch
    resume_on_start: bool = True
    log_level: str = "INFO"
    database_url: str | None = None  # None: the embedded store under `home`, one process
    lease_seconds: float = Field(default=3.0, gt=0)
    host: str = DEFAULT_HOST  # the address HTTP mode listens on

    def binding_name(self, channel: str) -> str:
        return channel if channel in self.channels else "default"

    def binding(self, name: str) -> Binding:
        return self.channels.get(name, self.default)

    def bindings(self) -> dict[str, Binding]:
        return {"default": self.default, **self.channels}


def example_packages(cwd: Path) -> list[Path]:
    """The bundled example packages that exist, looked up under ./examples then the repo's examples/."""
    for base in (cwd / "examples", REPO_ROOT / "examples"):
        found = [base / name for name in EXAMPLE_PACKAGES if (base / name / "bmad.json").is_file()]
        if found:
            return found
    return []


def read_file_config(path: Path) -> FileConfig:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{source}: cannot read the file ({exc.strerror or exc})"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([f"{source}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: (top level): expected a mapping of keys, got {type(data).__name__}"])
    if "workers" in data:
        raise ConfigError([f"{source}: {WORKERS_REMOVED}"])
    try:
        return FileConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problem_lines(source, exc, FileConfig)) from None


def _absolute(path: Path, base: Path) -> Path:
    path = path.expanduser()
    return (path if path.is_absolute() else base / path).resolve()


def load_config(
    *,
    config_path: str | Path | None = None,
    project: str | Path | None = None,
    packages: Sequence[str | Path] = (),
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    host: str | None = None,
) -> BotConfig:
    """Merge file, flags and environment; flags win over the file's default binding."""
    env = os.environ if env is None else env
    cwd = (cwd or Path.cwd()).resolve()
    file_cfg, file_base, source = FileConfig(), cwd, "command line"
    if config_path is not None:
        path = _absolute(Path(config_path), cwd)
        file_cfg, file_base, source = read_file_config(path), path.parent, str(path)

    default_project, default_repo, problems = _default_source(project, file_cfg, cwd, file_base, source)
    default_packages = _default_packages(packages, file_cfg, cwd, file_base)
    channels = _channel_bindings(file_cfg, file_base, default_packages)
    source_key = {"repo": default_repo} if default_repo is not None else {"project": default_project or cwd}
    default = Binding(**source_key, branch=file_cfg.branch, auto_push=file_cfg.auto_push, packages=default_packages)
    problems += _binding_problems(source, default, channels, project_flag=project is not None)
    database_url, database_problems = _database_url(source, file_cfg, env)
    problems += database_problems + forge_problems(source, file_cfg, env) + _model_problems(source, file_cfg)
    problems += mcp_problems(source, file_cfg.mcp_servers, env) + commands_problems(source, file_cfg, env)
    if problems:
        raise ConfigError(problems)

    home_text = env.get("CREWAGENT_HOME", "").strip()
    if config_path is not None:
        file_cfg = with_hidden_paths(file_cfg, _absolute(Path(config_path), cwd), home_text)
    return BotConfig(
        default=default,
        channels=channels,
        model=_default_model(file_cfg, env), models=file_cfg.models,  # `*model`'s choices, the first its default
        llm=file_cfg.llm,
        limits=file_cfg.limits,
        tool_policy=tool_policy_of(file_cfg),
        mcp_servers=file_cfg.mcp_servers,
        access=file_cfg.access,
        budgets=file_cfg.budgets,
        metrics=file_cfg.metrics,
        slack=SlackSettings.from_env(env),
        home=Path(home_text).expanduser() if home_text else None,
        git=file_cfg.git, forge=file_cfg.forge,
        resume_on_start=file_cfg.resume_on_start,
        log_level=file_cfg.log_level,
        database_url=database_url,
        lease_seconds=file_cfg.lease_seconds,
        host=host.strip() if host and host.strip() else file_cfg.host,
    )


def _default_model(file_cfg: FileConfig, env: Mapping[str, str]) -> str | None:
    """`models.default`, else `model`, else CREWAGENT_MODEL."""
    if file_cfg.models is not None:
        return file_cfg.models.default
    return file_cfg.model or env.get("CREWAGENT_MODEL", "").strip() or None


def _model_problems(source: str, file_cfg: FileConfig) -> list[str]:
    """`model` and `models.default` naming two different models."""
    models, model = file_cfg.models, file_cfg.model
    if models is not None and model and model != models.default:
        return [f"{source}: model: '{model}' differs from models.default '{models.default}'; give one of them"]
    return []


def _default_source(
    project: str | Path | None, file_cfg: FileConfig, cwd: Path, file_base: Path, source: str
) -> tuple[Path | None, str | None, list[str]]:
    """The default binding's folder or repository: the --project flag, else the file's, else the cwd."""
    if project is not None:
        return _absolute(Path(project), cwd), None, []
    if file_cfg.project is not None and file_cfg.repo is not None:
        return None, None, [f"{source}: project: give either project (a folder) or repo (a git URL), not both"]
    if file_cfg.project is not None:
        return _absolute(file_cfg.project, file_base), None, []
    if file_cfg.repo is not None:
        return None, file_cfg.repo, []
    return cwd, None, []


def _default_packages(packages: Sequence[str | Path], file_cfg: FileConfig, cwd: Path, file_base: Path) -> list[Path]:
    """The --package flags, else the file's packages, else the bundled examples."""
    if packages:
        return [_absolute(Path(p), cwd) for p in packages]
    if file_cfg.packages:
        return [_absolute(p, file_base) for p in file_cfg.packages]
    return example_packages(cwd)


def _channel_bindings(file_cfg: FileConfig, file_base: Path, default_packages: list[Path]) -> dict[str, Binding]:
    """The `channels:` bindings with absolute paths; a channel without packages gets the default ones."""
    return {
        channel: b.model_copy(
            update={
                "project": _absolute(b.project, file_base) if b.project is not None else None,
                "packages": [_absolute(p, file_base) for p in b.packages] or default_packages,
            }
        )
        for channel, b in file_cfg.channels.items()
    }


def _binding_problems(
    source: str, default: Binding, channels: Mapping[str, Binding], *, project_flag: bool
) -> list[str]:
    """Project folders and packages that do not exist, or a binding without packages."""
    problems = []
    for name, binding in {"(default)": default, **channels}.items():
        where = "--project" if name == "(default)" and project_flag else (
            "project" if name == "(default)" else f"channels.{name}.project"
        )
        if binding.project is not None and not binding.project.is_dir():
            problems.append(f"{source}: {where}: project directory {binding.project} does not exist")
        if not binding.packages:
            key = "packages" if name == "(default)" else f"channels.{name}.packages"
            problems.append(
                f"{source}: {key}: no packages; pass --package PATH (a package directory or .bmad file)"
            )
        for pkg in binding.packages:
            if not pkg.exists():
                problems.append(f"{source}: packages: {pkg} does not exist")
    return problems


def _database_url(source: str, file_cfg: FileConfig, env: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """The file's database_url, else CREWAGENT_DATABASE_URL; it must be a postgresql:// URL."""
    database_url = file_cfg.database_url or env.get(DATABASE_ENV, "").strip() or None
    if database_url and not database_url.startswith(("postgresql://", "postgres://")):
        key = "database_url" if file_cfg.database_url else DATABASE_ENV
        where = source if file_cfg.database_url else "environment"
        return database_url, [f"{where}: {key}: must start with postgresql://"]
    return database_url, []


def mcp_problems(source: str, servers: Mapping[str, McpServerConfig], env: Mapping[str, str]) -> list[str]:
    """Server names that cannot name tools, and `${VAR}`s the environment does not set (values never shown)."""
    return [f"{source}: mcp_servers.{name}: {problem}" for name, problem in McpServerConfig.problems_of(servers, env)]


def forge_problems(source: str, file_cfg: FileConfig, env: Mapping[str, str]) -> list[str]:
    """`forge.token`'s `${VAR}` when the environment does not set it (its value is never shown)."""
    return [f"{source}: forge.{problem}" for problem in (file_cfg.forge.problems(env) if file_cfg.forge else [])]


def commands_problems(source: str, file_cfg: FileConfig, env: Mapping[str, str]) -> list[str]:
    if file_cfg.commands is None:
        return []
    return [f"{source}: commands.env: ${{{var}}} is not set in the environment"
            for var in file_cfg.commands.missing_variables(env)]


def tool_policy_of(file_cfg: FileConfig) -> SystemToolPolicy:
    """`tool_policy` with the configured MCP servers (MCP is on when any is listed, unless switched off)
    and `commands:` (shell_run is offered only when it is there)."""
    return file_cfg.tool_policy.model_copy(update={"servers": tuple(file_cfg.mcp_servers), "commands": file_cfg.commands})


def with_hidden_paths(file_cfg: FileConfig, config_file: Path, home: str) -> FileConfig:
    """What no agent may see, by command or file tool, even inside its project: this file (database
    password, command policy), the runtime home. Set with or without `commands:`."""
    hidden = tuple(p for p in (str(config_file), home) if p)
    return file_cfg.model_copy(update={"tool_policy": file_cfg.tool_policy.model_copy(update={"hidden": hidden})})


def terminal_config(config_path: str | Path, env: Mapping[str, str] | None = None) -> FileConfig:
    """crewagent.yml for `crewagent run` / `chat`: the same file, checked the same way (MCP keys included)."""
    env = os.environ if env is None else env
    path = _absolute(Path(config_path), Path.cwd())
    file_cfg = read_file_config(path)
    problems = mcp_problems(str(path), file_cfg.mcp_servers, env) + commands_problems(str(path), file_cfg, env)
    if problems:
        raise ConfigError(problems)
    return with_hidden_paths(file_cfg, path, env.get("CREWAGENT_HOME", "").strip())


def describe(config: BotConfig) -> dict[str, Any]:
    """A log-safe summary (no secrets)."""
    return {
        "mode": config.slack.mode,
        "api_url": config.slack.api_url,
        "model": config.model,
        "bindings": {
            name: {
                "project": str(b.project) if b.project is not None else None,
                "repo": scrub(b.repo) if b.repo else None,
                "packages": [p.name for p in b.packages],
            }
            for name, b in config.bindings().items()
        },
        "max_concurrent_runs": config.limits.max_concurrent_runs,
        "mcp_servers": {name: s.transport for name, s in config.mcp_servers.items()},  # names only: values may be secret
        "store": "postgres" if config.database_url else "embedded",
        "host": config.host,
    }
