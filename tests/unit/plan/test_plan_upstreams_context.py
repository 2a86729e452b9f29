"""Each upstream carries its engine's context, which the gateway keeps its own max_tokens in."""

from installer.planning.plan import max_model_len_of


def test_the_context_is_read_from_the_argv() -> None:
    assert max_model_len_of(("--model", "/m", "--max-model-len", "8192", "--port", "8000")) == 8192
    assert max_model_len_of(("--model", "/m")) is None
