"""Which tasks changed (installer/ansible/runner.py changed): a no_log task's result is censored,
`changed` included, yet summary.json must still name it (the e2e repair test reads it)."""

from installer.ansible.runner import changed

CENSORED = {"censored": "the output has been hidden due to the fact that 'no_log: true' was specified for this result"}


def _event(res: dict, stdout: str) -> dict:
    return {"event": "runner_on_ok", "stdout": stdout,
            "event_data": {"host": "h71", "task": "Write the API key hashes", "res": res}}


def test_a_censored_task_that_changed_is_read_from_its_output_line() -> None:
    assert changed(_event(CENSORED, "changed: [h71]")) is True
    assert changed(_event(CENSORED, "\x1b[0;33mchanged: [h71]\x1b[0m")) is True
    assert changed(_event(CENSORED, "ok: [h71]")) is False


def test_a_plain_result_says_it_itself() -> None:
    assert changed(_event({"changed": True}, "")) is True
    assert changed(_event({"changed": False}, "changed: [h71]")) is False
    assert changed(_event({}, "")) is False
