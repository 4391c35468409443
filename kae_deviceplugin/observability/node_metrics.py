"""The node's KAE facts as metrics (issue 37), read at scrape time like the device gauges.

* ``kae_node_info{cpu, sva}``: always 1; the CPU as MIDR_EL1 names it (``HiSilicon Kunpeng
  920``, ``unknown``) and whether the node's devices run with SVA (``true``, ``false``,
  ``mixed``, empty without devices);
* ``kae_driver_module_info{engine, module, provenance, version, uacce_mode, pf_q_num}``: 1 per
  engine whose driver the kernel knows (``provenance`` ``out-of-tree``, ``in-tree`` or
  ``built-in``; a label the module does not show is empty);
* ``kae_devices_without_sva{engine}``: per engine with devices, how many run without SVA;
* ``kae_cma_total_bytes``, ``kae_cma_free_bytes``: only where a device runs without SVA (its
  queues' memory comes from CMA) and ``/proc/meminfo`` shows CMA;
* ``kae_engine_absent{engine, likely_cause}``: 1 per engine without devices whose functions
  are on the bus, or on a HiSilicon CPU are not, with its likely cause (the NFD label's value).

A handful of series per node, none per device.
"""

from __future__ import annotations

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.node_facts import NodeFacts, engine_sva
from kae_deviceplugin.prometheus_lite import GaugeMetricFamily, Metric


def _shown(value: object) -> str:
    return "" if value is None else str(value)


def node_fact_families(facts: NodeFacts, inventory: Inventory) -> list[Metric]:
    """The families above for one node at one moment."""
    node = GaugeMetricFamily(
        "kae_node_info",
        "The node's KAE facts (always 1): its CPU and whether its devices run with SVA.",
        labels=["cpu", "sva"],
    )
    node.add_metric([facts.cpu.describe(), _shown(engine_sva(inventory))], 1)
    modules = GaugeMetricFamily(
        "kae_driver_module_info",
        "An engine's kernel driver as /sys/module shows it (always 1): provenance "
        "(out-of-tree, in-tree, built-in), version, uacce_mode, pf_q_num.",
        labels=["engine", "module", "provenance", "version", "uacce_mode", "pf_q_num"],
    )
    without = GaugeMetricFamily(
        "kae_devices_without_sva",
        "Devices of the engine that run without SVA (their queues' memory comes from CMA).",
        labels=["engine"],
    )
    for engine in ENGINES:
        driver = facts.drivers.get(engine.name)
        if driver is not None and driver.loaded:
            version = driver.version or driver.srcversion
            labels = [engine.name, driver.driver, _shown(driver.provenance), _shown(version)]
            modules.add_metric([*labels, _shown(driver.uacce_mode), _shown(driver.pf_q_num)], 1)
        devices = [d for d in inventory if d.engine == engine.name]
        if devices:
            without.add_metric([engine.name], sum(d.sva is False for d in devices))
    families: list[Metric] = [node, modules, without]
    if facts.without_sva(inventory) and facts.cma.total is not None:
        families.append(
            GaugeMetricFamily(
                "kae_cma_total_bytes", "CmaTotal of /proc/meminfo.", value=facts.cma.total
            )
        )
        families.append(
            GaugeMetricFamily(
                "kae_cma_free_bytes",
                "CmaFree of /proc/meminfo: what devices without SVA can still take.",
                value=facts.cma.free or 0,
            )
        )
    absent = GaugeMetricFamily(
        "kae_engine_absent",
        "An engine with no device here (always 1), with its likely cause.",
        labels=["engine", "likely_cause"],
    )
    for absence in facts.absent:
        absent.add_metric([absence.engine, absence.cause], 1)
    return [*families, absent]
