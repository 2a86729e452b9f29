"""Driver branch choice: GPU generation x CUDA version -> branch, or a reason it is impossible."""

from datetime import date
from pathlib import Path

import pytest
import yaml

from installer.gpu import matrix
from installer.gpu.matrix import ImpossiblePair, choose, driver_satisfies, plan_table

TODAY = date(2026, 11, 29)  # the day these expectations were written; EOL dates depend on it
ROLE_DEFAULTS = Path(__file__).parents[3] / "playbooks/roles/nvidia_driver/defaults/main.yml"


@pytest.mark.parametrize(
    ("generation", "cuda", "branch", "modules"),
    [
        ("hopper", "13.0", 580, "open"),  # the H200 machine: R580 open, CUDA 13.0
        ("hopper", "12.4", 580, "open"),  # R550 and R570 are past end of life: the LTSB wins
        ("ampere", "12.2", 580, "open"),  # R535 LTSB ended June 2026
        ("blackwell", "12.8", 580, "open"),  # open modules are the only ones Blackwell has
        ("volta", "12.8", 580, "proprietary"),  # R580 is the last branch for Volta
        ("turing", "13.0", 580, "open"),
        ("kepler", "11.4", 470, "proprietary"),  # R470 is Kepler's last branch
    ],
)
def test_choose_picks_the_live_long_term_branch(
    generation: str, cuda: str, branch: int, modules: str
) -> None:
    c = choose(generation, cuda, today=TODAY)
    assert (c.branch, c.kernel_modules) == (branch, modules)
    assert c.min_driver == matrix.CUDA_MIN_DRIVER[cuda]


def test_a_pinned_branch_is_honoured_when_it_can_serve() -> None:
    c = choose("ampere", "12.2", pin=535, today=date(2026, 1, 15))
    assert (c.branch, c.lifecycle, c.warnings) == (535, "ltsb", [])
    # the same pin after R535's end of life still installs, with a warning
    assert "end of life" in choose("ampere", "12.2", pin=535, today=TODAY).warnings[0]


def test_an_end_of_life_branch_is_chosen_only_when_nothing_else_can_and_says_so() -> None:
    c = choose("kepler", "11.4", today=TODAY)
    assert c.branch == 470 and "end of life" in c.warnings[0]


@pytest.mark.parametrize(
    ("generation", "cuda", "pin", "reason"),
    [
        ("volta", "13.0", None, "CUDA 13.0 does not support volta GPUs"),
        ("pascal", "13.0", None, "use a CUDA version from 11.0 to 12.9"),
        ("kepler", "12.0", None, "use a CUDA version from 11.0 to 11.4"),
        ("kepler", "11.8", None, "no driver branch supports both kepler GPUs"),
        ("blackwell", "12.4", None, "CUDA 12.4 does not support blackwell GPUs"),
        ("hopper", "11.4", None, "CUDA 11.4 does not support hopper GPUs"),
        ("hopper", "13.0", 570, "CUDA 13.0 needs driver >= 580.65.06; branch R570 is too old"),
        ("blackwell", "12.8", 535, "driver branch R535 does not support blackwell GPUs"),
        ("volta", "12.2", 590, "the last branch for volta is R580"),
        ("hopper", "12.7", None, "CUDA 12.7 is not in the driver matrix"),
    ],
)
def test_impossible_pairs_say_why(generation: str, cuda: str, pin: int | None, reason: str) -> None:
    with pytest.raises(ImpossiblePair, match=reason.replace(".", r"\.").replace("(", r"\(")):
        choose(generation, cuda, pin=pin, today=TODAY)


@pytest.mark.parametrize(
    ("installed", "generation", "cuda", "pin", "right"),
    [
        ("580.159.04", "hopper", "13.0", None, True),  # the H200 machine's driver
        ("580.65.06", "hopper", "13.0", None, True),  # exactly CUDA 13.0 GA's minimum
        ("575.57.08", "hopper", "13.0", None, False),  # too old for CUDA 13
        ("570.133.20", "hopper", "12.8", None, True),  # R570 serves CUDA 12.8
        ("570.133.20", "hopper", "12.8", 580, False),  # ... but not a pin to R580
        ("590.44.01", "ampere", "13.0", None, True),  # a newer branch is kept, not replaced
        ("590.44.01", "volta", "12.8", None, False),  # R590 dropped Volta
        ("535.104.05", "volta", "12.2", None, True),
        ("535.104.05", "volta", "13.0", None, False),  # no CUDA 13 on Volta at all
    ],
)
def test_driver_satisfies(
    installed: str, generation: str, cuda: str, pin: int | None, right: bool
) -> None:
    assert driver_satisfies(installed, generation, cuda, pin=pin) is right


def test_plan_table_covers_every_generation() -> None:
    t = plan_table("13.0", today=TODAY)
    assert t["min_driver"] == "580.65.06"
    assert set(t["generations"]) == set(matrix.GENERATIONS)
    assert t["generations"]["hopper"] == {
        "first_branch": 525,
        "last_branch": 0,
        "cuda_ok": True,
        "branch": 580,
        "kernel_modules": "open",
        "error": "",
        "warning": "",
    }
    assert t["generations"]["volta"]["branch"] == 0
    assert "does not support volta" in t["generations"]["volta"]["error"]


def test_role_default_plan_is_the_librarys() -> None:
    """The nvidia_driver role ships the plan for the default CUDA version; keep it generated."""
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    assert defaults["nvidia_driver_plan"] == plan_table(matrix.DEFAULT_CUDA, today=TODAY)


@pytest.mark.parametrize(
    ("cc", "gen"),
    [
        ("9.0", "hopper"),
        ("8.9", "ada"),
        ("8.6", "ampere"),
        ("8.0", "ampere"),
        ("7.5", "turing"),
        ("7.0", "volta"),
        ("10.0", "blackwell"),
        ("12.0", "blackwell"),
        ("6.1", "pascal"),
    ],
)
def test_generation_of_compute_capability(cc: str, gen: str) -> None:
    assert matrix.generation_of(cc) == gen


def test_cuda_min_driver_is_monotonic() -> None:
    versions = [matrix.version_tuple(v) for v in matrix.CUDA_MIN_DRIVER.values()]
    assert versions == sorted(versions)


def test_gpu_catalogue_lookup_by_nvidia_smi_name() -> None:
    assert matrix.gpu_type("NVIDIA H200").memory_mib == 143771
    assert matrix.gpu_type("h100").generation == "hopper"
