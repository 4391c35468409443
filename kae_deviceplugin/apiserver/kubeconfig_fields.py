"""The current context's cluster and user fields typed strictly, each refusal one line naming
the field: YAML reads ``"false"`` as a string, and an untyped read would take it as true
(``insecure-skip-tls-verify: "false"`` turned verification off). A field the client cannot
honour (``auth-provider``, impersonating groups, an interactive exec plugin) is refused rather
than dropped; a field it honours is checked for its type here, once, at start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

EXEC_VERSIONS = frozenset(
    f"client.authentication.k8s.io/{v}" for v in ("v1alpha1", "v1beta1", "v1")
)
STRINGS_CLUSTER = ("server", "certificate-authority", "certificate-authority-data",
                   "tls-server-name", "proxy-url")  # fmt: skip
BOOLS_CLUSTER = ("insecure-skip-tls-verify", "disable-compression")
STRINGS_USER = ("client-certificate", "client-certificate-data", "client-key", "client-key-data",
                "token", "tokenFile", "username", "password", "as")  # fmt: skip
REFUSED_USER = {
    "auth-provider": "auth-provider is not supported: use an exec plugin (the provider's own "
    "kubelogin or cloud CLI), a token or a client certificate",
    "as-groups": "as-groups (impersonating groups) is not supported",
    "as-uid": "as-uid (impersonating a UID) is not supported",
    "as-user-extra": "as-user-extra (impersonation extras) is not supported",
}

NAME_VALUE = ("name", "value")
Bad = Callable[[str], Exception]  # a one-line refusal naming the kubeconfig


def _typed(section: Mapping[str, Any], where: str, bad: Bad) -> None:
    """Strings and booleans as their type; a string where a boolean belongs said so."""
    strings, bools = (STRINGS_CLUSTER, BOOLS_CLUSTER) if where.startswith("cluster") else (
        STRINGS_USER, ())  # fmt: skip
    for key in strings:
        if key in section and section[key] is not None and not isinstance(section[key], str):
            raise bad(f": {where} field {key} is a {type(section[key]).__name__}, not a string")
    for key in bools:
        value = section.get(key)
        if value is not None and not isinstance(value, bool):
            shown = f"the string {value!r}" if isinstance(value, str) else type(value).__name__
            raise bad(f": {where} field {key} is {shown}; write true or false, without quotes")


def check_cluster(cluster: Mapping[str, Any], name: str, bad: Bad) -> None:
    where = f"cluster {name}"
    _typed(cluster, where, bad)
    has_ca = cluster.get("certificate-authority") or cluster.get("certificate-authority-data")
    if cluster.get("insecure-skip-tls-verify") is True and has_ca:
        raise bad(f": {where} sets both insecure-skip-tls-verify and a certificate authority; "
                  "keep one")  # fmt: skip


def check_user(user: Mapping[str, Any], name: str, bad: Bad) -> None:
    where = f"user {name}"
    for key, why in REFUSED_USER.items():
        if user.get(key):
            raise bad(f": {where}: {why}")
    _typed(user, where, bad)
    spec = user.get("exec")
    if spec is not None:
        _check_exec(spec, f"{where} exec", bad)


def _check_exec(spec: Any, where: str, bad: Bad) -> None:
    if not isinstance(spec, Mapping):
        raise bad(f": {where} is no mapping")
    if spec.get("apiVersion") not in EXEC_VERSIONS:
        known = ", ".join(sorted(EXEC_VERSIONS))
        raise bad(f": {where} apiVersion {spec.get('apiVersion')!r} is none of {known}")
    if not isinstance(spec.get("command"), str) or not spec["command"]:
        raise bad(f": {where} has no command")
    args = spec.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise bad(f": {where} args is no list of strings")
    env = spec.get("env") or []
    if not isinstance(env, list) or not all(map(_name_value, env)):
        raise bad(f": {where} env is no list of name/value strings")
    if spec.get("provideClusterInfo") not in (None, True, False):
        raise bad(f": {where} provideClusterInfo must be true or false, without quotes")
    if spec.get("interactiveMode") not in (None, "Never", "IfAvailable", "Always"):
        raise bad(f": {where} interactiveMode {spec['interactiveMode']!r} is none of Never, "
                  "IfAvailable, Always")  # fmt: skip
    if spec.get("interactiveMode") == "Always":
        raise bad(f": {where} interactiveMode Always needs a terminal, which this client never "
                  "gives a plugin (use Never or IfAvailable)")  # fmt: skip


def _name_value(entry: Any) -> bool:
    return isinstance(entry, Mapping) and all(
        isinstance(entry.get(k), str) for k in ("name", "value")
    )
