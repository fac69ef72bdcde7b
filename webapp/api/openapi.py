"""The OpenAPI 3.1 document of the API, built from the same pydantic models the views use (no
hand-written copy), and its reference page at /api/docs, rendered on the server from that
document (no script: the panel's CSP holds)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from flask import current_app, render_template
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from webapp.api import admin_schemas, calendar_schemas, schemas
from webapp.api.problems import MEDIA_TYPE, TYPES
from webapp.api.schemas import MAX_ID
from webapp.services.account_schema import SLUG, TenantIn, UserIn
from webapp.services.calendar_schema import CalendarIn
from webapp.services.schema import ScheduleIn
from webapp.services.sign_in_links import LinkIn

VERSION = "1.0.0"
REF = "#/components/schemas/{model}"
EXAMPLE_SCHEDULE = {
    "name": "Nightly report",
    "job": "demo.echo",
    "args": {"message": "hello"},
    "cron": "30 2 * * *",
    "time_zone": "Europe/Berlin",
}


@dataclass(frozen=True)
class Operation:
    """What an endpoint takes and answers, beyond its route (read from the URL map)."""

    tag: str
    responses: dict[int, type[BaseModel] | None]
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    body_required: bool = True
    example: dict[str, Any] | None = None
    writes: bool = False
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)  # this operation's own, or other words
    conditional: bool = False  # takes If-None-Match: 304 when the ETag is still current
    idempotent: bool = True  # a POST takes an Idempotency-Key (not one that answers a secret)


RUN_LINKS = {
    "GetRun": {"operationId": "get_run", "parameters": {"run_id": "$response.body#/id"}},
}
SCHEDULE_LINKS = {
    "GetSchedule": {
        "operationId": "get_schedule",
        "parameters": {"schedule_id": "$response.body#/id"},
    },
    "RunNow": {"operationId": "run_now", "parameters": {"schedule_id": "$response.body#/id"}},
    "ListRuns": {
        "operationId": "list_runs",
        "parameters": {"schedule_id": "$response.body#/id"},
    },
}
EXAMPLE_CALENDAR = {
    "key": "us-business",
    "name": "US business days",
    "country": "US",
    "subdivision": "CA",
    "closed_weekdays": ["sat", "sun"],
    "days_off": [{"from": "2027-12-24", "to": "2027-12-31", "label": "Winter break"}],
    "windows": [{"from": "2027-01-10T01:00", "to": "2027-01-10T05:00", "label": "DB upgrade"}],
}
# Endpoint -> its operation. A test checks that every API route is here.
OPERATIONS: dict[str, Operation] = {
    "api.list_schedules": Operation(
        "schedules", {200: schemas.SchedulePage}, query=schemas.ScheduleQuery
    ),
    "api.create_schedule": Operation(
        "schedules",
        {201: schemas.ScheduleOut},
        body=ScheduleIn,
        example=EXAMPLE_SCHEDULE,
        writes=True,
        links=SCHEDULE_LINKS,
    ),
    "api.get_schedule": Operation(
        "schedules", {200: schemas.ScheduleOut, 304: None}, conditional=True
    ),
    "api.update_schedule": Operation(
        "schedules",
        {200: schemas.ScheduleOut},
        body=schemas.SchedulePatch,
        example={"cron": "0 3 * * *"},
        writes=True,
    ),
    "api.delete_schedule": Operation("schedules", {204: None}, writes=True),
    "api.pause_schedule": Operation("schedules", {200: schemas.ScheduleOut}, writes=True),
    "api.resume_schedule": Operation(
        "schedules",
        {200: schemas.ScheduleOut},
        body=schemas.ResumeIn,
        body_required=False,
        example={"missed": "skip"},
        writes=True,
    ),
    "api.run_now": Operation(
        "runs",
        {201: schemas.RunDetail},
        body=schemas.RunNowIn,
        body_required=False,
        example={"at": "2030-01-01T09:00:00Z"},
        writes=True,
        links=RUN_LINKS,
    ),
    "api.backfill": Operation(
        "runs",
        {200: schemas.BackfillOut},
        body=schemas.BackfillIn,
        example={"from": "2026-03-01T00:00", "to": "2026-03-31T23:59", "dry_run": True},
        writes=True,
    ),
    "api.schedule_fires": Operation("schedules", {200: schemas.FiresOut}, query=schemas.FiresQuery),
    "api.list_runs": Operation("runs", {200: schemas.RunPage}, query=schemas.RunQuery),
    "api.get_run": Operation("runs", {200: schemas.RunDetail}),
    "api.cancel_run": Operation(
        "runs",
        {200: schemas.CancelOut},
        writes=True,
        errors={
            409: "The run has finished (`detail` says how: already succeeded, failed, "
            "skipped or cancelled), or it was already asked to stop; or a request with this "
            "Idempotency-Key is still in progress"
        },
    ),
    "api.catalog": Operation("catalog", {200: schemas.CatalogOut}),
    "api.cron_preview": Operation("catalog", {200: schemas.FiresOut}, query=schemas.PreviewQuery),
    "api.cron_parse": Operation(
        "catalog",
        {200: schemas.ParseOut},
        query=schemas.ParseQuery,
        errors={
            400: "The phrase is not understood (`detail` says which part; `examples` lists "
            "three phrases that are), or its cron never fires; or a malformed query"
        },
    ),
    "api.list_calendars": Operation(
        "calendars", {200: calendar_schemas.CalendarPage}, query=calendar_schemas.CalendarQuery
    ),
    "api.create_calendar": Operation(
        "calendars",
        {201: calendar_schemas.CalendarOut},
        body=CalendarIn,
        example=EXAMPLE_CALENDAR,
        writes=True,
    ),
    "api.get_calendar": Operation(
        "calendars", {200: calendar_schemas.CalendarOut, 304: None}, conditional=True
    ),
    "api.update_calendar": Operation(
        "calendars",
        {200: calendar_schemas.CalendarOut},
        body=calendar_schemas.CalendarPatch,
        example={"country": "DE", "subdivision": "BY"},
        writes=True,
    ),
    "api.delete_calendar": Operation(
        "calendars",
        {204: None},
        writes=True,
        errors={409: "Schedules use the calendar (`detail` names them)"},
    ),
    "api.closed_days": Operation(
        "calendars", {200: calendar_schemas.ClosedDaysOut}, query=calendar_schemas.YearQuery
    ),
    "api.import_ics": Operation(
        "calendars",
        {200: calendar_schemas.IcsImportOut},
        writes=True,
        errors={
            413: "The file is larger than the server accepts (an .ics may have at most 1 MiB)",
            415: "The body is not an .ics file (send Content-Type: text/calendar)",
            422: "The file is not iCalendar, holds a recurring event (RRULE), or would take "
            "the calendar past 1,000 entries",
        },
    ),
}
OPERATOR_TAGS = ("operator: tenants", "operator: users", "operator: tokens")
TENANT, USERS, TOKENS = OPERATOR_TAGS
EXAMPLE_TENANT = {"slug": "acme", "name": "Acme Inc.", "time_zone": "America/Chicago"}
OPERATIONS |= {
    "api.list_tenants": Operation(TENANT, {200: admin_schemas.TenantPage}, query=schemas.PageQuery),
    "api.create_tenant": Operation(
        TENANT,
        {201: admin_schemas.TenantOut},
        body=TenantIn,
        example=EXAMPLE_TENANT,
        writes=True,
        errors={
            409: "A tenant with this slug exists (or a request with this Idempotency-Key "
            "is still in progress)"
        },
    ),
    "api.get_tenant": Operation(
        TENANT, {200: admin_schemas.TenantOut, 304: None}, conditional=True
    ),
    "api.update_tenant": Operation(
        TENANT,
        {200: admin_schemas.TenantOut},
        body=admin_schemas.TenantPatch,
        example={"name": "Acme Corporation", "max_schedules": 100, "jitter_seconds": None},
        writes=True,
    ),
    "api.delete_tenant": Operation(
        TENANT,
        {200: admin_schemas.TenantDeletedOut},
        query=admin_schemas.DeleteQuery,
        writes=True,
        errors={
            409: "The tenant is not empty and cascade is not true, or its runs are queued "
            "or running (`detail` says which)"
        },
    ),
}
MEMBER_LINKS = {
    "GetUser": {"operationId": "get_user", "parameters": {"user_id": "$response.body#/user_id"}},
}
OPERATIONS |= {
    "api.list_members": Operation(USERS, {200: admin_schemas.MemberPage}),
    "api.add_member": Operation(
        USERS,
        {200: admin_schemas.MemberOut, 201: admin_schemas.MemberOut},
        body=UserIn,
        example={"email": "dana@acme.example", "role": "admin", "password": "a long password"},
        writes=True,
        links=MEMBER_LINKS,
    ),
    "api.get_member": Operation(USERS, {200: admin_schemas.MemberOut}),
    "api.set_role": Operation(
        USERS,
        {200: admin_schemas.MemberOut},
        body=admin_schemas.RolePatch,
        example={"role": "viewer"},
        writes=True,
    ),
    "api.remove_member": Operation(USERS, {204: None}, writes=True),
    "api.list_users": Operation(
        USERS, {200: admin_schemas.UserPage}, query=admin_schemas.UserQuery
    ),
    "api.get_user": Operation(USERS, {200: admin_schemas.UserOut}),
    "api.revoke_sessions": Operation(USERS, {200: admin_schemas.SessionsRevokedOut}, writes=True),
    "api.list_tokens": Operation(TOKENS, {200: admin_schemas.TokenPage}),
    "api.create_token": Operation(
        TOKENS,
        {201: admin_schemas.TokenCreatedOut},
        body=admin_schemas.TokenIn,
        example={"name": "Acme's deploys", "scope": "write", "expires_in": 90},
        writes=True,
        idempotent=False,
        errors={
            400: "Malformed request, or an Idempotency-Key: the answer holds a secret, "
            "which is never stored to be replayed"
        },
    ),
    "api.revoke_token": Operation(TOKENS, {200: admin_schemas.TokenOut}, writes=True),
}
OPERATIONS["api.create_sign_in_link"] = Operation(
    USERS,
    {200: admin_schemas.SignInLinkOut},
    body=LinkIn,
    example={
        "tenant": "acme",
        "email": "pat@acme.example",
        "role": "admin",
        "return_url": "https://app.example.com/settings",
    },
    writes=True,
    idempotent=False,  # the answer holds the link's token: never stored to be replayed
    errors={
        400: "Malformed request, or an Idempotency-Key: the answer holds the link's token, "
        "which is never stored to be replayed",
        422: "Invalid input by field: no such tenant, an operator's email, a return_url that "
        "is not an http(s) URL on a host of SCHEDULER_RETURN_URL_HOSTS",
    },
)
# Errors every operation may answer (problem details), and what they mean.
ERRORS = {
    400: "Malformed request: a query parameter, the JSON, the cursor",
    401: "No token, or an unknown, revoked or expired one",
    403: "A token of the other kind: an operator token on the tenant endpoints, a tenant's "
    "token on the operator API (/api/v1/admin/); for a change, a token whose scope is read",
    404: "No such object in the token's tenant (on the operator API: no such tenant, member, "
    "user or token)",
    405: "The URL does not take this method (`Allow` lists those it does)",
    406: "Not acceptable",
    413: "The body is larger than the server accepts",
    429: "Too many requests for this token: wait Retry-After seconds",
}
WRITE_ERRORS = {
    409: "A request with this Idempotency-Key is still in progress",
    412: "If-Match: the schedule changed since it was read",
    415: "The body is not JSON",
    422: "Invalid input: `errors` lists each field and what is wrong (or an Idempotency-Key "
    "reused for another request)",
}
HEADERS = {
    "POST": {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "Any unique text: a retry with the same key and body answers as the "
        "first request did (for 24 hours), without doing it again",
        "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[ -~]+$"},
    },
    "PATCH": {
        "name": "If-Match",
        "in": "header",
        "required": False,
        "description": "The ETag of the object (schedule, calendar, tenant, membership) as read: "
        "412 if it changed since",
        "schema": {"type": "string"},
    },
}
HEADERS["DELETE"] = HEADERS["PATCH"]
IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "The ETag of the object (schedule, calendar, tenant) as read: 304 without a "
    "body if it is unchanged",
    "schema": {"type": "string"},
}
RESPONSE_WORDS = {200: "OK", 201: "Created", 204: "Done; no content", 304: "Not modified"}
ETAG = {
    "description": "The object's version, for If-Match and If-None-Match",
    "schema": {"type": "string"},
}
# The objects whose answers carry an ETag.
TAGGED = (
    schemas.ScheduleOut,
    calendar_schemas.CalendarOut,
    admin_schemas.TenantOut,
    admin_schemas.MemberOut,
)


def path_parameter(name: str) -> dict[str, Any]:
    """An id (`schedule_id`...) or a tenant's slug, in a URL."""
    owner = "tenant" if name == "slug" else name.removesuffix("_id")
    description = f"The {owner}'s {'slug' if name == 'slug' else 'id'}"
    schema: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
    if name == "slug":
        schema = {"type": "string", "pattern": f"^{SLUG.pattern}$"}
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": schema,
    }


