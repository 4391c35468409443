"""The configuration layer: file format, value rules, precedence and reload diffs."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kae_deviceplugin.config.file import (
    ENGINE_RULES,
    ENV_RULES,
    MAX_FILE_BYTES,
    SETTING_RULES,
    FileConfig,
    load_config_file,
    parse_config,
    parse_config_text,
)
from kae_deviceplugin.config.resolve import (
    check_config,
    enable_only,
    parse_engine_list,
    resolve_settings,
    restart_required,
)
from kae_deviceplugin.config.rules import did_you_mean, parse_duration
from kae_deviceplugin.config.schema import OPTIONS
from kae_deviceplugin.config.settings import EngineSettings, EnvSettings, Settings
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.model import Function
from kae_deviceplugin.core.views import Functions, build_view
from kae_deviceplugin.errors import ConfigError, InvalidConfig, KaeDevicePluginError
from tests.core.test_placement import device

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def parse(text: str) -> FileConfig:
    return parse_config_text("version: v1\n" + text, "test.yaml")


def errors_of(text: str, *, versioned: bool = True) -> list[tuple[str, str]]:
    """(path, message) of every error a document raises; fails the test if it is accepted."""
    with pytest.raises(InvalidConfig) as caught:
        parse_config_text(("version: v1\n" if versioned else "") + text, "test.yaml")
    return [(error.path, str(error)) for error in caught.value.errors]


def resolved(text: str, **overrides: object) -> Settings:
    return resolve_settings(parse(text), overrides)


# ---- defaults and the shape of Settings ----------------------------------------------------------


def test_defaults_are_the_documented_ones() -> None:
    """With no file and no overrides the daemon gets exactly the defaults the brief names."""
    s = resolve_settings(None, {})
    assert s == Settings()
    assert s.sysfs_root == Path("/sys") and s.dev_root == Path("/dev")
    assert s.effective_device_plugin_dir == Path("/var/lib/kubelet/device-plugins")
    assert s.effective_pod_resources_socket == Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    assert s.nfd_features_file == Path("/etc/kubernetes/node-feature-discovery/features.d/kae")
    assert (s.scan_interval, s.registration, s.metrics_address) == (1.0, "auto", ":9410")
    assert (s.log_level, s.log_format, s.allocation_policy) == ("info", "text", "balanced")
    assert (s.container_sysfs_view, s.cdi) == (True, False)
    assert set(s.engines) == {engine.name for engine in ENGINES}
    assert all(e == EngineSettings(True, 1, "all") for e in s.engines.values())
    assert s.env == EnvSettings(uadk_numa_hint=False, openssl_engines=None)


def test_derived_paths_follow_the_kubelet_root_unless_set() -> None:
    """device-plugins and pod-resources move with kubeletRoot, but an explicit path wins."""
    moved = resolved("paths: {kubeletRoot: /var/snap/k8s/kubelet}")
    assert moved.effective_device_plugin_dir == Path("/var/snap/k8s/kubelet/device-plugins")
    assert moved.effective_pod_resources_socket == Path(
        "/var/snap/k8s/kubelet/pod-resources/kubelet.sock"
    )
    pinned = resolved(
        "paths: {kubeletRoot: /k, devicePluginDir: /dp, podResourcesSocket: /pr.sock}"
    )
    assert pinned.effective_device_plugin_dir == Path("/dp")
    assert pinned.effective_pod_resources_socket == Path("/pr.sock")


def test_every_field_has_exactly_one_rule() -> None:
    """A Settings field without a rule could never be configured; a rule without a field breaks."""
    names = {f.name for f in dataclasses.fields(Settings)}
    assert names == {*SETTING_RULES, "engines", "env"}
    assert {f.name for f in dataclasses.fields(EngineSettings)} == set(ENGINE_RULES)
    assert {f.name for f in dataclasses.fields(EnvSettings)} == set(ENV_RULES)


def test_every_default_passes_its_own_rule() -> None:
    """Defaults obey the rules they are checked against, so writing one down changes nothing."""
    defaults, engine, env = Settings(), EngineSettings(), EnvSettings()
    for name, rule in SETTING_RULES.items():
        assert rule(getattr(defaults, name)) == getattr(defaults, name), name
    for name, rule in ENGINE_RULES.items():
        assert rule(getattr(engine, name)) == getattr(engine, name), name
    for name, rule in ENV_RULES.items():
        assert rule(getattr(env, name)) == getattr(env, name), name


def test_settings_are_immutable() -> None:
    """Settings are shared between tasks: neither they nor their engine table can change."""
    s = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.scan_interval = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.engines["hpre"] = EngineSettings(enabled=False)  # type: ignore[index]


# ---- the documented example ----------------------------------------------------------------------


def test_the_full_example_in_the_docs_is_valid_and_means_what_it_says(tmp_path: Path) -> None:
    """The reference's example parses and, but for opensslEngines, spells out the defaults."""
    text = DOCS.read_text(encoding="utf-8")
    example = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "engines:" in b)
    path = tmp_path / "config.yaml"
    path.write_text(example, encoding="utf-8")
    assert check_config(path) == []
    s = resolve_settings(load_config_file(path), {})
    assert s == dataclasses.replace(
        Settings(), env=EnvSettings(openssl_engines="/usr/local/lib/engines-1.1")
    )
    # Full means every key of the settings table, the mode and the dra section included.
    shown: set[str] = set()
    for key, value in yaml.safe_load(example).items():
        shown |= {f"{key}.{sub}" for sub in value} if isinstance(value, dict) else {key}
    missing = {option.key for option in OPTIONS} - shown
    assert not missing, f"the full example lacks {sorted(missing)}"


