"""`kae-deviceplugin doctor`'s options and how they become what to check.

doctor reads the settings as serve does (``--config``, then ``KAE_DP_*``, then flags), so the
DaemonSet's own arguments and environment point it at the same roots, the same mode, node and
kubeconfig. Its older options keep their behaviour: defaults shown in ``--help``, an empty
``--metrics-address`` or ``--nfd-features-file`` skips that check, and a metrics address is
judged by the daemon check (a row) rather than refused. Nothing heavy is imported here: the
checks (and, in DRA mode only, the API client) load when the command runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from kae_deviceplugin.cli.options import (
    dev_root_option,
    kubelet_root_option,
    option,
    output_option,
    sysfs_root_option,
)
from kae_deviceplugin.cli.serve import config_option, setting_option, settings_or_exit
from kae_deviceplugin.config.schema import default_of
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.observability import logs

# The parameters that are settings; --metrics-address is not among them (see the docstring).
_SETTINGS = ("sysfs_root", "dev_root", "kubelet_root", "nfd_features_file", "mode", "state_dir")
_DRA_SETTINGS = ("node_name", "kubeconfig", "cdi_dir")
_GIVEN = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)


def _settings(ctx: click.Context, config_path: Path | None, params: dict[str, Any]) -> Settings:
    """The settings serve would run with; exit 2 listing every bad value, as serve does."""
    named = {k: str(v) if isinstance(v, Path) else v for k, v in params.items()}
    chosen = {k: named[k] for k in (*_SETTINGS, *_DRA_SETTINGS)}
    return settings_or_exit(ctx, config_path, chosen).settings


@click.command("doctor")
@config_option
@sysfs_root_option
@dev_root_option
@kubelet_root_option
@option(
    "--metrics-address",
    default=default_of("metrics_address"),
    show_default=True,
    help="Where a running daemon serves /readyz; empty skips the daemon check.",
)
@option(
    "--nfd-features-file",
    default=str(default_of("nfd_features_file")),
    show_default=True,
    help="The NFD feature file the daemon writes; empty skips the check.",
)
@setting_option("mode")
@setting_option("state_dir")
@setting_option("node_name")
@setting_option("kubeconfig")
@setting_option("cdi_dir")
@output_option
@click.pass_context
def doctor_command(
    ctx: click.Context, /, config_path: Path | None, output: str, **params: Any
) -> None:
    """Explain why this node shows fewer KAE devices than expected; exit 1 if something blocks.

    With --mode dra (or the setting from KAE_DP_MODE or --config) it checks the DRA driver:
    its registration with the kubelet, its ResourceSlices in the API, its checkpoint and CDI
    specs, instead of the device plugin's sockets.
    """
    from kae_deviceplugin.cli import doctor  # noqa: PLC0415 -- only this command needs it
    from kae_deviceplugin.daemon.vf_profiles import profiles_of  # noqa: PLC0415 -- as doctor

    logs.configure("error", "text")
    settings = _settings(ctx, config_path, params)
    metrics = params["metrics_address"]
    if ctx.get_parameter_source("metrics_address") not in _GIVEN and config_path is not None:
        metrics = settings.metrics_address  # the file's, when neither flag nor variable says
    targets = doctor.Targets(
        sysfs_root=settings.sysfs_root,
        dev_root=settings.dev_root,
        kubelet_root=settings.kubelet_root,
        metrics_address=metrics,
        nfd_features_file=settings.nfd_features_file,
        mode=settings.mode,
        node_name=settings.node_name or os.environ.get("NODE_NAME") or None,
        kubeconfig=settings.kubeconfig,
        cdi_dir=settings.cdi_dir,
        runtime_config=settings.runtime_config,
        cdi=settings.cdi,
        state_dir=settings.state_dir,
        vf_profiles=profiles_of(settings),
        pod_resources_socket=settings.effective_pod_resources_socket,
    )
    rows = doctor.run_checks(targets)
    click.echo(doctor.render_json(rows) if output == "json" else doctor.render_table(rows))
    raise SystemExit(1 if doctor.blocking(rows) else 0)
