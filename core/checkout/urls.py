"""Remote URLs: credentials scrubbed out of any text, and the web page where a branch becomes a
pull / merge request on GitHub, GitLab or Bitbucket (derived from the URL alone, no API call)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, urlsplit

# scheme://user:secret@host or scheme://token@host: the userinfo part goes.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@]+)@")
# scp-like SSH: git@host:owner/repo(.git)
_SCP = re.compile(r"^(?:(?P<user>[^@/\s]+)@)?(?P<host>[^:/\s]+):(?P<path>(?!/)[^\s]+)$")

_FILE_URL = re.compile(r"file://[^\s'\"]+")
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.<>-])/[^\s'\"]+")

Forge = Literal["github", "gitlab", "bitbucket"]


def scrub(text: str) -> str:
    """`https://user:token@host/x` → `https://***@host/x` everywhere in `text`."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)


def for_log(text: str) -> str:
    """Git's words or a remote URL, fit for a log line: no credentials, no server paths."""
    return scrub_paths(scrub(text))


def scrub_paths(text: str) -> str:
    """Server paths (and file:// URLs) in git's words → `<path>`; web URLs are left alone."""
    return _ABSOLUTE_PATH.sub("<path>", _FILE_URL.sub("file://<path>", text))


@dataclass(frozen=True)
class RemoteRepo:
    """A remote on a known forge: where its web pages are."""

    forge: Forge
    web: str  # https://host/owner/repo, never with credentials

    def pull_request_url(self, branch: str, base: str | None) -> str:
        source = quote(branch, safe="")
        target = quote(base, safe="") if base else None
        if self.forge == "github":
            return f"{self.web}/compare/{target + '...' if target else ''}{source}?expand=1"
        if self.forge == "gitlab":
            link = f"{self.web}/-/merge_requests/new?merge_request%5Bsource_branch%5D={source}"
            return link + (f"&merge_request%5Btarget_branch%5D={target}" if target else "")
        link = f"{self.web}/pull-requests/new?source={source}"
        return link + (f"&dest={target}" if target else "")


def remote_repo(url: str) -> RemoteRepo | None:
    """The forge and web address of a remote URL (https, ssh:// or scp-like), or None if unknown."""
    host, path = _host_and_path(url.strip())
    if not host or not path:
        return None
    forge = _forge(host)
    if forge is None:
        return None
    path = path.strip("/").removesuffix(".git").strip("/")
    if path.count("/") < 1:
        return None
    return RemoteRepo(forge=forge, web=f"https://{host}/{path}")


def _host_and_path(url: str) -> tuple[str, str]:
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https", "ssh", "git", "git+ssh", "ssh+git"):
            return "", ""
        return (parts.hostname or ""), parts.path
    scp = _SCP.match(url)
    if scp:
        return scp.group("host"), scp.group("path")
    return "", ""


def _forge(host: str) -> Forge | None:
    host = host.lower()
    for forge in ("github", "gitlab", "bitbucket"):
        if host == f"{forge}.com" or host == f"{forge}.org" or host.startswith(f"{forge}.") or f".{forge}." in host:
            return forge  # type: ignore[return-value]
    return None