# ---- valid values ------------------------------------------------------------------------------

VALID: list[tuple[str, str, object]] = [
    ("scanInterval: 500ms", "scan_interval", 0.5),
    ("scanInterval: 2", "scan_interval", 2.0),
    ("scanInterval: 0.25", "scan_interval", 0.25),
    ("scanInterval: 1m30s", "scan_interval", 90.0),
    ("scanInterval: 1h", "scan_interval", 3600.0),
    ("registration: plugin-watcher", "registration", "plugin-watcher"),
    ("registration: Kubelet-Socket", "registration", "kubelet-socket"),
    ("allocationPolicy: packed", "allocation_policy", "packed"),
    ("containerSysfsView: false", "container_sysfs_view", False),
    ("cdi: true", "cdi", True),
    ('metricsAddress: ""', "metrics_address", ""),
    ('metricsAddress: ":1"', "metrics_address", ":1"),
    ('metricsAddress: "127.0.0.1:65535"', "metrics_address", "127.0.0.1:65535"),
    ('metricsAddress: "[::]:9410"', "metrics_address", "[::]:9410"),
    ('metricsAddress: "[fe80::1]:80"', "metrics_address", "[fe80::1]:80"),
    ('metricsAddress: "metrics.local:8080"', "metrics_address", "metrics.local:8080"),
    ("log: {level: DEBUG}", "log_level", "debug"),
    ("log: {format: json}", "log_format", "json"),
    ("paths: {sysfsRoot: /host/sys}", "sysfs_root", Path("/host/sys")),
    ("paths: {nfdFeaturesFile: null}", "nfd_features_file", None),
    ('paths: {nfdFeaturesFile: ""}', "nfd_features_file", None),
    ("paths: {devicePluginDir: /dp}", "device_plugin_dir", Path("/dp")),
    ("dra: {unhealthyTaintEffect: noexecute}", "unhealthy_taint_effect", "NoExecute"),
    ("dra: {unhealthyTaintEffect: None}", "unhealthy_taint_effect", "None"),
    ("dra: {unhealthyTaintEffect: omit}", "unhealthy_taint_effect", "omit"),
    ("dra: {sharedEngines: [zip, SEC]}", "shared_engines", frozenset({"zip", "sec"})),
    ('dra: {sharedEngines: "zip, hpre"}', "shared_engines", frozenset({"zip", "hpre"})),
    ('dra: {sharedEngines: ""}', "shared_engines", frozenset()),
    ("dra: {sharedEngines: []}", "shared_engines", frozenset()),
]


@pytest.mark.parametrize(("text", "name", "expected"), VALID)
def test_valid_values_are_converted(text: str, name: str, expected: object) -> None:
    """Each accepted spelling lands in its Settings field with its proper type."""
    assert parse(text).settings == {name: expected}
    assert getattr(resolved(text), name) == expected


