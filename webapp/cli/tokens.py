"""`flask token ...`: create, list and revoke API tokens (the operator's way to any token)."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from webapp.cli import reports_errors
from webapp.database import utcnow
from webapp.models import TOKEN_SCOPES
from webapp.services import accounts, tokens
from webapp.services.audit import Actor

token_cli = AppGroup("token", help="Create, list and revoke API tokens.")


@token_cli.command("create")
@click.option("--tenant", "tenant_slug", required=True, help="Slug of the token's tenant.")
@click.option("--name", required=True, help="What the token is for (shown in lists).")
@click.option("--scope", type=click.Choice(TOKEN_SCOPES), required=True)
@click.option(
    "--expires-in",
    type=click.IntRange(1, tokens.MAX_EXPIRY_DAYS),
    help="Days until the token stops working (default: never).",
)
@reports_errors
def create_token(tenant_slug: str, name: str, scope: str, expires_in: int | None) -> None:
    """Create a token and print its secret alone (it is never shown again)."""
    tenant = accounts.find_tenant(tenant_slug)
    token, secret = tokens.create_token(tenant, name, scope, expires_in, Actor.cli(), utcnow())
    click.echo(secret)
    click.echo(f"created token {token.prefix} ({token.scope}) for {tenant.slug}", err=True)


@token_cli.command("list")
@click.option("--tenant", "tenant_slug", required=True)
@reports_errors
def list_tokens(tenant_slug: str) -> None:
    """List a tenant's tokens, one per line: prefix, scope, state, name, created by, last used,
    expires (tab-separated; times in UTC)."""
    now = utcnow()
    for token in tokens.tenant_tokens(accounts.find_tenant(tenant_slug)):
        state = "revoked" if token.revoked_at else ("active" if token.usable(now) else "expired")
        fields = [
            token.prefix,
            token.scope,
            state,
            token.name,
            token.created_by_label,
            token.last_used_at.strftime("%Y-%m-%dT%H:%M:%SZ") if token.last_used_at else "never",
            token.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ") if token.expires_at else "never",
        ]
        click.echo("\t".join(fields))


@token_cli.command("revoke")
@click.argument("prefix")
@reports_errors
def revoke_token(prefix: str) -> None:
    """Revoke a token, of any tenant, by its prefix: it stops working at once."""
    token = tokens.find_by_prefix(prefix)
    if tokens.revoke_token(token, Actor.cli(), utcnow()):
        click.echo(f"revoked token {token.prefix} ({token.name}) of {token.tenant.slug}")
    else:
        click.echo(f"token {token.prefix} was already revoked")
