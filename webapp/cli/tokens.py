"""`flask token ...`: create, list and revoke API tokens (the operator's way to any token),
tenants' tokens and operator tokens (`--operator`: the operator API, /api/v1/admin)."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from webapp.cli import reports_errors
from webapp.database import utcnow
from webapp.services import accounts, tokens
from webapp.services.audit import Actor
from webapp.token_models import TOKEN_SCOPES, ApiToken

token_cli = AppGroup("token", help="Create, list and revoke API tokens.")


@token_cli.command("create")
@click.option("--tenant", "tenant_slug", help="Slug of the token's tenant.")
@click.option("--operator", is_flag=True, help="An operator token (/api/v1/admin) instead.")
@click.option("--name", required=True, help="What the token is for (shown in lists).")
@click.option("--scope", type=click.Choice(TOKEN_SCOPES), help="A tenant token's scope.")
@click.option(
    "--expires-in",
    type=click.IntRange(1, tokens.MAX_EXPIRY_DAYS),
    help="Days until the token stops working (default: never).",
)
@reports_errors
def create_token(
    tenant_slug: str | None, operator: bool, name: str, scope: str | None, expires_in: int | None
) -> None:
    """Create a token and print its secret alone (it is never shown again): a tenant's (with
    --tenant and --scope), or an operator token (with --operator) for the operator API."""
    if operator:
        if tenant_slug is not None or scope is not None:
            raise click.UsageError("an operator token has no --tenant nor --scope")
        token, secret = tokens.create_operator_token(name, expires_in, Actor.cli(), utcnow())
        click.echo(secret)
        click.echo(f"created operator token {token.prefix}", err=True)
        return
    if tenant_slug is None or scope is None:
        raise click.UsageError("give --tenant and --scope, or --operator")
    tenant = accounts.find_tenant(tenant_slug)
    token, secret = tokens.create_token(tenant, name, scope, expires_in, Actor.cli(), utcnow())
    click.echo(secret)
    click.echo(f"created token {token.prefix} ({token.scope}) for {tenant.slug}", err=True)


@token_cli.command("list")
@click.option("--tenant", "tenant_slug", help="Slug of the tenant whose tokens to list.")
@click.option("--operator", is_flag=True, help="List the operator tokens instead.")
@reports_errors
def list_tokens(tenant_slug: str | None, operator: bool) -> None:
    """List a tenant's tokens (or with --operator the operator tokens), one per line: prefix,
    scope, state, name, created by, last used, expires (tab-separated; times in UTC)."""
    if operator == (tenant_slug is not None):
        raise click.UsageError("give --tenant or --operator")
    now = utcnow()
    found = (
        tokens.operator_tokens()
        if operator
        else tokens.tenant_tokens(accounts.find_tenant(str(tenant_slug)))
    )
    for token in found:
        fields = [
            token.prefix,
            token.scope,
            token.state(now),
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
    """Revoke a token, of any tenant or an operator's, by its prefix: it stops working at once."""
    token = tokens.find_by_prefix(prefix)
    if tokens.revoke_token(token, Actor.cli(), utcnow()):
        click.echo(f"revoked {described(token)}")
    else:
        click.echo(f"token {token.prefix} was already revoked")


def described(token: ApiToken) -> str:
    if token.tenant is None:
        return f"operator token {token.prefix} ({token.name})"
    return f"token {token.prefix} ({token.name}) of {token.tenant.slug}"