@pytest.mark.parametrize(
    ("text", "engine", "expected"),
    [
        ("engines: {hpre: {shares: 64}}", "hpre", EngineSettings(shares=64)),
        ("engines: {sec: {enabled: false}}", "sec", EngineSettings(enabled=False)),
        ("engines: {zip: {functions: prefer-vf}}", "zip", EngineSettings(functions="prefer-vf")),
        ("engines: {zip: {functions: VF, shares: 2}}", "zip", EngineSettings(True, 2, "vf")),
        ("engines: {zip: {}}", "zip", EngineSettings()),
    ],
)
def test_engine_settings_merge_over_defaults(text: str, engine: str, expected: Any) -> None:
    """An engine entry changes only the keys it names; other engines keep their defaults."""
    s = resolved(text)
    assert s.engine(engine) == expected
    assert all(s.engine(e.name) == EngineSettings() for e in ENGINES if e.name != engine)


def test_env_settings() -> None:
    """env keys reach EnvSettings; an empty opensslEngines means not set."""
    s = resolved("env: {uadkNumaHint: true, opensslEngines: /opt/engines}")
    assert s.env == EnvSettings(uadk_numa_hint=True, openssl_engines="/opt/engines")
    assert resolved('env: {opensslEngines: ""}').env.openssl_engines is None


def test_file_config_holds_only_the_keys_present() -> None:
    """A FileConfig is an overlay: keys the file does not name stay out of it."""
    f = parse("cdi: true\nengines: {hpre: {shares: 2}}")
    assert dict(f.settings) == {"cdi": True}
    assert {k: dict(v) for k, v in f.engines.items()} == {"hpre": {"shares": 2}}
    assert dict(f.env) == {}
    assert parse_config_text("version: v1", "x").settings == {}


# ---- invalid values ------------------------------------------------------------------------------

