"""service/choices.py: an engine's answer is read for its choices without trusting its shape
(the proxy's bad_output verdict and the audit trail's retained answers both read it)."""

from service.choices import choices


def test_the_choices_that_are_objects() -> None:
    body = b'{"choices": [{"index": 0, "text": "hi"}, "junk", 3, {"index": 1, "message": {}}]}'
    assert choices(body) == [{"index": 0, "text": "hi"}, {"index": 1, "message": {}}]


def test_anything_else_is_no_choices_never_an_error() -> None:
    for body in (b"", b"not json", b'{"choices": [{"trunc', b"[1, 2]", b'"text"', b'{"choices": {"0": {}}}',
                 b'{"error": {"message": "x"}}', b"[" * 100_000):  # the last: json's RecursionError
        assert choices(body) == [], body[:40]
