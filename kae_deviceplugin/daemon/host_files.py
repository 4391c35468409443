"""At exit, remove the files the daemon wrote on the host, unless a container may still need them.

The daemon writes three things outside its sockets: the container sysfs view (under the state
dir), the CDI spec and the NFD feature file. Left behind, an uninstalled plugin would leave them
on every node. They are not removed while a container holds one of our devices: the kubelet hands
a restarted container the same Allocate answer from its checkpoint, naming the view and the CDI
devices again, and a running container has the view directory itself bind-mounted, so a new
directory made by the next daemon (after an upgrade) would never reach it. When the kubelet
cannot say (pod-resources unavailable), everything is kept: a wrong removal breaks workloads, a
wrong keep only leaves small files that the next daemon rewrites.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container import cdi, safe_fs
from kae_deviceplugin.container.sysfs_view import VIEW_DIR_NAME
from kae_deviceplugin.kubelet.podresources import PodResourcesUnavailable, list_allocations

log = logging.getLogger("kae_deviceplugin.daemon.supervisor")


def written_files(settings: Settings) -> list[tuple[Path, str]]:
    """(directory, entry) of every host file this configuration writes."""
    entries: list[tuple[Path, str]] = []
    if settings.container_sysfs_view:
        entries.append((settings.state_dir, VIEW_DIR_NAME))
    if settings.cdi:
        entries.append((settings.cdi_dir, cdi.SPEC_FILE))
    if settings.nfd_features_file is not None:
        entries.append((settings.nfd_features_file.parent, settings.nfd_features_file.name))
    return entries


def remove_written_files(settings: Settings) -> list[Path]:
    """Remove them (through directory descriptors, never following a link); those removed."""
    removed: list[Path] = []
    for directory, name in written_files(settings):
        try:
            with safe_fs.open_root(directory, create=False) as fd:
                if not _exists(fd, name):
                    continue
                safe_fs.remove_entry(fd, name)
        except OSError as err:  # a missing or foreign directory: nothing of ours to remove
            log.debug("not removing %s: %s", directory / name, err)
            continue
        removed.append(directory / name)
    return removed


def _exists(dir_fd: int, name: str) -> bool:
    with contextlib.suppress(FileNotFoundError):
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    return False


async def remove_if_unused(settings: Settings) -> None:
    """The exit step: remove the written files when no container holds one of our devices."""
    socket = settings.effective_pod_resources_socket
    try:
        held = await list_allocations(socket)
    except PodResourcesUnavailable as err:
        log.info("keeping the container view, CDI spec and NFD file: pod-resources: %s", err)
        return
    except Exception as err:  # anything else from gRPC: unknown, so keep (and exit cleanly)
        log.info(
            "keeping the container view, CDI spec and NFD file: %s: %s", type(err).__name__, err
        )
        return
    if held.rows:
        holders = len({row.holder for row in held.rows})
        log.info(
            "keeping the container view, CDI spec and NFD file: %d containers hold KAE devices",
            holders,
        )
        return
    for path in remove_written_files(settings):
        log.info("removed %s (no container holds a KAE device)", path)