INVALID: list[tuple[str, str, str]] = [
    ("scanInterval: 0", "scanInterval", "must be more than 0s and at most 1h (got 0)"),
    ("scanInterval: -1s", "scanInterval", "must be more than 0s and at most 1h"),
    ("scanInterval: 61m", "scanInterval", "at most 1h"),
    ("scanInterval: .nan", "scanInterval", "not NaN"),
    ("scanInterval: .inf", "scanInterval", "at most 1h"),
    ("scanInterval: 1 s", "scanInterval", "a duration such as 500ms"),
    ("scanInterval: 1m30", "scanInterval", "a duration such as 500ms"),
    ("scanInterval: true", "scanInterval", "a number of seconds"),
    ("scanInterval: [1]", "scanInterval", "a number of seconds"),
    ("registration: kubelet-sock", "registration", "did you mean 'kubelet-socket'?"),
    ("registration: 3", "registration", "must be one of auto, kubelet-socket, plugin-watcher"),
    ("allocationPolicy: spread", "allocationPolicy", "must be one of balanced, packed"),
    (
        "containerSysfsView: maybe",
        "containerSysfsView",
        "must be true or false, written without quotes (a YAML value, not text) (got 'maybe')",
    ),
    ("cdi: 1", "cdi", "must be true or false (got 1)"),
    ("metricsAddress: 9410", "metricsAddress", 'must be a string such as ":9410"'),
    ('metricsAddress: "9410"', "metricsAddress", "must be host:port or :port"),
    ('metricsAddress: ":0"', "metricsAddress", "port from 1 to 65535"),
    ('metricsAddress: ":65536"', "metricsAddress", "port from 1 to 65535"),
    ('metricsAddress: ":http"', "metricsAddress", "port from 1 to 65535"),
    ('metricsAddress: "::1:9410"', "metricsAddress", "must be in brackets"),
    ('metricsAddress: "[1.2.3.4]:80"', "metricsAddress", "must be an IPv6 address"),
    ('metricsAddress: "999.1.1.1:80"', "metricsAddress", "not a valid IPv4 address"),
    ('metricsAddress: "bad_host:80"', "metricsAddress", "hostname or an IP address"),
    ("log: {level: verbose}", "log.level", "must be one of debug, info, warning, error"),
    ("log: {level: warn}", "log.level", "did you mean 'warning'?"),
    ("log: {format: xml}", "log.format", "must be one of text, json"),
    ("log: info", "log", "must be a mapping (got 'info')"),
    ("paths: {sysfsRoot: sys}", "paths.sysfsRoot", "must be an absolute path (got 'sys')"),
    ("paths: {sysfsRoot: null}", "paths.sysfsRoot", "must be an absolute path (got None)"),
    ("paths: {stateDir: 7}", "paths.stateDir", "must be an absolute path"),
    ('paths: {cdiDir: "/a\\0b"}', "paths.cdiDir", "NUL character"),
    ("paths: {kubeletroot: /k}", "paths.kubeletroot", "did you mean 'kubeletRoot'?"),
    ("paths: []", "paths", "must be a mapping"),
    ("engines: {hpre: {shares: 0}}", "engines.hpre.shares", "from 1 to 64 (got 0)"),
    ("engines: {hpre: {shares: 65}}", "engines.hpre.shares", "from 1 to 64 (got 65)"),
    ("engines: {hpre: {shares: 2.0}}", "engines.hpre.shares", "whole number"),
    ("engines: {hpre: {shares: true}}", "engines.hpre.shares", "whole number"),
    ("engines: {hpre: {share: 2}}", "engines.hpre.share", "unknown key; did you mean 'shares'?"),
    ("engines: {sec: {enabled: on-ish}}", "engines.sec.enabled", "must be true or false"),
    ("engines: {zip: {functions: vfs}}", "engines.zip.functions", "did you mean 'vf'?"),
    ("engines: {hpr: {}}", "engines.hpr", "unknown key; did you mean 'hpre'?"),
    ("engines: {qat: {}}", "engines.qat", "unknown key; expected hpre, sec, zip"),
    ("engines: {hpre: 2}", "engines.hpre", "must be a mapping (got 2)"),
    ("engines: {hpre: null}", "engines.hpre", "must be a mapping (got None)"),
    ("engines: {1: {}}", "engines.1", "keys must be strings"),
    ("env: {uadkNumaHint: 2}", "env.uadkNumaHint", "must be true or false"),
    ("dra: {unhealthyTaintEffect: evict}", "dra.unhealthyTaintEffect", "must be one of"),
    ("dra: {unhealthyTaintEffect: NoSchedul}", "dra.unhealthyTaintEffect", "'NoSchedule'?"),
    ("dra: {sharedEngines: [zip, qat]}", "dra.sharedEngines", "'qat' is not an engine"),
    ("dra: {sharedEngines: 3}", "dra.sharedEngines", "must be a list of engine names"),
    ("env: {opensslEngines: lib/engines}", "env.opensslEngines", "absolute path"),
    ("env: {opensslEngine: /x}", "env.opensslEngine", "did you mean 'opensslEngines'?"),
    ("scan_interval: 1s", "scan_interval", "unknown key; did you mean 'scanInterval'?"),
    ("level: debug", "level", "unknown key; did you mean 'log.level'?"),
    ("sysfsRoot: /s", "sysfsRoot", "unknown key; did you mean 'paths.sysfsRoot'?"),
    ("zzzzzz: 1", "zzzzzz", "unknown key; expected version, scanInterval,"),
    ("2023-01-01: 1", "datetime.date(2023, 1, 1)", "keys must be strings"),
    ("version: v1", "version", "found duplicate key 'version'"),
]


@pytest.mark.parametrize(("text", "path", "message"), INVALID)
def test_invalid_values_are_reported_with_path_and_reason(
    text: str, path: str, message: str
) -> None:
    """Each bad value yields exactly one error naming where it is and why it is wrong."""
    errors = errors_of(text)
    assert len(errors) == 1, errors
    got_path, got_message = errors[0]
    if "duplicate" not in message:  # a YAML-level problem has no key path
        assert got_path == path
    assert message in got_message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("scanInterval: 1s", "version: is required; use v1"),
        ("version: v2", "version: is not supported; use v1 (got 'v2')"),
        ("version: 1", "version: is not supported; use v1 (got 1)"),
    ],
)
def test_version_is_required_and_must_be_v1(text: str, message: str) -> None:
    """A file that does not say it is v1 is refused rather than guessed at."""
    assert [m for _, m in errors_of(text, versioned=False)] == [message]


