"""``ClusterReads`` over the project's own client (``rest_api``), with a person's credentials
found as kubectl finds them: ``--kubeconfig``, else every file ``KUBECONFIG`` lists (merged as
kubectl merges them: the first file to name a cluster, context or user, or to set
``current-context``, wins; a listed file that does not exist is skipped), else
``~/.kube/config``, else the pod's service account. ``--context`` picks a context, ``--as``
impersonates a user. Lists are asked in pages (``limit``), each page bounded in bytes like
every answer, and a list that grows past ``MAX_ITEMS`` objects is refused: a person's command
stays bounded in memory whatever the server sends.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kae_deviceplugin.apiserver.credentials import from_service_account
from kae_deviceplugin.apiserver.kubeconfig import (
    SERVICE_ACCOUNT_DIR,
    check_kubeconfig,
    check_service_account,
    read_kubeconfig,
)
from kae_deviceplugin.apiserver.rest_api import RestApi, client_for
from kae_deviceplugin.apiserver.seam import JsonObject, Kind
from kae_deviceplugin.errors import KubeconfigError

DEFAULT_KUBECONFIG = Path("~/.kube/config")
PAGE = 500  # objects a list page asks for
MAX_PAGE_BYTES = 32 * 1024 * 1024  # 500 claims or pods of a few KiB each fit many times over
MAX_ITEMS = 100_000  # objects of one kind: past it, the cluster is no cluster this tool reads
SECTIONS = {"clusters": "cluster", "contexts": "context", "users": "user"}
FILE_KEYS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")
CREDENTIALS = ("token", "tokenFile", "exec", "username", "password", "auth-provider")


@dataclasses.dataclass(frozen=True)
class Access:
    """What the person passed: ``--kubeconfig``, ``--context``, ``--as``, ``--server``,
    ``--token``."""

    kubeconfig: Path | None = None
    context: str | None = None
    as_user: str | None = None
    server: str | None = None  # --server: the context's cluster's server instead
    token: str | None = None  # --token: the context's user's credential instead


class RestReads:
    """The calls of ``reads.ClusterReads`` on one ``RestApi``."""

    def __init__(self, api: RestApi, namespace: str) -> None:
        self.api = api
        self._namespace = namespace

    @property
    def server(self) -> str:
        return self.api.server

    @property
    def namespace(self) -> str:
        return self._namespace

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        return await self.api.get(kind, name, namespace)

    async def list_all(
        self, kind: Kind, field_selector: Mapping[str, str] | None = None
    ) -> list[JsonObject]:
        return await self.api.list(kind, field_selector or {})

    async def close(self) -> None:
        await self.api.close()


def kubeconfig_paths(given: Path | None, environ: Mapping[str, str]) -> list[Path]:
    """The kubeconfig files kubectl would read, in order; none: the in-cluster account."""
    if given is not None:
        return [given]
    listed = [Path(p).expanduser() for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return [path for path in listed if path.exists()]
    default = Path(environ.get("HOME", "~"), ".kube", "config").expanduser()
    return [default] if default.exists() else []


def merged(paths: list[Path]) -> dict[str, Any]:
    """The files' content merged as kubectl merges them; a relative file an entry names is
    made absolute beside the file that names it."""
    config: dict[str, Any] = {section: [] for section in SECTIONS}
    seen: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for path in paths:
        content = read_kubeconfig(path)
        if not config.get("current-context") and content.get("current-context"):
            config["current-context"] = content["current-context"]
        for section, key in SECTIONS.items():
            entries = content.get(section) or []
            if not isinstance(entries, list):
                raise KubeconfigError(f"{path} has a {section} that is not a list", code=2)
            for entry in entries:
                name = entry.get("name") if isinstance(entry, Mapping) else None
                if isinstance(name, str) and name not in seen[section]:
                    seen[section].add(name)
                    config[section].append({"name": name, key: _beside(entry.get(key), path)})
    return config


def _beside(section: Any, path: Path) -> Any:
    if not isinstance(section, Mapping):
        return section
    fixed = dict(section)
    for key in FILE_KEYS:
        if isinstance(fixed.get(key), str) and fixed[key]:
            fixed[key] = str(path.parent / Path(fixed[key]).expanduser())
    return fixed


def connect_reads(access: Access, environ: Mapping[str, str] | None = None) -> RestReads:
    """A reader with the credentials kubectl would use; KubeconfigError (one line) when none."""
    env = os.environ if environ is None else environ
    paths = kubeconfig_paths(access.kubeconfig, env)
    options: dict[str, Any] = {"max_body": MAX_PAGE_BYTES, "page_size": PAGE}
    options["max_items"] = MAX_ITEMS
    if not paths and access.server is None:
        if access.context is not None:
            raise KubeconfigError(f"--context {access.context}: no kubeconfig file to find it in")
        try:
            server = check_service_account()
        except KubeconfigError as err:
            looked = "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config)"
            raise KubeconfigError(f"{looked} and no in-cluster service account ({err})") from None
        api = RestApi(from_service_account(server), **options)
        namespace = _pod_namespace()
    else:
        where = paths[0] if len(paths) == 1 else Path(os.pathsep.join(map(str, paths)))
        content = read_kubeconfig(paths[0]) if len(paths) == 1 else merged(paths)
        if not paths:
            where, content = Path("--server"), _bare()
        content = _overridden(content, access)
        content, server = check_kubeconfig(content, where, access.context)
        api = client_for(content, server, where, show_stderr=True, **options)
        namespace = _context_namespace(content)
    if access.as_user:
        api.target = dataclasses.replace(api.target, impersonate=access.as_user)
    return RestReads(api, namespace)


def _bare() -> dict[str, Any]:
    """A kubeconfig of one context for --server (and --token) alone."""
    return {
        "current-context": "flags",
        "contexts": [{"name": "flags", "context": {"cluster": "flags", "user": "flags"}}],
        "clusters": [{"name": "flags", "cluster": {}}],
        "users": [{"name": "flags", "user": {}}],
    }


def _overridden(content: dict[str, Any], access: Access) -> dict[str, Any]:
    """``content`` with --server and --token in the chosen context's cluster and user (as
    kubectl overrides them: a token replaces the user's other credentials)."""
    if access.server is None and access.token is None:
        return content
    name = access.context or content.get("current-context")
    found = [e.get("context") for e in content.get("contexts") or []
             if isinstance(e, Mapping) and e.get("name") == name]  # fmt: skip
    if not found or not isinstance(found[0], Mapping):
        return content  # check_kubeconfig says what is missing
    changed = copy.deepcopy(content)
    for section, key, field in (("clusters", "cluster", "server"), ("users", "user", "token")):
        value = access.server if field == "server" else access.token
        for entry in changed.get(section) or []:
            if value is None or not isinstance(entry, dict):
                continue
            if entry.get("name") == found[0].get(key):
                held = entry.get(key)
                kept: dict[str, Any] = dict(held) if isinstance(held, Mapping) else {}
                if field == "token":
                    kept = {k: v for k, v in kept.items() if k not in CREDENTIALS}
                entry[key] = {**kept, field: value}
    return changed


def _context_namespace(config: Mapping[str, Any]) -> str:
    for entry in config.get("contexts") or []:
        if isinstance(entry, Mapping) and entry.get("name") == config.get("current-context"):
            namespace = (entry.get("context") or {}).get("namespace")
            return namespace if isinstance(namespace, str) and namespace else "default"
    return "default"


def _pod_namespace() -> str:
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or "default"
    except OSError:
        return "default"
