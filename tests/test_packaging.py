"""The package metadata: an SPDX licence, the licence text shipped, project URLs."""

from __future__ import annotations

import configparser
import email.parser
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def test_licence_is_an_spdx_expression_with_its_text_in_the_repository() -> None:
    """`license` is the PEP 639 string form, and the LICENSE file it names is Apache-2.0's text."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    urls = project["urls"]
    assert isinstance(urls, dict) and {"Homepage", "Source", "Issues"} <= urls.keys()
    assert all(str(url).startswith("https://") for url in urls.values())


def test_built_wheel_carries_the_licence_expression_text_and_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wheel pip builds has License-Expression, Project-URL and the licence text."""
    buildapi = pytest.importorskip("flit_core.buildapi")
    monkeypatch.chdir(ROOT)
    wheel = zipfile.ZipFile(tmp_path / buildapi.build_wheel(str(tmp_path)))
    dist_info = next(n.split("/")[0] for n in wheel.namelist() if ".dist-info/" in n)
    metadata = email.parser.Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["License"] is None  # the pre-PEP 639 free-text field is gone
    labels = {url.split(",")[0] for url in metadata.get_all("Project-URL") or []}
    assert {"Homepage", "Source", "Issues"} <= labels
    assert wheel.read(f"{dist_info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()


def test_one_version_for_the_package_the_chart_and_the_image() -> None:
    """kae_deviceplugin.__version__ is the one source: the chart's appVersion states it, and the
    image build reads it (scripts/build-image.sh) rather than a second copy."""
    import yaml

    from kae_deviceplugin import __version__

    chart = yaml.safe_load((ROOT / "deploy/helm/kae-device-plugin/Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    build = (ROOT / "scripts/build-image.sh").read_text()
    assert "kae_deviceplugin/__init__.py" in build and "__version__" in build


def test_the_wheel_installs_the_kubectl_plugin_and_its_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip installs what the wheel's metadata lists: the kubectl-kae console script (so
    `kubectl kae` works once the environment's bin is on PATH) and the `kubectl` extra that
    brings the CEL library `why` needs."""
    buildapi = pytest.importorskip("flit_core.buildapi")
    monkeypatch.chdir(ROOT)
    wheel = zipfile.ZipFile(tmp_path / buildapi.build_wheel(str(tmp_path)))
    dist_info = next(n.split("/")[0] for n in wheel.namelist() if ".dist-info/" in n)
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.read(f"{dist_info}/entry_points.txt").decode())
    assert entry_points["console_scripts"]["kubectl-kae"] == "kae_deviceplugin.kubectl.main:main"
    metadata = email.parser.Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
    assert "kubectl" in (metadata.get_all("Provides-Extra") or [])
    requires = metadata.get_all("Requires-Dist") or []
    assert any(r.startswith("cel-python") and 'extra == "kubectl"' in r for r in requires)
    assert "kae_deviceplugin/kubectl/main.py" in wheel.namelist()


def test_the_image_installs_the_kubectl_extra() -> None:
    """The Dockerfile installs the wheel with the `kubectl` extra, and checks the script runs."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "[kubectl]" in dockerfile
    assert "kubectl-kae --version" in dockerfile


def _imported_modules(path: Path) -> set[str]:
    """The ``kae_deviceplugin`` modules a source file imports (at any depth of its code)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.startswith("kae_deviceplugin.")}


def test_the_wheel_holds_the_product_and_only_the_test_support_demo_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every module of ``kae_deviceplugin.testing`` in the wheel is reached from a module
    outside it (``demo`` runs the emulators), and the chart's build-time tooling is not in it:
    test-only emulators live in tests/support, the chart tooling in scripts/chart_tooling."""
    buildapi = pytest.importorskip("flit_core.buildapi")
    monkeypatch.chdir(ROOT)
    wheel = zipfile.ZipFile(tmp_path / buildapi.build_wheel(str(tmp_path)))
    modules = {
        n.removesuffix(".py").replace("/", ".")
        for n in wheel.namelist()
        if n.startswith("kae_deviceplugin/") and n.endswith(".py")
    }
    testing = {m for m in modules if m.startswith("kae_deviceplugin.testing.")}
    reached = {
        imported
        for m in modules - testing
        for imported in _imported_modules(ROOT / (m.replace(".", "/") + ".py"))
    } & testing
    frontier = set(reached)
    while frontier:
        module = frontier.pop()
        more = _imported_modules(ROOT / (module.replace(".", "/") + ".py")) & testing
        frontier |= more - reached
        reached |= more
    assert testing - {"kae_deviceplugin.testing.__init__"} == reached
    assert not {m for m in modules if m.startswith("kae_deviceplugin.config.chart_")}
