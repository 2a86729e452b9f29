"""`installer bench` pieces that need no server: prompts and the report's arithmetic."""

import math

import pytest

from installer.flows.bench import BenchConfig, BenchError, RequestResult, endpoint_url, make_requests, summarize


def test_prompts_are_reproducible_and_sized() -> None:
    cfg = BenchConfig(
        base_url="http://x",
        model="m",
        input_len=100,
        output_len=50,
        range_ratio=0.2,
        num_requests=50,
    )
    requests = make_requests(cfg)
    assert requests == make_requests(cfg)
    assert all(80 <= len(p.split()) <= 120 and 40 <= n <= 60 for p, n in requests)
    assert len({p.split()[0] + p.split()[1] for p, _ in requests}) > 10  # no shared prefix
    fixed = make_requests(
        BenchConfig(base_url="http://x", model="m", input_len=10, output_len=5, num_requests=3)
    )
    assert all(len(p.split()) == 10 and n == 5 for p, n in fixed)


def test_summary() -> None:
    cfg = BenchConfig(base_url="http://x", model="m", num_requests=3)
    ok = [
        RequestResult(
            ok=True, ttft=0.1 * i, e2e=1.0 * i, itl=[0.01, 0.03], prompt_tokens=10, output_tokens=11
        )
        for i in (1, 2, 3)
    ]
    report = summarize(cfg, [*ok, RequestResult(error="HTTP 500: x")], duration_s=2.0)
    assert (report.completed, report.failed, report.errors) == (3, 1, {"HTTP 500: x": 1})
    assert report.requests_per_s == 1.5 and report.output_tokens_per_s == 16.5
    assert report.ttft_ms is not None and math.isclose(report.ttft_ms.p50, 200)
    assert report.tpot_ms is not None and math.isclose(
        report.tpot_ms.mean, (0.9 + 1.8 + 2.7) / 3 / 10 * 1000
    )
    assert report.itl_ms is not None and math.isclose(report.itl_ms.mean, 20)


def test_bad_options() -> None:
    with pytest.raises(BenchError) as info:
        BenchConfig(base_url="localhost:8000", model="m", concurrency=0, range_ratio=1).check()
    assert len(info.value.details) == 3


@pytest.mark.parametrize("base", ["https://10.0.0.5:8080", "https://10.0.0.5:8080/", "https://10.0.0.5:8080/v1",
                                  "https://10.0.0.5:8080/v1/"])
def test_base_url_with_or_without_v1(base: str) -> None:
    # The README printed the endpoint with /v1 and bench appended another: 8x HTTP 404.
    assert endpoint_url(base, "chat") == "https://10.0.0.5:8080/v1/chat/completions"
    assert endpoint_url(base, "completions") == "https://10.0.0.5:8080/v1/completions"
