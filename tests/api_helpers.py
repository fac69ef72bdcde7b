"""A test client of the REST API: a token of a tenant (or an operator token), sent as a bearer
token."""

from __future__ import annotations

from typing import Any

from flask import Flask
from sqlalchemy import func, select
from werkzeug.test import TestResponse

from webapp.api.openapi import EXAMPLE_SCHEDULE
from webapp.database import utcnow
from webapp.extensions import db
from webapp.models import Tenant, User
from webapp.services import tokens
from webapp.services.audit import Actor
from webapp.token_models import TokenScope

# A schedule the API accepts: the OpenAPI document's example.
NEW = EXAMPLE_SCHEDULE


def count(model: type) -> int:
    return int(db.session.scalar(select(func.count()).select_from(model)) or 0)


class Api:
    """Requests with `Authorization: Bearer <a new token of the tenant>`."""

    def __init__(self, app: Flask, tenant: Tenant, user: User, scope: TokenScope = "write"):
        self.client = app.test_client()
        self.token, self.secret = tokens.create_token(
            tenant, f"{scope} token", scope, None, Actor.for_user(user), utcnow()
        )

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}", **(extra or {})}

    def get(self, url: str, **kwargs: Any) -> TestResponse:
        return self.client.get(url, headers=self.headers(kwargs.pop("headers", None)), **kwargs)

    def post(self, url: str, json: Any = None, **kwargs: Any) -> TestResponse:
        headers = self.headers(kwargs.pop("headers", None))
        return self.client.post(url, json=json, headers=headers, **kwargs)

    def patch(self, url: str, json: Any = None, **kwargs: Any) -> TestResponse:
        headers = self.headers(kwargs.pop("headers", None))
        return self.client.patch(url, json=json, headers=headers, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> TestResponse:
        return self.client.delete(url, headers=self.headers(kwargs.pop("headers", None)), **kwargs)


class OperatorApi(Api):
    """Requests with `Authorization: Bearer <a new operator token>` (the operator API)."""

    def __init__(self, app: Flask, name: str = "provisioning") -> None:
        self.client = app.test_client()
        self.token, self.secret = tokens.create_operator_token(name, None, Actor.cli(), utcnow())


def problem_fields(response: TestResponse) -> dict[str, str]:
    """A problem details answer's per-field messages."""
    assert response.mimetype == "application/problem+json", response.get_data(as_text=True)
    document = response.get_json()
    return {item["field"]: item["message"] for item in document.get("errors", [])}
