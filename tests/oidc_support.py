"""A real OpenID Connect provider for the single sign-on tests: oidc-provider-mock's server
(discovery, an authorization form, a token endpoint signing RS256 ID tokens, JWKS, userinfo),
served by werkzeug in a thread on a free port.

Tests choose who signs in as a person does, on its authorization form (the `sub` field), after
giving that subject its claims (`Provider.user`). Around the provider's WSGI app sits a thin
recorder of what it was asked (to check the PKCE verifier against the challenge) and, for the
issuer test, a switch that makes its token endpoint sign as another issuer (the Host it sees).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import oidc_provider_mock
import requests
from werkzeug.serving import make_server


@dataclass
class Seen:
    """One request the provider answered: its method, path and parameters (query and form)."""

    method: str
    path: str
    params: dict[str, str]


@dataclass
class Provider:
    url: str
    seen: list[Seen] = field(default_factory=list)
    # When set, the token endpoint sees this Host: its ID tokens name http://<host> as issuer.
    token_host: str | None = None
    # Called as the token endpoint is asked (the relying party waits for its answer).
    on_token_request: Callable[[], None] | None = None

    def user(self, sub: str, **claims: Any) -> None:
        """The claims the provider releases for `sub` (email, email_verified, name...)."""
        answer = requests.put(f"{self.url}/users/{quote(sub)}", json=claims, timeout=10)
        assert answer.status_code == 204, answer.text

    def register_client(self, redirect_uri: str) -> tuple[str, str]:
        """A client (id, secret) registered for `redirect_uri` (RFC 7591)."""
        answer = requests.post(
            f"{self.url}/oauth2/clients", json={"redirect_uris": [redirect_uri]}, timeout=10
        )
        assert answer.status_code == 201, answer.text
        body = answer.json()
        return body["client_id"], body["client_secret"]

    def authorize(self, authorization_url: str, sub: str) -> str:
        """Submits the provider's authorization form for `sub`, as the person would, and
        returns where the provider sends the browser back (the callback URL with the code)."""
        answer = requests.post(
            authorization_url, data={"sub": sub}, allow_redirects=False, timeout=10
        )
        assert answer.status_code == 302, answer.text
        return str(answer.headers["Location"])

    def requests_to(self, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.path == path]

    def wrap(self, app: Any) -> Callable[..., Any]:
        def recording(environ: dict[str, Any], start_response: Any) -> Any:
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
            params = {
                **parse_qs(environ.get("QUERY_STRING", "")),
                **(parse_qs(body.decode()) if "form" in environ.get("CONTENT_TYPE", "") else {}),
            }
            path = environ["PATH_INFO"]
            self.seen.append(
                Seen(environ["REQUEST_METHOD"], path, {k: v[0] for k, v in params.items()})
            )
            if path == "/oauth2/token":
                if self.on_token_request is not None:
                    self.on_token_request()
                if self.token_host is not None:
                    environ["HTTP_HOST"] = self.token_host
            return app(environ, start_response)

        return recording


@contextmanager
def oidc_provider(require_client_registration: bool = True) -> Iterator[Provider]:
    """A provider on a free port of localhost that insists on a nonce; with
    `require_client_registration`, only registered clients with their secret and redirect URI
    get codes and tokens."""
    app = oidc_provider_mock.app(
        require_client_registration=require_client_registration, require_nonce=True
    )
    server = make_server("localhost", 0, app, threaded=True)
    provider = Provider(url=f"http://localhost:{server.server_port}")
    server.app = provider.wrap(app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        thread.join(timeout=10)


def query_of(url: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}


def path_and_query(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"