def test_every_error_is_listed_one_per_line_with_the_file_name(tmp_path: Path) -> None:
    """A file with many problems reports all of them at once, each prefixed with its file."""
    path = tmp_path / "many.yaml"
    path.write_text(
        "scanInterval: 0\nregistration: nope\nlog: {level: loud}\n"
        "engines: {hpre: {shares: 0}, sec: {functions: x}, foo: {}}\nextra: 1\n",
        encoding="utf-8",
    )
    with pytest.raises(InvalidConfig) as caught:
        load_config_file(path)
    paths = [error.path for error in caught.value.errors]
    assert paths == [
        "version",
        "scanInterval",
        "registration",
        "log.level",
        "engines.hpre.shares",
        "engines.sec.functions",
        "engines.foo",
        "extra",
    ]
    lines = str(caught.value).splitlines()
    assert len(lines) == len(paths)
    assert all(line.startswith(f"{path}: ") for line in lines)
    assert check_config(path) == lines


def test_odd_keys_are_quoted_so_each_error_stays_on_one_line() -> None:
    """A key holding a newline or nothing at all is shown quoted, never splitting the report."""
    with pytest.raises(InvalidConfig) as caught:
        parse_config({"version": "v1", "a\nb": 1, "": 2, "log": {" level": "x"}}, "odd.yaml")
    assert [e.path for e in caught.value.errors] == ["'a\\nb'", "''", "log.' level'"]
    assert len(str(caught.value).splitlines()) == 3


def test_invalid_config_is_one_of_the_daemons_own_errors() -> None:
    """Callers can catch every deliberate refusal, configuration included, by one base class."""
    assert issubclass(InvalidConfig, KaeDevicePluginError)


def test_long_values_are_shortened_in_messages() -> None:
    """A huge bad value does not flood the log: the message shows only its start."""
    (error,) = errors_of(f"registration: {'x' * 5000}")
    assert len(error[1]) < 200


# ---- whole-file failures -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"version: v1\nscanInterval: [1s\n", "invalid YAML at line 3, column 1"),
        (b"- version\n- v1\n", "the top level must be a mapping of settings"),
        (b"just text", "the top level must be a mapping of settings"),
        (b"", "the file is empty; it needs at least version: v1"),
        (b"# only a comment\n", "the file is empty"),
        (b"version: v1\n---\nversion: v1\n", "invalid YAML"),
        (b"version: !!python/object/apply:os.system [id]\n", "could not determine a constructor"),
        (b"version: v1\n\xff\xfe", "is not UTF-8 text"),
        (b"version: v1\nx: 2023-02-30\n", "a value cannot be read"),
        (b"version: v1\ncdi: " + b"9" * 5000 + b"\n", "a value cannot be read"),
    ],
)
def test_unusable_files_are_invalid_config(tmp_path: Path, content: bytes, message: str) -> None:
    """Syntax errors, unsafe tags, non-mappings and bad encodings all raise InvalidConfig."""
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(InvalidConfig) as caught:
        load_config_file(path)
    (line,) = caught.value.lines()
    assert line.startswith(f"{path}: ")
    assert message in line


def test_a_missing_or_unreadable_file_is_invalid_config(tmp_path: Path) -> None:
    """A path that cannot be read is reported as such, not as a traceback."""
    with pytest.raises(InvalidConfig, match="No such file or directory"):
        load_config_file(tmp_path / "absent.yaml")
    with pytest.raises(InvalidConfig, match="cannot read: Is a directory"):
        load_config_file(tmp_path)
    assert check_config(tmp_path / "absent.yaml") == [
        f"{tmp_path / 'absent.yaml'}: cannot read: No such file or directory"
    ]


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    """A file far larger than any real configuration is refused before parsing."""
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"version: v1\n" + b"#" * MAX_FILE_BYTES)
    with pytest.raises(InvalidConfig, match="larger than"):
        load_config_file(path)


def test_yaml_merge_keys_are_not_duplicates() -> None:
    """Keys merged in with << may be overridden without counting as duplicates."""
    s = resolved("engines:\n  hpre: &h {shares: 2, enabled: false}\n  sec: {<<: *h, shares: 3}\n")
    assert s.engine("sec") == EngineSettings(enabled=False, shares=3)


