"""service/nvml_exporter.py against a stand-in NVML module: the metrics and their units, an
unsupported query left out (not zero), NVML failing, and XID events counted per code."""

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service import nvml_exporter


class FakeNVML:
    """Two GPUs; GPU 1 cannot report power. Mirrors pynvml's names and units (mW, MHz, %)."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # pynvml's names
        pass

    class NVMLError_Timeout(NVMLError):
        pass

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC = 0
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken
        self.events: list[SimpleNamespace] = []

    def nvmlInit(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        if self.broken:
            raise self.NVMLError("Driver Not Loaded")
        return "580.159.04"

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-{h:04d}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    nvmlMemory_v2 = 0x2000028

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> SimpleNamespace:
        # v1 counts the driver's reserved memory as used; v2 reports it apart.
        reserved = 615 * 2**20
        if version == self.nvmlMemory_v2:
            return SimpleNamespace(used=(h + 1) * 2**30, total=143771 * 2**20, reserved=reserved)
        return SimpleNamespace(used=(h + 1) * 2**30 + reserved, total=143771 * 2**20)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 41 + h

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise self.NVMLError_NotSupported("Not Supported")
        return 123456

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700000

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return {0: 1980, 1: 1980, 2: 3201}[kind]

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return 3 if kind == self.NVML_MEMORY_ERROR_TYPE_CORRECTED else 0

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, h: int, mask: int, events: str) -> None:
        pass

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> SimpleNamespace:
        if not self.events:
            raise self.NVMLError_Timeout("Timeout")
        return self.events.pop(0)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_per_gpu_in_base_units() -> None:
    got = _samples(nvml_exporter.registry(FakeNVML(), watch_xids=False))  # type: ignore[arg-type]
    g0 = (("gpu", "0"), ("uuid", "GPU-0000"))
    assert got[("pli_gpu_nvml_up", ())] == 1
    assert got[("pli_gpu_memory_used_bytes", g0)] == 2**30
    assert got[("pli_gpu_memory_total_bytes", g0)] == 143771 * 2**20
    assert got[("pli_gpu_memory_reserved_bytes", g0)] == 615 * 2**20
    assert got[("pli_gpu_utilization_ratio", g0)] == 0.87
    assert got[("pli_gpu_temperature_celsius", (("gpu", "1"), ("uuid", "GPU-0001")))] == 42
    assert got[("pli_gpu_power_watts", g0)] == 123.456
    assert got[("pli_gpu_power_limit_watts", g0)] == 700
    assert got[("pli_gpu_clock_hz", (("clock", "memory"), *g0))] == 3201e6
    assert got[("pli_gpu_ecc_errors_total", (("gpu", "0"), ("type", "corrected"), ("uuid", "GPU-0000")))] == 3
    info = (("driver", "580.159.04"), ("gpu", "0"), ("name", "NVIDIA H200"), ("uuid", "GPU-0000"))
    assert got[("pli_gpu_info", info)] == 1
    # GPU 1 does not support a power reading: no sample, rather than a misleading 0.
    assert ("pli_gpu_power_watts", (("gpu", "1"), ("uuid", "GPU-0001"))) not in got


def test_nvml_failing_is_reported_not_raised() -> None:
    reg = CollectorRegistry()
    reg.register(nvml_exporter.NvmlCollector(FakeNVML(broken=True)))  # type: ignore[arg-type]
    got = _samples(reg)
    assert got == {("pli_gpu_nvml_up", ()): 0}


def test_xid_events_are_counted_per_gpu_and_code() -> None:
    nvml = FakeNVML()
    watcher = nvml_exporter.XidWatcher(nvml, [0, 1])  # type: ignore[arg-type]
    nvml.events = [SimpleNamespace(device=1, eventData=79), SimpleNamespace(device=1, eventData=79),
                   SimpleNamespace(device=0, eventData=48)]
    for _ in range(4):  # the fourth wait times out: nothing counted
        watcher.wait_once()
    reg = CollectorRegistry()
    reg.register(nvml_exporter.NvmlCollector(nvml, watcher))  # type: ignore[arg-type]
    got = _samples(reg)
    assert got[("pli_gpu_xid_errors_total", (("gpu", "1"), ("xid", "79")))] == 2
    assert got[("pli_gpu_xid_errors_total", (("gpu", "0"), ("xid", "48")))] == 1
