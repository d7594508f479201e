"""Retries of transient API errors: the one policy, over the provider's API-neutral errors, and
the one place Google client errors are translated into them."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import tenacity
from google.api_core import exceptions as gexc

from airflow_provider_dws import errors
from airflow_provider_dws.backends.google import GoogleBackend, translate
from airflow_provider_dws.backends.retry import TransientWait, is_transient, retry_kwargs, retrying

TRANSLATED = [
    (gexc.ServiceUnavailable, errors.TransientApiError),
    (gexc.DeadlineExceeded, errors.TransientApiError),
    (gexc.InternalServerError, errors.TransientApiError),
    (gexc.Aborted, errors.TransientApiError),
    (gexc.GatewayTimeout, errors.TransientApiError),
    (gexc.BadGateway, errors.TransientApiError),
    (gexc.Cancelled, errors.TransientApiError),
    (gexc.ResourceExhausted, errors.QuotaExceededError),
    (gexc.TooManyRequests, errors.QuotaExceededError),
    (gexc.NotFound, errors.RequestNotFoundError),
    (gexc.AlreadyExists, errors.RequestAlreadyExistsError),
    (errors.InvalidRequestError, errors.InvalidRequestError),
    (gexc.OutOfRange, errors.InvalidRequestError),
    (errors.ConflictError, errors.ConflictError),
    (gexc.PermissionDenied, errors.PermissionDeniedApiError),
    (gexc.Unauthenticated, errors.PermissionDeniedApiError),
    (gexc.Unknown, errors.ApiError),
]


@pytest.mark.parametrize(("google", "ours"), TRANSLATED)
def test_google_errors_translate_to_provider_errors(google: type[Exception], ours: type[Exception]) -> None:
    translated = translate(google("boom"))
    assert type(translated) is ours
    assert translated.message == "boom"  # type: ignore[attr-defined]


def test_translation_keeps_the_grpc_code_and_leaves_other_errors_alone() -> None:
    assert translate(gexc.NotFound("x")).code == "NOT_FOUND"  # type: ignore[attr-defined]
    plain = ValueError("x")
    assert translate(plain) is plain


@pytest.mark.parametrize("exc_type", [errors.TransientApiError, errors.QuotaExceededError])
def test_transient_errors(exc_type: type[Exception]) -> None:
    assert is_transient(exc_type("boom"))


@pytest.mark.parametrize(
    "exc_type",
    [
        errors.InvalidRequestError,
        errors.RequestNotFoundError,
        errors.PermissionDeniedApiError,
        errors.ConflictError,
        errors.ApiError,
    ],
)
def test_permanent_errors(exc_type: type[Exception]) -> None:
    assert not is_transient(exc_type("boom"))


def test_non_api_errors_are_not_transient() -> None:
    assert not is_transient(ValueError("x"))
    assert not is_transient(KeyboardInterrupt())
    # A Google error reaches the policy only translated: untranslated, it is not retried.
    assert not is_transient(gexc.ServiceUnavailable("x"))


def _delays(exc: Exception, attempts: int, wait: TransientWait) -> list[float]:
    """Delays a Retrying loop asks for when every call raises ``exc``."""
    delays: list[float] = []

    def always_fail() -> None:
        raise exc

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(Exception),
        wait=wait,
        stop=tenacity.stop_after_attempt(attempts),
        sleep=delays.append,
        reraise=True,
    )
    with pytest.raises(type(exc)):
        retrying(always_fail)
    return delays


def test_quota_errors_wait_longer() -> None:
    wait = TransientWait()
    for _ in range(20):  # jitter: repeat
        normal = _delays(errors.TransientApiError("x"), 6, wait)
        quota = _delays(errors.QuotaExceededError("x"), 6, wait)
        too_many = _delays(errors.QuotaExceededError("x"), 6, wait)
        assert len(normal) == len(quota) == len(too_many) == 5
        # normal, full jitter: 0 .. 1 * 2**(n-1); quota, equal jitter: half to all of 5 * 2**(n-1), cap 60
        for n, delay in enumerate(normal):
            assert 0.0 <= delay <= 2.0**n
        for delays in (quota, too_many):
            for n, delay in enumerate(delays):
                backoff = min(60.0, 5.0 * 2.0**n)
                assert backoff / 2 <= delay <= backoff


def test_waits_grow_and_are_capped() -> None:
    delays = [_delays(errors.TransientApiError("x"), 12, TransientWait()) for _ in range(30)]
    assert all(max(run) <= 30.0 for run in delays)
    # Full jitter: the capped range is used, and not only its top.
    late = [d for run in delays for d in run[6:]]
    assert max(late) > 20.0
    assert min(late) < 10.0


def test_quota_waits_do_not_repeat_the_same_period() -> None:
    """A fixed 60 s or 120 s retry would meet a per-minute quota burst every time it met one."""
    delays = [_delays(errors.QuotaExceededError("x"), 10, TransientWait())[-1] for _ in range(30)]
    assert all(30.0 <= d <= 60.0 for d in delays)
    assert max(delays) - min(delays) > 10.0


def test_wait_directly_from_retry_state() -> None:
    wait = TransientWait(initial=1, maximum=30, quota_initial=5, quota_maximum=60)
    state = tenacity.RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = 1
    state.set_exception((errors.QuotaExceededError, errors.QuotaExceededError("q"), None))
    assert 2.5 <= wait(state) <= 5.0
    state.set_exception((errors.TransientApiError, errors.TransientApiError("a"), None))
    assert 0.0 <= wait(state) <= 1.0


class Flaky:
    def __init__(self, errors: list[Exception], result: str = "ok") -> None:
        self.errors = list(errors)
        self.calls = 0
        self.result = result

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


def test_transient_errors_are_retried_until_success(caplog: pytest.LogCaptureFixture) -> None:
    sleeps: list[float] = []
    fn = Flaky([errors.TransientApiError("down"), errors.TransientApiError("down")])
    logger = logging.getLogger("test_retry")
    kwargs = retry_kwargs("get job", give_up_after=timedelta(minutes=1), logger=logger)
    with caplog.at_level(logging.WARNING, logger="test_retry"):
        result = tenacity.Retrying(sleep=sleeps.append, **kwargs)(fn)
    assert result == "ok"
    assert fn.calls == 3
    assert len(sleeps) == 2
    assert all(s > 0 for s in sleeps)
    messages = [r.getMessage() for r in caplog.records if r.name == "test_retry"]
    assert len(messages) == 2
    assert "get job: transient error (TransientApiError" in messages[0]


def test_permanent_error_fails_after_one_call() -> None:
    sleeps: list[float] = []
    fn = Flaky([errors.InvalidRequestError("bad spec")])
    retrying = tenacity.Retrying(sleep=sleeps.append, **retry_kwargs("create job"))
    with pytest.raises(errors.InvalidRequestError, match="bad spec"):
        retrying(fn)
    assert fn.calls == 1
    assert sleeps == []


def test_gives_up_after_the_time_limit_and_reraises_the_api_error() -> None:
    fn = Flaky([errors.TransientApiError(f"down {i}") for i in range(100)])
    retrying = tenacity.Retrying(sleep=lambda _: None, **retry_kwargs("get", give_up_after=timedelta(0)))
    with pytest.raises(errors.TransientApiError):
        retrying(fn)
    assert fn.calls == 1


def test_give_up_after_none_never_stops() -> None:
    kwargs = retry_kwargs("wait", give_up_after=None)
    assert kwargs["stop"] is tenacity.stop_never
    fn = Flaky([errors.TransientApiError("slow")] * 20)
    assert tenacity.Retrying(sleep=lambda _: None, **kwargs)(fn) == "ok"
    assert fn.calls == 21


class FakeOperation:
    """``result()`` fails with the scripted errors, then returns; records the timeouts it was given."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = list(errors)
        self.timeouts: list[float] = []

    def result(self, timeout: float) -> str:
        self.timeouts.append(timeout)
        if self.errors:
            raise self.errors.pop(0)
        return "done"


