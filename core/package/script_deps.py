"""A package's script dependencies, installed ahead of time so `uv run @pkg/…/x.py` works without network.

Commands run in a sandbox without network, and uv cannot use a read-only cache (it locks it). So the
bot, outside the sandbox and with network, resolves each script's PEP 723 dependencies with uv for
the Python the sandbox runs, and downloads the chosen wheels (hash-checked) into one shared wheel
folder. The sandbox gets that folder read-only, and variables that make uv resolve from it alone,
offline, into a throw-away cache in the sandbox's private `/tmp`. A script's wheels are fetched once
per metadata hash: a second package, or the next start, finds them ready.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from crewagent.core.base.atomic import atomic_write_bytes

from .models import Package
from .script_metadata import ScriptMetadata, ScriptMetadataError, read_script_metadata

log = logging.getLogger(__name__)

SANDBOX_WHEELS = "/opt/crewagent/script-wheels"  # where the wheel folder appears inside the sandbox
SANDBOX_UV_CACHE = "/tmp/uv-cache"  # uv's cache inside the sandbox: private, gone with the command
SCRIPT_DEPS_FOLDER = "script-deps"  # under the runtime home: the wheel folder and uv's host cache
MAX_SCRIPTS = 500
MAX_WHEEL_BYTES = 512 * 1024 * 1024
SYSTEM_PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3")
_PASSED_TO_UV = ("PATH", "HOME", "LANG", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                 "http_proxy", "https_proxy", "no_proxy")
_FROM_PIP = {"PIP_INDEX_URL": "UV_DEFAULT_INDEX", "PIP_EXTRA_INDEX_URL": "UV_INDEX", "PIP_FIND_LINKS": "UV_FIND_LINKS",
             "PIP_CERT": "SSL_CERT_FILE"}


class ScriptPrepError(Exception):
    """One script's dependencies could not be made ready; the message names no host path."""


@dataclass(frozen=True)
class ScriptsReady:
    """What the sandbox needs so a package's scripts run offline: pass both to every command's sandbox."""

    read_only: tuple[tuple[str, str], ...]  # (host folder, folder inside the sandbox), bound read-only
    env: tuple[tuple[str, str], ...]  # variables for the command's environment
    prepared: tuple[str, ...] = ()  # `@pkg/...` scripts whose dependencies are ready (or that need none)
    problems: tuple[str, ...] = ()  # one line per script that is not ready, `@pkg/...` paths only

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Script:
    alias: str
    path: Path
    meta: ScriptMetadata | None = None
    problem: str = ""


@dataclass
class _Uv:
    binary: str
    python: str
    python_version: str
    env: dict[str, str] = field(default_factory=dict)


def _uv_binary() -> str:
    """The uv binary the `uv` wheel ships (a dependency of the product), else the one on PATH."""
    try:
        import uv  # noqa: PLC0415 - the wheel may be absent where uv comes from the system

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        from shutil import which  # noqa: PLC0415

        found = which("uv")
        if found is None:
            raise ScriptPrepError("uv is not installed: install the product with its dependencies (`pip install .`)")
        return found


def system_python() -> str:
    """A Python interpreter in the system's toolchain folders, which the sandbox shows read-only."""
    for candidate in SYSTEM_PYTHONS:
        if os.access(candidate, os.X_OK):
            return candidate
    raise ScriptPrepError("no system Python 3 (/usr/local/bin/python3 or /usr/bin/python3) for the scripts")


def script_deps_dir(home: Path) -> Path:
    """Where the bot keeps prepared script dependencies: one folder under its runtime home."""
    return home / SCRIPT_DEPS_FOLDER