# ---- precedence ----------------------------------------------------------------------------------


def test_overrides_beat_the_file_which_beats_defaults() -> None:
    """flags/env > file > defaults, key by key, including inside engines and env."""
    f = parse(
        "scanInterval: 5s\nregistration: plugin-watcher\n"
        "engines: {hpre: {shares: 4, functions: vf}}\nenv: {uadkNumaHint: true}"
    )
    s = resolve_settings(
        f,
        {
            "scan_interval": "250ms",
            "engines": {"hpre": {"shares": 8}},
            "env": {"openssl_engines": "/e"},
        },
    )
    assert s.scan_interval == 0.25  # override
    assert s.registration == "plugin-watcher"  # file
    assert s.metrics_address == ":9410"  # default
    assert s.engine("hpre") == EngineSettings(enabled=True, shares=8, functions="vf")
    assert s.env == EnvSettings(uadk_numa_hint=True, openssl_engines="/e")


def test_overrides_accept_cli_and_environment_spellings() -> None:
    """Overrides may arrive as strings (env vars) or typed values (click); both convert."""
    s = resolve_settings(
        None,
        {
            "sysfs_root": Path("/host/sys"),
            "dev_root": "/host/dev",
            "cdi": "TRUE",
            "container_sysfs_view": False,
            "scan_interval": 3,
            "nfd_features_file": "",
            "engines": {"zip": {"shares": "4", "enabled": "off"}},
        },
    )
    assert (s.sysfs_root, s.dev_root) == (Path("/host/sys"), Path("/host/dev"))
    assert (s.cdi, s.container_sysfs_view, s.scan_interval) == (True, False, 3.0)
    assert s.nfd_features_file is None
    assert s.engine("zip") == EngineSettings(enabled=False, shares=4)


def test_bad_overrides_are_all_listed_under_their_flag_or_variable_names() -> None:
    """A bad flag value fails like a bad file value, naming the flag or variable."""
    with pytest.raises(InvalidConfig) as caught:
        resolve_settings(
            parse("scanInterval: 2s"),
            {
                "scan_interval": "0s",
                "log_level": "loud",
                "engines": {"hpre": {"shares": 99}, "qat": {}},
                "lgo_format": "json",
            },
            sources={"log_level": "KAE_DP_LOG_LEVEL"},
        )
    assert caught.value.source is None
    assert [str(e) for e in caught.value.errors] == [
        "--scan-interval: must be more than 0s and at most 1h (got '0s')",
        "KAE_DP_LOG_LEVEL: must be one of debug, info, warning, error (got 'loud')",
        "--engines.hpre.shares: must be a whole number from 1 to 64 (got 99)",
        "--engines.qat: unknown key; expected hpre, sec, zip",
        "--lgo-format: unknown setting 'lgo_format'; did you mean 'log_format'?",
    ]


def test_an_override_equal_to_none_resets_a_derived_path() -> None:
    """None for a derived path restores the kubelet-root default even if the file set one."""
    s = resolve_settings(parse("paths: {devicePluginDir: /dp}"), {"device_plugin_dir": None})
    assert s.effective_device_plugin_dir == Path("/var/lib/kubelet/device-plugins")


def test_none_is_not_a_value_for_required_settings() -> None:
    """Only nullable settings take None; elsewhere it is an error, not a silent default."""
    with pytest.raises(InvalidConfig, match="--scan-interval: must be a number of seconds"):
        resolve_settings(None, {"scan_interval": None})