class Backend(GoogleBackend):  # type: ignore[type-arg]
    kind = "test"
    location_key = "region"


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_dws.backends import retry

    monkeypatch.setattr(retry, "TransientWait", lambda: tenacity.wait_none())


def test_operation_result_retries_transient_status_reads(no_wait: None) -> None:
    operation = FakeOperation([gexc.ServiceUnavailable("x"), gexc.DeadlineExceeded("y")])
    assert Backend("p", "r")._operation_result(operation, "create q", timeout=600) == "done"
    assert len(operation.timeouts) == 3
    assert all(t <= 600 for t in operation.timeouts)


def test_operation_result_does_not_retry_the_operation_s_own_failure(no_wait: None) -> None:
    operation = FakeOperation([gexc.FailedPrecondition("the operation failed")])
    with pytest.raises(errors.ConflictError, match="the operation failed") as raised:
        Backend("p", "r")._operation_result(operation, "delete q", timeout=600)
    assert isinstance(raised.value.__cause__, gexc.FailedPrecondition)  # kept for the log
    assert len(operation.timeouts) == 1


def test_every_rpc_passes_the_backend_deadline(no_wait: None) -> None:
    calls: list[dict[str, object]] = []

    def method(**kwargs: object) -> str:
        calls.append(kwargs)
        if len(calls) == 1:
            raise gexc.ServiceUnavailable("blip")
        return "ok"

    assert Backend("p", "r", rpc_timeout=7)._rpc("get x", method, name="x") == "ok"
    assert calls == [{"timeout": 7.0, "name": "x"}] * 2
    assert Backend("p", "r").rpc_timeout == 60.0
    assert "rpc_timeout" not in Backend("p", "r").spec()  # the default keeps payloads small
    assert Backend("p", "r", rpc_timeout=7).spec()["rpc_timeout"] == 7.0


def test_retrying_is_tenacity_s_own_object() -> None:
    policy = retrying("get x")
    assert isinstance(policy, tenacity.Retrying)
    fn = Flaky([errors.TransientApiError("blip")])
    assert policy.copy(sleep=lambda _: None)(fn) == "ok"