def scripts_sandbox_extras(cache_dir: Path, python: str | None = None, wheels_mount: str = SANDBOX_WHEELS
                   ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """(read-only binds, env) every sandbox gets, known at start-up: the same for all packages, since
    they share one wheel folder. A bind whose folder does not exist yet is skipped by the sandbox."""
    python = python or _system_python_or_name()
    return ((str(cache_dir / "wheels"), wheels_mount),), sandbox_env(python, wheels_mount)


def sandbox_env(python: str, wheels_mount: str = SANDBOX_WHEELS) -> tuple[tuple[str, str], ...]:
    """uv inside the sandbox: this Python, these wheels, no network, no downloads of Pythons."""
    return (("UV_OFFLINE", "1"), ("UV_FIND_LINKS", wheels_mount), ("UV_PYTHON", python),
            ("UV_PYTHON_DOWNLOADS", "never"), ("UV_CACHE_DIR", SANDBOX_UV_CACHE), ("UV_NO_PROGRESS", "1"))


async def prepare_scripts(pkg_dir: Path, cache_dir: Path, *, timeout: float, python: str | None = None,
                          wheels_mount: str = SANDBOX_WHEELS, environ: Mapping[str, str] | None = None) -> ScriptsReady:
    """Make every PEP 723 script of the package ready to run offline; never raises for one bad script.

    `cache_dir` (created if needed) holds the shared wheel folder and uv's host cache. `timeout` bounds
    the whole preparation; a script not ready by then is a problem line. `python` is the interpreter
    the sandbox runs scripts with (default: the system's `python3`).
    """
    scripts = await asyncio.to_thread(_scan, pkg_dir)
    wheels = cache_dir / "wheels"
    await asyncio.to_thread(wheels.mkdir, parents=True, exist_ok=True)  # bound even when empty
    todo = [s for s in scripts if not s.problem and s.meta and (s.meta.dependencies or s.meta.requires_python)]
    if not todo:
        return _ready(wheels, wheels_mount, python or _system_python_or_name(), scripts, "")
    try:
        uv = await _uv_for(cache_dir, python, environ if environ is not None else os.environ)
    except ScriptPrepError as exc:
        log.warning("scripts of package %s not prepared: %s", pkg_dir.name, exc)
        return _ready(wheels, wheels_mount, python or "python3", scripts, str(exc))
    deadline = asyncio.get_running_loop().time() + timeout
    for script in todo:
        try:
            await _prepare_one(script, uv, cache_dir, wheels, deadline)
        except ScriptPrepError as exc:
            script.problem = str(exc)
            log.warning("script %s of package %s not ready: %s", script.alias, pkg_dir.name, exc)
    return _ready(wheels, wheels_mount, uv.python, scripts, "")


class ScriptsPreparer:
    """Prepares each package's scripts once per package version; every caller of the same version shares it.

    Serving warms every loaded package in the background (`warm`); the command tool awaits `prepare`
    before a command of that package runs, which returns at once when the work is done.
    """

    def __init__(self, cache_dir: Path, *, timeout: float = 600, python: str | None = None,
                 wheels_mount: str = SANDBOX_WHEELS, environ: Mapping[str, str] | None = None) -> None:
        self.cache_dir = cache_dir
        self.timeout = timeout
        self.python = python
        self.wheels_mount = wheels_mount
        self.environ = environ
        self._tasks: dict[tuple[str, str], asyncio.Task[ScriptsReady]] = {}
        (cache_dir / "wheels").mkdir(parents=True, exist_ok=True)  # made at start-up: every sandbox binds it

    async def prepare(self, package_root: Path, version: str) -> ScriptsReady:
        """The package's ScriptsReady; the first call of a version does the work, later ones share it."""
        return await asyncio.shield(self._task(package_root, version))

    def warm(self, packages: list[tuple[Path, str]]) -> None:
        """Start preparing these (package root, version)s in the background (needs a running loop)."""
        for root, version in packages:
            self._task(root, version)

    def _task(self, root: Path, version: str) -> asyncio.Task[ScriptsReady]:
        key = (str(root), version)
        task = self._tasks.get(key)
        if task is None or task.cancelled():
            task = self._tasks[key] = asyncio.create_task(
                prepare_scripts(root, self.cache_dir, timeout=self.timeout, python=self.python,
                                wheels_mount=self.wheels_mount, environ=self.environ),
                name=f"prepare-scripts-{root.name}")
            _latest[str(root)] = task
        return task

    async def aclose(self) -> None:
        """Stop preparations still running (their uv processes are killed with their groups)."""
        pending = [t for t in self._tasks.values() if not t.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


_latest: dict[str, asyncio.Task[ScriptsReady]] = {}  # package root -> its latest preparation in this process
_warmed: dict[int, list[ScriptsPreparer]] = {}  # preparers started at start-up, by event loop


async def warm_scripts(cache_dir: str | None, packages: Iterable[Package]) -> None:
    """At start-up: prepare these packages' scripts in the background, so a first `uv run` finds them ready.

    Nothing happens without a cache folder (commands are off). `close_scripts` stops what still runs.
    """
    if not cache_dir:
        return
    preparer = await asyncio.to_thread(ScriptsPreparer, Path(cache_dir))
    _warmed.setdefault(id(asyncio.get_running_loop()), []).append(preparer)
    preparer.warm([(p.root, p.version) for p in packages])


async def close_scripts() -> None:
    """At shutdown: stop the start-up preparations of this event loop (their uv processes end with them)."""
    for preparer in _warmed.pop(id(asyncio.get_running_loop()), []):
        await preparer.aclose()


async def scripts_ready(package_root: Path, timeout: float) -> ScriptsReady | None:
    """For the command tool, before a command runs: waits (up to `timeout`) for the package's preparation.

    None when no preparation of this package was started in this process (nothing to wait for), or it
    is still running after `timeout` (the command then runs anyway; a script missing a dependency fails).
    """
    task = _latest.get(str(package_root))
    if task is None or task.get_loop() is not asyncio.get_running_loop():
        return None
    try:
        return await asyncio.wait_for(asyncio.shield(task), timeout)
    except asyncio.TimeoutError:
        log.warning("scripts of package %s still being prepared after %.0f s; the command runs anyway",
                    package_root.name, timeout)
        return None


def _system_python_or_name() -> str:
    try:
        return system_python()
    except ScriptPrepError:
        return "python3"


def _ready(wheels: Path, mount: str, python: str, scripts: list[_Script], general: str) -> ScriptsReady:
    problems = tuple(f"{s.alias}: {general or s.problem}" for s in scripts if general or s.problem)
    prepared = tuple(s.alias for s in scripts if not general and not s.problem)
    return ScriptsReady(read_only=((str(wheels), mount),), env=sandbox_env(python, mount), prepared=prepared,
                        problems=problems)


def _scan(pkg_dir: Path) -> list[_Script]:
    """Every `.py` file with a `# /// script` block (or a broken one), as `@pkg/...` aliases."""
    found: list[_Script] = []
    for path in sorted(pkg_dir.rglob("*.py")):
        if len(found) >= MAX_SCRIPTS:
            break
        if path.is_symlink() or not path.is_file():
            continue
        alias = "@pkg/" + path.relative_to(pkg_dir).as_posix()
        try:
            meta = read_script_metadata(path)
        except ScriptMetadataError as exc:
            found.append(_Script(alias, path, problem=f"`uv run` refuses it: {exc}"))
            continue
        except OSError as exc:
            found.append(_Script(alias, path, problem=f"cannot be read ({exc.strerror or 'I/O error'})"))
            continue
        if meta is not None:
            found.append(_Script(alias, path, meta))
    return found


async def _uv_for(cache_dir: Path, python: str | None, environ: Mapping[str, str]) -> _Uv:
    binary = await asyncio.to_thread(_uv_binary)
    python = python or await asyncio.to_thread(system_python)
    env = {k: v for k, v in environ.items() if k in _PASSED_TO_UV or k.startswith("UV_")}
    for pip_name, uv_name in _FROM_PIP.items():  # the index pip is configured with, unless uv has its own
        if environ.get(pip_name) and uv_name not in env and "UV_INDEX_URL" not in env:
            env[uv_name] = environ[pip_name]
    env.update(UV_CACHE_DIR=str(cache_dir / "uv"), UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
    code, out, err = await _run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"], env, 30)
    if code != 0:
        raise ScriptPrepError(f"the scripts' Python does not start ({err.strip()[-200:] or f'exit {code}'})")
    return _Uv(binary, python, out.strip(), env)


async def _prepare_one(script: _Script, uv: _Uv, cache_dir: Path, wheels: Path, deadline: float) -> None:
    assert script.meta is not None
    _check_python(script.meta, uv.python_version)
    if not script.meta.dependencies:
        return
    key = _key(script.meta, uv.python_version)
    marker = cache_dir / "ready" / f"{key}.json"
    if await asyncio.to_thread(_still_ready, marker, wheels):
        return
    requirements = "\n".join(script.meta.dependencies) + "\n"
    lock = await _uv(uv, ["pip", "compile", "-", "--python", uv.python, "--only-binary", ":all:", "--format",
                          "pylock.toml", "--no-header", "--quiet"], requirements, cache_dir, deadline,
                     "its dependencies could not be resolved")
    files = _wheels_of(lock, cache_dir)
    for name, source, sha256 in files:
        await asyncio.wait_for(asyncio.to_thread(_fetch, source, sha256, wheels / name, _left(deadline)),
                               _left(deadline) + 1)
    # What the sandbox will do, minus the install: resolve from the wheel folder alone, offline.
    await _uv(uv, ["pip", "compile", "-", "--python", uv.python, "--offline", "--no-index", "--find-links",
                   str(wheels), "--no-header", "--quiet"], requirements, cache_dir, deadline,
              "its wheels do not resolve offline")
    done = {"dependencies": list(script.meta.dependencies), "python": uv.python_version,
            "wheels": [name for name, _, _ in files]}
    await asyncio.to_thread(atomic_write_bytes, marker, json.dumps(done).encode())


def _check_python(meta: ScriptMetadata, version: str) -> None:
    if not meta.requires_python:
        return
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet  # noqa: PLC0415 - optional
    except ImportError:
        return  # uv checks it when the script runs
    try:
        ok = version in SpecifierSet(meta.requires_python)
    except InvalidSpecifier:
        raise ScriptPrepError(f"its requires-python `{meta.requires_python}` is not a version range") from None
    if not ok:
        raise ScriptPrepError(f"it needs Python {meta.requires_python}; the sandbox runs Python {version}")


def _key(meta: ScriptMetadata, python_version: str) -> str:
    text = json.dumps({"dependencies": sorted(meta.dependencies), "requires-python": meta.requires_python,
                       "python": python_version}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _still_ready(marker: Path, wheels: Path) -> bool:
    try:
        names = json.loads(marker.read_text(encoding="utf-8"))["wheels"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(isinstance(n, str) and (wheels / n).is_file() for n in names)


def _wheels_of(lock: str, folder: Path) -> list[tuple[str, str, str]]:
    """(file name, url or path, sha256) of every wheel uv chose for the scripts' Python."""
    try:
        data = tomllib.loads(lock)
    except tomllib.TOMLDecodeError:
        raise ScriptPrepError("uv's resolution could not be read") from None
    out: list[tuple[str, str, str]] = []
    for package in data.get("packages", []):
        wheels = package.get("wheels") or []
        if not wheels:
            raise ScriptPrepError(f"`{package.get('name')}` has no wheel for the sandbox's Python (only a source "
                                  "distribution, which is not built for scripts)")
        for wheel in wheels:
            source = wheel.get("url") or (str(folder / wheel["path"]) if wheel.get("path") else "")
            name = wheel.get("name") or Path(urllib.parse.urlparse(source).path).name
            sha256 = (wheel.get("hashes") or {}).get("sha256", "")
            if not name.endswith(".whl") or "/" in name or not source:
                raise ScriptPrepError(f"uv chose `{name or package.get('name')}`, which is not a wheel file")
            out.append((name, source, sha256))
    return out


def _fetch(source: str, sha256: str, target: Path, timeout: float) -> None:
    """Copy one wheel (https or a local file) to the wheel folder, checked against uv's hash."""
    if target.is_file() and (not sha256 or hashlib.sha256(target.read_bytes()).hexdigest() == sha256):
        return
    name = target.name
    parsed = urllib.parse.urlparse(source)
    try:
        if parsed.scheme in ("http", "https", "file"):
            with urllib.request.urlopen(source, timeout=max(timeout, 1)) as response:  # noqa: S310 - uv's choice
                data = response.read(MAX_WHEEL_BYTES + 1)
        else:
            data = Path(source).read_bytes()
    except OSError as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or "I/O error"
        raise ScriptPrepError(f"`{name}` could not be downloaded ({_no_paths(str(reason))})") from None
    if len(data) > MAX_WHEEL_BYTES:
        raise ScriptPrepError(f"`{name}` is larger than {MAX_WHEEL_BYTES // 2**20} MB")
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        raise ScriptPrepError(f"`{name}` does not match the hash its index published")
    atomic_write_bytes(target, data)


def _left(deadline: float) -> float:
    left = deadline - asyncio.get_running_loop().time()
    if left <= 0:
        raise ScriptPrepError("preparing the scripts took longer than allowed (see `timeout`)")
    return left


async def _uv(uv: _Uv, args: list[str], stdin: str, cwd: Path, deadline: float, what: str) -> str:
    """uv's stdout; its first error line (without paths) in the ScriptPrepError when it fails."""
    code, out, err = await _run([uv.binary, *args], uv.env, _left(deadline), stdin=stdin, cwd=cwd)
    if code != 0:
        line = next((ln.strip() for ln in err.splitlines() if ln.strip() and not ln.startswith("hint")), "")
        log.info("uv %s failed: %s", " ".join(args[:2]), err.strip()[-2000:])
        raise ScriptPrepError(f"{what} ({_no_paths(line)[:300]})" if line else what)
    return out


def _no_paths(text: str) -> str:
    """uv's first error line without folders or URLs (they are the server's, and may hold credentials)."""
    return " ".join("…" if "/" in word else word for word in text.split())


async def _run(argv: list[str], env: dict[str, str], timeout: float, *, stdin: str | None = None,
               cwd: Path | None = None) -> tuple[int, str, str]:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise ScriptPrepError(f"`{Path(argv[0]).name}` could not be started ({exc.strerror or 'error'})") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise ScriptPrepError("preparing the scripts took longer than allowed (see `timeout`)") from None
    return proc.returncode or 0, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
