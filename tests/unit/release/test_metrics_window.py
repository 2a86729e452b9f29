"""The window of one gateway that restarted between its two scrapes."""

from installer.release import metrics

BUCKET = f"{metrics.TTFT}_bucket"


def _labels(le: str) -> tuple[tuple[str, str], ...]:
    return (("le", le), ("model", "tiny"), ("stage", "canary"))


def test_a_restart_takes_every_later_value_whole_so_buckets_stay_monotone() -> None:
    # Before: 10 fast answers. After a restart: 3 fast and 12 slow ones; the fast bucket went
    # down (3 < 10) but the others did not (15 > 10): alone, they would not look reset.
    before = {(BUCKET, _labels(le)): v for le, v in (("0.1", 10.0), ("1.0", 10.0), ("+Inf", 10.0))}
    after = {(BUCKET, _labels(le)): v for le, v in (("0.1", 3.0), ("1.0", 15.0), ("+Inf", 15.0))}
    w = metrics.window({"a": before}, {"a": after})
    assert w == after
    # 15 answers, 3 under 0.1 s: the median is among the slow ones.
    median = metrics.quantile(0.5, [(float(dict(k[1])["le"]), v) for k, v in w.items()])
    assert median is not None and 0.1 < median <= 1.0


def test_without_a_restart_the_window_is_the_difference() -> None:
    before = {(BUCKET, _labels("0.1")): 2.0, (BUCKET, _labels("+Inf")): 4.0}
    after = {(BUCKET, _labels("0.1")): 5.0, (BUCKET, _labels("+Inf")): 9.0,
             (metrics.REQUESTS, (("model", "tiny"), ("outcome", "ok"), ("stage", "canary"))): 1.0}
    w = metrics.window({"a": before}, {"a": after})
    assert w[(BUCKET, _labels("0.1"))] == 3.0
    assert w[(BUCKET, _labels("+Inf"))] == 5.0
    assert w[(metrics.REQUESTS, (("model", "tiny"), ("outcome", "ok"), ("stage", "canary")))] == 1.0
