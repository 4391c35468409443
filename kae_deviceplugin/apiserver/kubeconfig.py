"""A kubeconfig file checked as far as the API client needs it, with a one-line reason if not.

The client library reads a kubeconfig with little checking of its own: an empty file fails
with "'NoneType' object has no attribute 'get'", a directory is "not found", a context without
a user is an assertion. So the file is read here first, and each way it can be unusable is
said in the operator's terms, naming the file: missing, a directory, unreadable, empty, not
YAML, no current context, a context, cluster or user it names but does not define, a cluster
without a server, a certificate or token file it names that is not there. Only the current
context is checked: it is the only one the driver uses.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kae_deviceplugin.apiserver.kubeconfig_fields import check_cluster, check_user
from kae_deviceplugin.errors import EXIT_ENVIRONMENT, EXIT_USAGE, KubeconfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


def redacted(url: str) -> str:
    """``url`` without the ``user:password@`` it may carry: every message names the server."""
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc:
            return url
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:
        return "(a URL that does not parse)"


def _bad(path: Path, why: str) -> KubeconfigError:
    """A file the invocation named that is no usable kubeconfig; ``why`` after its path."""
    joined = f"{path}{why}" if why.startswith(":") else f"{path} {why}"
    return KubeconfigError(joined, code=EXIT_USAGE)


def _text(path: Path) -> str:
    """The file's text; a path that is no regular file is refused before it is opened (a FIFO
    would block the read)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise _bad(path, "is a directory, not a kubeconfig file")
        if not stat.S_ISREG(mode):
            raise _bad(path, "is not a regular file")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _bad(path, "does not exist") from None
    except UnicodeDecodeError:
        raise _bad(path, "is not text (a kubeconfig is YAML)") from None
    except OSError as err:  # a permission, an I/O error: the node's, not the invocation's
        who = f"uid {os.geteuid()}"
        raise KubeconfigError(
            f"{path} cannot be read by {who}: {err.strerror or err}", code=EXIT_ENVIRONMENT
        ) from None


def _parsed(path: Path, text: str) -> dict[str, Any]:
    loaded = _json(text)
    if loaded is _NOT_JSON:
        loaded = _yaml(path, text)
    if loaded is None:
        raise _bad(path, "is empty: a kubeconfig names a cluster, a user and a current-context")
    if not isinstance(loaded, dict):
        kind = type(loaded).__name__
        raise _bad(
            path, f"is no kubeconfig: a YAML {kind} where clusters, contexts and users belong"
        )
    return loaded


_NOT_JSON = object()


def _json(text: str) -> Any:
    """A kubeconfig written as JSON (which is YAML: kubectl reads both) without loading PyYAML,
    ~0.6 MiB resident for the daemon's life; ``_NOT_JSON`` for any other text, which YAML reads
    (and explains, if it cannot)."""
    if not text.lstrip().startswith("{"):
        return _NOT_JSON
    try:
        return json.loads(text)
    except ValueError:  # YAML's flow style, or broken: YAML decides, and says where
        return _NOT_JSON


def _yaml(path: Path, text: str) -> Any:
    import yaml  # noqa: PLC0415 -- only a YAML kubeconfig file needs it, not the service account

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise _bad(path, f"is not YAML: {problem}{where}") from None


def _named(path: Path, config: Mapping[str, Any], section: str, key: str) -> dict[str, Any]:
    """``clusters``, ``contexts`` or ``users`` by name: their ``cluster``/``context``/``user``."""
    entries = config.get(section) or []
    if not isinstance(entries, list):
        raise _bad(path, f"has a {section} that is not a list")
    found: dict[str, Any] = {}
    for entry in entries:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            found[entry["name"]] = entry.get(key) if isinstance(entry.get(key), Mapping) else {}
    return found


def _defined(path: Path, found: Mapping[str, Any], what: str, name: object, by: str) -> Any:
    if not isinstance(name, str) or not name:
        raise _bad(path, f": {by} names no {what}")
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise _bad(path, f": {by} names {what} {name}, which it does not define (it has: {known})")
    return found[name]


def load_kubeconfig(path: Path) -> tuple[dict[str, Any], str]:
    """The kubeconfig's content and the URL of its current context's server; KubeconfigError
    naming ``path`` and what is wrong (exit 2 for the file's content or a path that is no file,
    3 for a file the daemon cannot read)."""
    return check_kubeconfig(read_kubeconfig(path), path)


def read_kubeconfig(path: Path) -> dict[str, Any]:
    """The file's content, a mapping; KubeconfigError (one line, never a line of the file:
    it may hold a token) for anything else."""
    return _parsed(path, _text(path))


def check_kubeconfig(
    config: dict[str, Any], path: Path, context_name: str | None = None
) -> tuple[dict[str, Any], str]:
    """``config`` with ``context_name`` (default: its current-context) as its current context,
    checked; and that context's server URL (without credentials)."""
    if context_name is not None:
        config = {**config, "current-context": context_name}
    current = config.get("current-context")
    if not isinstance(current, str) or not current:
        raise _bad(path, "sets no current-context (kubectl config use-context NAME sets one)")
    context = _defined(path, _named(path, config, "contexts", "context"), "context", current,
                       "current-context")  # fmt: skip
    by = f"context {current}"
    cluster = _defined(path, _named(path, config, "clusters", "cluster"), "cluster",
                       context.get("cluster"), by)  # fmt: skip
    if context.get("user") is None:
        raise _bad(path, f": {by} names no user: the driver needs credentials (a token, a "
                   "client certificate or an exec plugin)")  # fmt: skip
    user = _defined(path, _named(path, config, "users", "user"), "user", context.get("user"), by)
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise _bad(path, f": cluster {context.get('cluster')} has no server URL")
    check_cluster(cluster, str(context.get("cluster")), lambda why: _bad(path, why))
    check_user(user, str(context.get("user")), lambda why: _bad(path, why))
    _check_files(path, cluster, ("certificate-authority",))
    _check_files(path, user, ("client-certificate", "client-key", "tokenFile"))
    return config, redacted(server)


def _check_files(path: Path, section: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Files the kubeconfig names (relative ones beside it, as kubectl reads them) exist: the
    TLS library says only "No such file or directory", without the name."""
    for key in keys:
        named = section.get(key)
        if isinstance(named, str) and named:
            where = path.parent / Path(named).expanduser()  # an absolute name stays as it is
            if not where.is_file():
                raise _bad(path, f": {key} {named} is no file")


def check_service_account(directory: Path = SERVICE_ACCOUNT_DIR) -> str:
    """The in-cluster server's URL, once the pod's token and API address are there; else
    KubeconfigError (exit 3: the pod's setup) saying which is missing."""
    token = directory / "token"
    if not token.is_file():
        raise KubeconfigError(
            f"no kubeconfig given and no service account token {token} (not in a pod, or the "
            "pod has automountServiceAccountToken off)"
        )
    missing = [name for name in SERVICE_ENV if not os.environ.get(name)]
    if missing:
        raise KubeconfigError(
            f"no kubeconfig given and {' and '.join(missing)} unset: the pod's service account "
            "has no API server address"
        )
    host, port = (os.environ[name] for name in SERVICE_ENV)
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
