"""One key's share of a gray release's evidence (service/evidence.py)."""

from service.evidence import EvidenceCap


def test_a_key_counts_up_to_the_floor_then_its_share_of_the_window() -> None:
    cap = EvidenceCap(window_s=60, floor=5, share=0.25)
    flood = [cap.admit("m", "canary", "attacker", now=1.0) for _ in range(200)]
    assert sum(flood) == 5  # alone in the window: the floor
    others = [cap.admit("m", "canary", f"user{i}", now=2.0) for i in range(40)]
    assert all(others)
    # 45 counted in the window: the attacker may now have up to 25% of it
    more = [cap.admit("m", "canary", "attacker", now=3.0) for _ in range(200)]
    assert 5 + sum(more) <= 0.25 * (45 + sum(more)) + 1


def test_windows_and_stages_are_apart() -> None:
    cap = EvidenceCap(window_s=60, floor=2, share=0.1)
    assert [cap.admit("m", "canary", "k", now=0.0) for _ in range(3)] == [True, True, False]
    assert cap.admit("m", "stable", "k", now=0.0)  # another stage
    assert cap.admit("other", "canary", "k", now=0.0)  # another model
    assert cap.admit("m", "canary", "k", now=61.0)  # the next window
