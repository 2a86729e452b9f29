"""A small Prometheus exporter for NVIDIA GPUs through NVML (nvidia-ml-py), for hosts whose
bundle carries no dcgm-exporter.

    python -m service.nvml_exporter --listen 0.0.0.0 --port 9400

Per GPU: memory used/total, utilisation, temperature, power and its limit, clocks, ECC error
counts and XID events. Values are read at scrape time (a custom collector, no polling loop);
XID errors arrive as NVML events, so a thread waits for them and counts them per XID code.
A query a GPU does not support is left out for that GPU, not reported as zero.
"""

import argparse
import logging
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("service.nvml_exporter")
P = "pli_gpu_"


class XidWatcher:
    """Counts XID critical-error events per (GPU index, XID code), from a background thread."""

    def __init__(self, nvml: ModuleType, handles: list[Any]) -> None:
        self.nvml = nvml
        self.counts: dict[tuple[int, int], int] = {}
        self.supported = False
        self._lock = threading.Lock()
        self._index = {}
        self._events = nvml.nvmlEventSetCreate()
        for i, handle in enumerate(handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
            except nvml.NVMLError as exc:
                log.warning("GPU %d: XID events unavailable (%s)", i, exc)
                continue
            self.supported = True
            self._index[_uuid(nvml, handle)] = i

    def snapshot(self) -> dict[tuple[int, int], int]:
        with self._lock:
            return dict(self.counts)

    def wait_once(self, timeout_ms: int = 5000) -> None:
        try:
            event = self.nvml.nvmlEventSetWait_v2(self._events, timeout_ms)
        except self.nvml.NVMLError_Timeout:
            return
        gpu = self._index.get(_uuid(self.nvml, event.device), -1)
        with self._lock:
            key = (gpu, int(event.eventData))
            self.counts[key] = self.counts.get(key, 0) + 1
        log.error("GPU %d: XID %d", gpu, event.eventData)

    def run(self) -> None:
        while True:
            try:
                self.wait_once()
            except self.nvml.NVMLError as exc:  # keep exporting the rest; retry after a pause
                log.warning("waiting for XID events failed: %s", exc)
                time.sleep(5)


def _uuid(nvml: ModuleType, handle: Any) -> str:
    value = nvml.nvmlDeviceGetUUID(handle)
    return value.decode() if isinstance(value, bytes) else str(value)


def _memory(nvml: ModuleType, handle: Any) -> Any:
    """Memory info v2 where the driver has it: its `used` leaves out the driver's reserved memory
    (as nvidia-smi shows it); v1's `used` counts it (615 MiB on an idle H200)."""
    v2 = getattr(nvml, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            return nvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
        except nvml.NVMLError:
            pass
    return nvml.nvmlDeviceGetMemoryInfo(handle)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlCollector(Collector):
    def __init__(self, nvml: ModuleType, xids: XidWatcher | None = None) -> None:
        self.nvml = nvml
        self.xids = xids

    def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), or None when this GPU or driver does not support the query."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            log.debug("NVML query failed: %s", exc)
            return None

    def collect(self) -> Iterator[Any]:
        n = self.nvml
        labels = ["gpu", "uuid"]

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(P + name, doc, labels=[*labels, *extra])

        info = gauge("info", "GPU model and driver (value 1)", ("name", "driver"))
        mem_used = gauge("memory_used_bytes", "frame buffer memory in use")
        mem_total = gauge("memory_total_bytes", "frame buffer memory in all")
        mem_reserved = gauge("memory_reserved_bytes", "frame buffer memory the driver reserves")
        util = gauge("utilization_ratio", "share of the last sample period a kernel ran (0-1)")
        mem_util = gauge("memory_utilization_ratio", "share of time memory was read or written (0-1)")
        temp = gauge("temperature_celsius", "GPU core temperature")
        power = gauge("power_watts", "power draw")
        power_limit = gauge("power_limit_watts", "enforced power limit")
        clock = gauge("clock_hz", "current clock", ("clock",))
        ecc = CounterMetricFamily(
            P + "ecc_errors", "ECC errors since the driver loaded", labels=[*labels, "type"]
        )
        xid = CounterMetricFamily(P + "xid_errors", "XID critical errors seen by this exporter",
                                  labels=["gpu", "xid"])
        up = GaugeMetricFamily(P + "nvml_up", "1 if NVML answered this scrape")
        try:
            driver = _text(n.nvmlSystemGetDriverVersion())
            count = n.nvmlDeviceGetCount()
        except n.NVMLError as exc:
            log.warning("NVML unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for i in range(count):
            h = n.nvmlDeviceGetHandleByIndex(i)
            ids = [str(i), _uuid(n, h)]
            info.add_metric([*ids, _text(n.nvmlDeviceGetName(h)), driver], 1)
            mem = self._read(_memory, n, h)
            if mem is not None:
                mem_used.add_metric(ids, mem.used)
                mem_total.add_metric(ids, mem.total)
                if hasattr(mem, "reserved"):
                    mem_reserved.add_metric(ids, mem.reserved)
            rates = self._read(n.nvmlDeviceGetUtilizationRates, h)
            if rates is not None:
                util.add_metric(ids, rates.gpu / 100)
                mem_util.add_metric(ids, rates.memory / 100)
            t = self._read(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
            if t is not None:
                temp.add_metric(ids, t)
            mw = self._read(n.nvmlDeviceGetPowerUsage, h)
            if mw is not None:
                power.add_metric(ids, mw / 1000)
            limit = self._read(n.nvmlDeviceGetEnforcedPowerLimit, h)
            if limit is not None:
                power_limit.add_metric(ids, limit / 1000)
            for name, kind in (("graphics", n.NVML_CLOCK_GRAPHICS), ("sm", n.NVML_CLOCK_SM),
                               ("memory", n.NVML_CLOCK_MEM)):
                mhz = self._read(n.nvmlDeviceGetClockInfo, h, kind)
                if mhz is not None:
                    clock.add_metric([*ids, name], mhz * 1e6)
            for name, kind in (("corrected", n.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                               ("uncorrected", n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
                errors = self._read(n.nvmlDeviceGetTotalEccErrors, h, kind, n.NVML_VOLATILE_ECC)
                if errors is not None:
                    ecc.add_metric([*ids, name], errors)
        if self.xids is not None and self.xids.supported:
            for (gpu, code), value in sorted(self.xids.snapshot().items()):
                xid.add_metric([str(gpu), str(code)], value)
        yield from (up, info, mem_used, mem_total, mem_reserved, util, mem_util, temp, power, power_limit, clock,
                    ecc, xid)


def registry(nvml: ModuleType, watch_xids: bool = True) -> CollectorRegistry:
    """A registry with the NVML collector; with watch_xids, a daemon thread counts XID events."""
    nvml.nvmlInit()
    xids = None
    if watch_xids:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        xids = XidWatcher(nvml, handles)
        if xids.supported:
            threading.Thread(target=xids.run, name="xid-events", daemon=True).start()
    reg = CollectorRegistry()
    reg.register(NvmlCollector(nvml, xids))
    return reg


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="0.0.0.0", help="address to serve /metrics on")
    parser.add_argument("--port", type=int, default=9400, help="port (dcgm-exporter's default)")
    parser.add_argument("--no-xid-events", action="store_true", help="do not wait for XID events")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import pynvml  # only the exporter needs NVML; the gateway imports nothing of this

    reg = registry(pynvml, watch_xids=not args.no_xid_events)
    _server, thread = start_http_server(args.port, args.listen, registry=reg)
    log.info("serving GPU metrics on http://%s:%d/metrics", args.listen, args.port)
    thread.join()


if __name__ == "__main__":
    main()