# ---- engine lists ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hpre", {"hpre"}),
        ("hpre,sec", {"hpre", "sec"}),
        (" HPRE , zip ,", {"hpre", "zip"}),
        ("sec zip sec", {"sec", "zip"}),
    ],
)
def test_parse_engine_list_accepts_names(text: str, expected: set[str]) -> None:
    """Engine lists split on commas or spaces, ignore case and repeats."""
    assert parse_engine_list(text) == frozenset(expected)


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("", ["--enable-engines: names no engine; known engines: hpre, sec, zip (got '')"]),
        (" , ", ["--enable-engines: names no engine; known engines: hpre, sec, zip (got ' , ')"]),
        ("hpre,sce", ["--enable-engines: unknown engine; did you mean 'sec'? (got 'sce')"]),
        (
            "qat,gpu",
            [
                "--enable-engines: unknown engine; known: hpre, sec, zip (got 'qat')",
                "--enable-engines: unknown engine; known: hpre, sec, zip (got 'gpu')",
            ],
        ),
    ],
)
def test_parse_engine_list_rejects_unknown_names(text: str, lines: list[str]) -> None:
    """Every unknown engine is reported, with a did-you-mean for a typo."""
    with pytest.raises(InvalidConfig) as caught:
        parse_engine_list(text)
    assert caught.value.lines() == lines


def test_enable_only_enables_exactly_the_named_engines() -> None:
    """The enable-list override enables what it names, disables the rest, keeps other keys."""
    f = parse("engines: {hpre: {enabled: false, shares: 3}, zip: {shares: 2}}")
    s = resolve_settings(f, {"engines": enable_only(parse_engine_list("hpre,sec"))})
    assert s.engine("hpre") == EngineSettings(enabled=True, shares=3)
    assert s.engine("sec") == EngineSettings(enabled=True)
    assert s.engine("zip") == EngineSettings(enabled=False, shares=2)


@pytest.mark.parametrize(
    ("functions", "has_vfs", "pf", "vf"),
    [
        ("all", True, True, True),
        ("all", False, True, False),
        ("pf", True, True, False),
        ("vf", True, False, True),
        ("prefer-vf", True, False, True),
        ("prefer-vf", False, True, False),
    ],
)
def test_functions_choose_which_pci_functions_are_served(
    functions: Functions, has_vfs: bool, pf: bool, vf: bool
) -> None:
    """prefer-vf serves only VFs when the engine has any, else its PFs; the others are literal."""
    parent = device("0000:79:00.0", 0)
    child = device("0000:79:00.1", 0, parent="0000:79:00.0")
    devices = (parent, child) if has_vfs else (parent,)
    view = build_view("openfuyao.com/kae.hpre", devices, EngineSettings(functions=functions))
    served = {d.device.function for d in view.devices}
    assert (Function.PF in served, Function.VF in served) == (pf, vf)


# ---- durations and did-you-mean ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1, 1.0),
        (0.5, 0.5),
        ("2", 2.0),
        ("1.5", 1.5),
        (".5s", 0.5),
        ("500ms", 0.5),
        ("1s", 1.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1h2m3s", 3723.0),
        ("1.5m", 90.0),
        ("250us", 250e-6),
        ("250µs", 250e-6),
        ("10ns", 1e-8),
        ("-1s", -1.0),
        (" 3s ", 3.0),
        (10**400, math.inf),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    """Numbers are seconds; strings follow Go's duration syntax, units summed."""
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "s", "1 s", "1d", "1m30", "ms", "1.2.3s", "1e3s", "--1s"])
def test_parse_duration_rejects_garbage(value: str) -> None:
    """Anything but a number or a Go-style duration is a ValueError with a hint."""
    with pytest.raises(ValueError, match="duration such as 500ms"):
        parse_duration(value)


@pytest.mark.parametrize("value", [None, True, [1], {"s": 1}, float("nan")])
def test_parse_duration_rejects_non_numbers(value: object) -> None:
    """Booleans, containers and NaN are not durations."""
    with pytest.raises(ValueError, match="number"):
        parse_duration(value)


@given(st.integers(min_value=1, max_value=3_600_000))
def test_milliseconds_round_trip(millis: int) -> None:
    """``<n>ms`` is n thousandths of a second, for any n in range."""
    assert parse_duration(f"{millis}ms") == pytest.approx(millis / 1000)


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("scaninterval", "scanInterval"),
        ("scan_interval", "scanInterval"),
        ("scanIntervall", "scanInterval"),
        ("regstration", "registration"),
        ("SCAN-INTERVAL", "scanInterval"),
        ("banana", None),
        ("", None),
    ],
)
def test_did_you_mean(word: str, expected: str | None) -> None:
    """Typos, other casings and snake_case map to the key meant; unrelated words to nothing."""
    assert did_you_mean(word, ["version", "scanInterval", "registration", "cdi"]) == expected


