"""The bundled `http.webhook` job: one HTTP request to a host the operator allows, through the
SSRF guard (`webapp/catalog/ssrf.py`).

The host allowlist is checked when a schedule is saved (the parameters' validation gets the app's
settings as its context) and again when the job runs; the addresses only when it runs.

Failures that no retry can fix (a URL or host the settings refuse, an HTTP 4xx answer other than
408 and 429) raise WebhookRefused, a PermanentError: the run fails at once. Timeouts, refused
connections, DNS failures and other answers raise WebhookError and are retried.
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Mapping
from contextlib import closing
from typing import Literal, cast

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from webapp.catalog.context import JobContext
from webapp.catalog.ssrf import (
    ALLOW_PRIVATE_SETTING,
    ALLOWED_HOSTS_SETTING,
    RETRYABLE_CLIENT_ERRORS,
    Deadline,
    HostList,
    Resolver,
    WebhookError,
    WebhookRefused,
    check_allowed_host,
    check_webhook_target,
    host_list,
    parse_webhook_url,
    pinned_connection,
    request_timeout,
)
from webapp.database import load_user_json

BODY_LIMIT = 4096  # bytes of the answer kept in the run's output
USER_AGENT = "webapp-scheduler (http.webhook)"


class WebhookParams(BaseModel):
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = Field(
        default="POST", description="The HTTP method."
    )
    url: str = Field(
        title="URL", description="An http:// or https:// address on a host the operator allows."
    )
    body: str | None = Field(default=None, description="JSON sent as the request body, if any.")
    expected_status: int = Field(
        default=200, ge=100, le=599, description="The run fails on any other answer."
    )

    @field_validator("url")
    @classmethod
    def url_is_http_to_an_allowed_host(cls, url: str, info: ValidationInfo) -> str:
        parsed = parse_webhook_url(url)
        settings = info.context  # the app's settings; None at a default schedule's registration
        if isinstance(settings, Mapping):
            try:
                check_allowed_host(parsed.host, settings.get(ALLOWED_HOSTS_SETTING))
            except WebhookError as refused:  # without pydantic's "Value error, " prefix
                raise PydanticCustomError(
                    "host_not_allowed", "{reason}", {"reason": str(refused)}
                ) from None
        return url

    @classmethod
    def settings_help(cls, settings: Mapping[str, object]) -> dict[str, str]:
        """The allowed hosts, shown next to the URL field of the schedule form."""
        try:
            allowed = host_list(cast(HostList, settings.get(ALLOWED_HOSTS_SETTING)))
        except WebhookError as error:
            return {"url": str(error)}
        if not allowed:
            return {"url": "No hosts are allowed yet: ask the operator."}
        return {"url": f"Allowed hosts: {', '.join(allowed)}."}

    @field_validator("body")
    @classmethod
    def body_is_json(cls, body: str | None) -> str | None:
        if body is None or not body.strip():  # an empty form field means no body
            return None
        try:
            load_user_json(body)
        except ValueError as exc:
            raise ValueError(f"body must be JSON: {exc}") from None
        return body


def webhook(ctx: JobContext, params: WebhookParams, resolve: Resolver = socket.getaddrinfo) -> None:
    """Sends one HTTP request; the run fails unless the answer has the expected status.

    SCHEDULER_WEBHOOK_TIMEOUT bounds the whole request: connecting, sending, and reading the
    answer (of which at most BODY_LIMIT + 1 bytes are read), and so does the job's own deadline
    when it comes first. Resolving the host is not counted.
    """
    timeout = min(request_timeout(ctx.config), max(ctx.seconds_left(), 0.001))
    target = check_webhook_target(
        params.url,
        cast(HostList, ctx.config.get(ALLOWED_HOSTS_SETTING)),  # host_list checks the type
        cast(HostList, ctx.config.get(ALLOW_PRIVATE_SETTING)),
        resolve,
    )
    headers = {"User-Agent": USER_AGENT, "Idempotency-Key": ctx.idempotency_key}
    body = None
    if params.body is not None:
        body = params.body.encode()
        headers["Content-Type"] = "application/json"
    # http.client follows no redirects: a 3xx answer is reported like any other status.
    with closing(pinned_connection(target, Deadline(timeout))) as connection:
        try:
            connection.request(params.method, target.url.target, body=body, headers=headers)
            with connection.getresponse() as response:
                status, reason = response.status, response.reason
                content = response.read(BODY_LIMIT + 1)
        except TimeoutError as exc:  # a WebhookError: a slow server may be quicker next time
            message = f"webhook request to {target.url.shown} timed out after {timeout:g} s"
            raise WebhookError(message) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise WebhookError(f"webhook request to {target.url.shown} failed: {exc}") from exc
    ctx.log(f"{params.method} {target.url.shown} -> HTTP {status} {reason}")
    if content:
        ctx.log(content[:BODY_LIMIT].decode("utf-8", errors="replace"))
    if len(content) > BODY_LIMIT:
        ctx.log(f"(answer cut at {BODY_LIMIT} bytes)")
    if status != params.expected_status:
        hint = " (redirects are not followed)" if 300 <= status < 400 else ""
        message = f"webhook answered HTTP {status}, expected {params.expected_status}{hint}"
        # A 4xx answer says the request itself is wrong: sending it again changes nothing.
        if 400 <= status < 500 and status not in RETRYABLE_CLIENT_ERRORS:
            raise WebhookRefused(message)
        raise WebhookError(message)