def path_of(rule: str) -> str:
    """A Flask rule as an OpenAPI path: `<id:schedule_id>` -> `{schedule_id}`."""
    return re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule)


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(by_alias=True)
    required = set(schema.get("required", []))
    parameters = []
    for name, prop in schema["properties"].items():
        prop = dict(prop)
        prop.pop("title", None)
        description = prop.pop("description", None)
        options = [p for p in prop.pop("anyOf", []) if p != {"type": "null"}]
        if len(options) == 1:  # optional: absent, never null, in a query string
            prop.update(options[0])
        elif options:
            prop["anyOf"] = options
        if prop.get("default", ...) is None:
            del prop["default"]
        parameter: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": prop,
        }
        if description:
            parameter["description"] = description
        parameters.append(parameter)
    return parameters


def problem_response(status: int, description: str) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {MEDIA_TYPE: {"schema": {"$ref": REF.format(model="ProblemOut")}}},
    }
    if status == 429:
        wait = {
            "description": "Seconds until the token may send again",
            "schema": {"type": "string"},
        }
        response["headers"] = {"Retry-After": wait}
    return response


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the app's API routes."""
    models: list[type[BaseModel]] = [schemas.ProblemOut]
    for described in OPERATIONS.values():
        models += [m for m in described.responses.values() if m is not None]
        if described.body is not None:
            models.append(described.body)
    pairs = [(model, "validation") for model in dict.fromkeys(models)]
    _, components = models_json_schema(pairs, ref_template=REF)  # type: ignore[arg-type]
    paths: dict[str, dict[str, Any]] = {}
    for rule in current_app.url_map.iter_rules():
        if rule.endpoint not in OPERATIONS:
            continue
        operation = OPERATIONS[rule.endpoint]
        view = current_app.view_functions[rule.endpoint]
        name = rule.endpoint.removeprefix("api.")
        method = next(m for m in sorted(rule.methods or ()) if m not in ("HEAD", "OPTIONS"))
        entry: dict[str, Any] = {
            "operationId": name,
            "tags": [operation.tag],
            # Plain text: Swagger UI renders a summary as it is, backticks and all.
            "summary": (view.__doc__ or name).strip().splitlines()[0].replace("`", ""),
            "parameters": [path_parameter(argument) for argument in sorted(rule.arguments)]
            + (query_parameters(operation.query) if operation.query else [])
            + ([HEADERS[method]] if method in HEADERS and operation.idempotent else [])
            + ([IF_NONE_MATCH] if operation.conditional else []),
            "responses": {},
        }
        if operation.body is not None:
            media: dict[str, Any] = {"schema": {"$ref": REF.format(model=operation.body.__name__)}}
            if operation.example:
                media["example"] = operation.example
            entry["requestBody"] = {
                "required": operation.body_required,
                "content": {"application/json": media},
            }
        for status, model in operation.responses.items():
            response: dict[str, Any] = {"description": RESPONSE_WORDS[status]}
            if model is not None:
                ref = {"$ref": REF.format(model=model.__name__)}
                response["content"] = {"application/json": {"schema": ref}}
            headers: dict[str, Any] = {}
            if status == 201:
                location = {"description": "The new object's URL", "schema": {"type": "string"}}
                headers["Location"] = location
            if model in TAGGED or status == 304:
                headers["ETag"] = ETAG
            if headers:
                response["headers"] = headers
            if operation.links:
                response["links"] = operation.links
            entry["responses"][str(status)] = response
        errors = {**ERRORS, **(WRITE_ERRORS if operation.writes or operation.body else {})}
        if not operation.idempotent:
            errors.pop(409, None)  # no key, so never one in progress
        errors.update(operation.errors)
        if operation.query is not None:
            errors.setdefault(422, WRITE_ERRORS[422])
        for status, description in sorted(errors.items()):
            entry["responses"][str(status)] = problem_response(status, description)
        if operation.tag in OPERATOR_TAGS:
            entry["security"] = [{"operator": []}]
        paths.setdefault(path_of(rule.rule), {})[method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Scheduler API",
            "version": VERSION,
            "description": (
                "The tenant's schedules, runs and business calendars over HTTP. Send "
                "`Authorization: Bearer <token>` (an API token of the tenant, `read` or "
                "`write`). The operator API under /api/v1/admin/ (tenants, users, their "
                "tokens) takes an operator token instead. Times are RFC 3339 "
                "in UTC, with the zone they are meant in alongside. Errors are RFC 9457 problem "
                "details with a per-field `errors` list."
            ),
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "tags": [
            {"name": "schedules"},
            {"name": "runs"},
            {"name": "catalog"},
            {"name": "calendars"},
            *({"name": tag} for tag in OPERATOR_TAGS),
        ],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": components["$defs"],
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An API token"},
                "operator": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An operator token (flask token create --operator)",
                },
            },
        },
    }


def type_label(schema: dict[str, Any]) -> str:
    """A JSON Schema's type in a few words: `string`, `ScheduleOut`, `list of RunOut`..."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return " | ".join(f'"{value}"' for value in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(type_label(option) for option in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {type_label(schema.get('items', {}))}"
    if kind == "string" and "format" in schema:
        return f"string ({schema['format']})"
    return str(kind)


def reference_page() -> str:
    """The document as an HTML page: operations, parameters, bodies, examples, problems."""
    return render_template(
        "api/docs.html",
        spec=document(),
        problem_types=TYPES,
        type_label=type_label,
        pretty=lambda value: json.dumps(value, indent=2, ensure_ascii=False),
    )