# ---- reload diffs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old_text", "new_text", "expected"),
    [
        ("", "scanInterval: 9s\nengines: {hpre: {shares: 3}}\ncdi: true", []),
        ("", 'metricsAddress: ":9999"', ["metrics_address"]),
        ("", "registration: plugin-watcher", ["registration"]),
        ("", "paths: {sysfsRoot: /s, cdiDir: /c}", ["sysfs_root", "cdi_dir"]),
        (
            "",
            "paths: {kubeletRoot: /k}",
            ["kubelet_root", "device_plugin_dir", "pod_resources_socket"],
        ),
        ("", "paths: {devicePluginDir: /var/lib/kubelet/device-plugins}", []),
        ("", "paths: {nfdFeaturesFile: null, stateDir: /st}", ["state_dir", "nfd_features_file"]),
    ],
)
def test_restart_required(old_text: str, new_text: str, expected: list[str]) -> None:
    """Paths, the metrics address and registration cannot change live; derived paths compare
    by their effective value."""
    assert restart_required(resolved(old_text), resolved(new_text)) == expected


def test_check_config_of_a_valid_file_is_empty(tmp_path: Path) -> None:
    """check-config finds nothing wrong in a valid file."""
    path = tmp_path / "ok.yaml"
    path.write_text("version: v1\nengines: {zip: {enabled: false}}\n", encoding="utf-8")
    assert check_config(path) == []


# ---- robustness ----------------------------------------------------------------------------------

KNOWN_KEYS = [
    "version",
    "scanInterval",
    "registration",
    "allocationPolicy",
    "containerSysfsView",
    "cdi",
    "metricsAddress",
    "log",
    "level",
    "format",
    "paths",
    "sysfsRoot",
    "devicePluginDir",
    "nfdFeaturesFile",
    "engines",
    "hpre",
    "sec",
    "zip",
    "enabled",
    "shares",
    "functions",
    "env",
    "uadkNumaHint",
    "opensslEngines",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.builds(lambda sign: sign * 10**5000, st.sampled_from([1, -1])),  # too long for str()
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["v1", "1s", "500ms", "/sys", ":9410", "[::]:1", "all", "prefer-vf", "auto"]),
    st.dates(),
    st.binary(max_size=8),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=12), st.integers(), st.none())
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=6)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(keys, documents, max_size=8), st.booleans())
def test_random_mappings_only_ever_raise_invalid_config(
    data: dict[object, object], add_version: bool
) -> None:
    """Whatever a loaded document holds, parsing either succeeds with a complete overlay that
    resolves, or raises InvalidConfig, never anything else."""
    if add_version:
        data["version"] = "v1"
    try:
        f = parse_config(data, "random.yaml")
    except InvalidConfig as exc:
        assert exc.errors and all(isinstance(e, ConfigError) for e in exc.errors)
        assert len(str(exc).splitlines()) == len(exc.errors)
        return
    assert isinstance(resolve_settings(f, {}), Settings)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, documents, max_size=8))
def test_random_yaml_text_only_ever_raises_invalid_config(data: dict[object, object]) -> None:
    """The same holds end to end through YAML text, including the loader."""
    try:
        text = yaml.safe_dump(data, allow_unicode=True)
    except (yaml.YAMLError, ValueError):  # not representable: odd keys, ints too long for str()
        return
    with contextlib.suppress(InvalidConfig):
        parse_config_text(text, "random.yaml")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab1:-[]{}&*!|>'\"#%@`,? \n\tv"), max_size=60))
def test_random_text_only_ever_raises_invalid_config(text: str) -> None:
    """Arbitrary, mostly malformed YAML text is refused with InvalidConfig, never a crash."""
    with contextlib.suppress(InvalidConfig):
        parse_config_text(text, "random.yaml")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(SETTING_RULES)), scalars, max_size=6))
def test_random_overrides_only_ever_raise_invalid_config(overrides: dict[str, object]) -> None:
    """Overrides go through the same rules and fail the same single way."""
    try:
        s = resolve_settings(None, overrides)
    except InvalidConfig:
        return
    assert isinstance(s, Settings)
