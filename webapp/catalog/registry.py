"""The job catalog: the allowlist of jobs that schedules may name.

The catalog is the only way a name becomes code. A job name that comes from a form, a file or the
database is looked up in a dict of registered jobs; nothing here imports, evaluates or walks
attributes of such a string. Modules are imported only when the operator names them in
configuration (SCHEDULER_JOB_MODULES), never from the database.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar, cast

from annotated_types import Ge, Le, MaxLen
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from webapp.catalog.context import JobContext
from webapp.config import args_limits
from webapp.models import SCHEDULE_KEY

Scope = Literal["tenant", "system"]
FieldKind = Literal["text", "number", "integer", "checkbox", "select"]
JobFunction = Callable[[JobContext, Any], object]
JobFunctionT = TypeVar("JobFunctionT", bound=JobFunction)

SCOPES: tuple[Scope, ...] = ("tenant", "system")
JOB_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
# Only types that map onto one HTML input; `is`, not issubclass, because bool is an int.
SCALAR_KINDS: tuple[tuple[type, FieldKind], ...] = (
    (str, "text"),
    (int, "integer"),
    (float, "number"),
    (bool, "checkbox"),
)


class CatalogError(ValueError):
    """A job, default schedule or job module that the catalog refuses; the message says why."""


class UnknownJobError(CatalogError):
    """A job name that is not registered."""

    def __init__(self, name: str) -> None:
        super().__init__(f"job {name!r} is not in the catalog")
        self.name = name


class ArgsError(CatalogError):
    """Arguments that do not fit a job's parameters.

    `errors` holds (field_path, message) pairs, the path being the parameter name ('' for the
    arguments as a whole); the message reads `args.message: Input should be a valid string`.
    """

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{args_path(path)}: {message}" for path, message in errors))
        self.errors = errors


def args_path(path: str) -> str:
    """The name of an argument's field: `args.message`, or `args` for all of them."""
    return f"args.{path}" if path else "args"


class NoParams(BaseModel):
    """The parameters of a job that takes none."""


@dataclass(frozen=True)
class FormField:
    """One job parameter, described for the HTML form generator."""

    name: str
    title: str
    kind: FieldKind
    required: bool
    default: object  # JSON-ready; None when required
    help: str
    choices: tuple[str, ...] = ()  # for 'select'
    min: float | None = None  # from Field(ge=...)
    max: float | None = None  # from Field(le=...)
    max_length: int | None = None  # characters, from Field(max_length=...)
    max_bytes: int | None = None  # UTF-8 bytes of a text field (SCHEDULER_MAX_ARG_BYTES)

    @property
    def input_maxlength(self) -> int | None:
        """The form input's maxlength: a browser counts UTF-16 units, never more than UTF-8
        bytes, so this refuses nothing the server accepts; the server checks bytes."""
        limits = [limit for limit in (self.max_length, self.max_bytes) if limit is not None]
        return min(limits) if limits else None


@dataclass(frozen=True)
class JobSpec:
    """A registered job: its function, parameters and execution settings."""

    name: str
    title: str
    description: str
    params: type[BaseModel]
    scope: Scope
    max_attempts: int
    retry_backoff: float  # seconds before a failed attempt is retried
    timeout: float  # seconds
    fn: JobFunction
    fields: tuple[FormField, ...]  # built at registration, which is what refuses unshowable types

    def scope_problem(self, scope: Scope) -> str | None:
        """Why a schedule of `scope` may not use this job, or None when it may: the one scope
        rule, asked when a schedule is saved, when it fires and when its run executes."""
        if scope == self.scope:
            return None
        return f"job '{self.name}' is a {self.scope} job and cannot be used in a {scope} schedule"

    def parse_args(self, args: object, settings: Mapping[str, object] | None = None) -> BaseModel:
        """Validates JSON-ish arguments into the parameters model, or raises ArgsError.

        `settings` (the app's configuration) reach the model's validators as the validation
        context (`info.context`), for checks against the operator's settings such as a host
        allowlist; None where there are none (a default schedule's registration).
        """
        if not isinstance(args, dict):
            raise ArgsError([("", "Input should be a JSON object")])
        too_large = size_errors(args, args_limits({} if settings is None else settings))
        if too_large:  # first, and alone: nothing else is worth reading in an oversized input
            raise ArgsError(too_large)
        # Refused whatever the model's own `extra` setting: a stray key is usually a typo.
        errors = [
            (str(key), "Extra inputs are not permitted")
            for key in args
            if key not in self.params.model_fields
        ]
        try:
            parsed = self.params.model_validate(args, context=settings)
        except ValidationError as exc:
            found = [(".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors()]
            errors = list(dict.fromkeys(found + errors))  # a model with extra="forbid" says it too
        if errors:
            raise ArgsError(errors)
        return parsed

    def validate_args(
        self, args: object, settings: Mapping[str, object] | None = None
    ) -> dict[str, Any]:
        """The arguments normalized for storage (defaults filled in), or raises ArgsError."""
        return self.parse_args(args, settings).model_dump(mode="json")

    def form_fields(self, settings: Mapping[str, object] | None = None) -> list[FormField]:
        """The parameters for a form; with the app's settings, text fields get their size limit
        (SCHEDULER_MAX_ARG_BYTES) and a model's optional `settings_help(settings) -> {field:
        text}` adds to the fields' help (the webhook's allowed hosts)."""
        if settings is None:
            return list(self.fields)
        settings_help = getattr(self.params, "settings_help", None)
        extra: Mapping[str, str] = settings_help(settings) if callable(settings_help) else {}
        max_bytes, _ = args_limits(settings)
        fields = []
        for f in self.fields:
            notes = [f.help, extra.get(f.name, "")]
            if f.kind == "text":
                f = replace(f, max_bytes=max_bytes)
                notes.append(size_help(f.max_length, max_bytes))
            fields.append(replace(f, help=" ".join(note for note in notes if note)))
        return fields

    def call(self, ctx: JobContext, args: object) -> object:
        """Runs the job, validating the stored arguments again: the job may have changed since."""
        return self.fn(ctx, self.parse_args(args, ctx.config))


@dataclass(frozen=True)
class DefaultSchedule:
    """A schedule that a job module declares for every tenant (or once, for system scope)."""

    key: str
    job: str
    cron: str  # validated by the service layer when the schedule is materialized
    args: dict[str, Any] = field(hash=False)
    scope: Scope
    time_zone: str | None  # None: the tenant's time zone
    name: str


class Catalog:
    """A registry of jobs and default schedules.

    The app builds its own (see `build_catalog`), and so does each operator job module, much as
    a Flask blueprint: `load_job_modules` merges a module's catalog into the app's.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, JobSpec] = {}
        self._defaults: dict[str, DefaultSchedule] = {}

    def job(
        self,
        name: str,
        *,
        title: str,
        description: str = "",
        params: type[BaseModel] | None = None,
        scope: Scope = "tenant",
        max_attempts: int = 1,
        retry_backoff: float = 30.0,
        timeout: float = 3600.0,
    ) -> Callable[[JobFunctionT], JobFunctionT]:
        """Registers the decorated function `fn(ctx, params)` as the job `name`."""
        if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
            raise CatalogError(
                f"job name {name!r} must be lower-case dotted identifiers such as 'reports.summary'"
            )
        if not title.strip():
            raise CatalogError(f"job {name!r}: title must not be empty")
        if scope not in SCOPES:
            raise CatalogError(f"job {name!r}: scope must be 'tenant' or 'system', not {scope!r}")
        if max_attempts < 1:
            raise CatalogError(f"job {name!r}: max_attempts must be at least 1, not {max_attempts}")
        if not retry_backoff >= 0:
            raise CatalogError(
                f"job {name!r}: retry_backoff must be zero or more seconds, not {retry_backoff}"
            )
        if not timeout > 0:
            raise CatalogError(
                f"job {name!r}: timeout must be more than zero seconds, not {timeout}"
            )
        model = NoParams if params is None else params
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise CatalogError(f"job {name!r}: params must be a pydantic BaseModel, not {model!r}")
        fields = tuple(_form_field(name, key, info) for key, info in model.model_fields.items())

        def register(fn: JobFunctionT) -> JobFunctionT:
            if name in self._jobs:
                raise CatalogError(f"job {name!r} is already registered")
            self._jobs[name] = JobSpec(
                name=name,
                title=title,
                description=description or inspect.getdoc(fn) or "",
                params=model,
                scope=scope,
                max_attempts=max_attempts,
                retry_backoff=float(retry_backoff),
                timeout=float(timeout),
                fn=fn,
                fields=fields,
            )
            return fn

        return register

    def get(self, name: str) -> JobSpec:
        """The job registered as `name`, or UnknownJobError."""
        spec = self._jobs.get(name) if isinstance(name, str) else None
        if spec is None:
            raise UnknownJobError(name)
        return spec

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._jobs

    def jobs(self, scope: Scope | None = None) -> list[JobSpec]:
        """The registered jobs, sorted by name; only those of `scope` if given."""
        return [
            spec for _, spec in sorted(self._jobs.items()) if scope is None or spec.scope == scope
        ]

    def register_default(
        self,
        key: str,
        job: str,
        cron: str,
        args: dict[str, Any] | None = None,
        scope: Scope = "tenant",
        time_zone: str | None = None,
        name: str | None = None,
    ) -> DefaultSchedule:
        """Declares a default schedule of a job registered on this catalog."""
        if not isinstance(key, str) or not SCHEDULE_KEY.fullmatch(key):
            raise CatalogError(
                f"default schedule key {key!r} must be 1 to 64 of a-z, 0-9, '_', '.', '-', "
                "starting with a letter or digit"
            )
        if key in self._defaults:
            raise CatalogError(f"default schedule {key!r} is already registered")
        if job not in self:
            raise CatalogError(f"default schedule {key!r}: job {job!r} is not in the catalog")
        spec = self._jobs[job]
        if scope != spec.scope:
            raise CatalogError(
                f"default schedule {key!r}: job {job!r} has scope {spec.scope!r}, not {scope!r}"
            )
        try:
            normalized = spec.validate_args({} if args is None else args)
        except ArgsError as exc:
            raise CatalogError(f"default schedule {key!r}: {exc}") from exc
        default = DefaultSchedule(
            key=key,
            job=job,
            cron=cron,
            args=normalized,
            scope=scope,
            time_zone=time_zone,
            name=name or spec.title,
        )
        self._defaults[key] = default
        return default

    def defaults(self) -> list[DefaultSchedule]:
        """The declared default schedules, sorted by key."""
        return [default for _, default in sorted(self._defaults.items())]

    def include(self, other: Catalog) -> None:
        """Adds another catalog's jobs and defaults; all or nothing if a name is taken."""
        taken_jobs = sorted(self._jobs.keys() & other._jobs.keys())
        if taken_jobs:
            raise CatalogError(f"job {taken_jobs[0]!r} is already registered")
        taken_keys = sorted(self._defaults.keys() & other._defaults.keys())
        if taken_keys:
            raise CatalogError(f"default schedule {taken_keys[0]!r} is already registered")
        self._jobs.update(other._jobs)
        self._defaults.update(other._defaults)


def size_errors(args: object, limits: tuple[int, int]) -> list[tuple[str, str]]:
    """(path, message) for arguments over the limits (per text, in all: see `args_limits`):
    all of them as JSON first, else each text.

    Bytes of UTF-8, which is what storage pays for; every run stores a copy of them.
    """
    per_arg, total = limits
    # surrogatepass: a lone surrogate from JSON ("\ud800") is measured, not a crash.
    document = json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=str)
    size = len(document.encode("utf-8", "surrogatepass"))
    if size > total:
        return [("", f"should be at most {total} bytes as JSON in all, not {size}")]
    errors = []
    # Not a mapping: stored by hand (the tick measures what it finds); parse_args refuses it.
    for key, value in args.items() if isinstance(args, Mapping) else ():
        if isinstance(value, str):
            length = len(value.encode("utf-8", "surrogatepass"))
            if length > per_arg:
                errors.append((str(key), f"should be at most {per_arg} bytes, not {length}"))
    return errors


def size_help(max_length: int | None, max_bytes: int) -> str:
    """The size limits of a text field in words, as the form and `catalog list` show them."""
    limits = [] if max_length is None else [f"{max_length} characters"]
    if max_length is None or 4 * max_length > max_bytes:  # a character is 1 to 4 bytes
        limits.append(f"{max_bytes} bytes (UTF-8)")
    return f"At most {' and '.join(limits)}."


def _form_field(job: str, name: str, info: FieldInfo) -> FormField:
    """Describes one parameter for a form, or refuses a type that no form input can hold."""
    if info.alias not in (None, name) or info.validation_alias not in (None, name):
        raise CatalogError(f"job {job!r}: parameter {name!r} has an alias; use the field name")
    kind_and_choices = _kind_and_choices(_without_none(info.annotation))
    if kind_and_choices is None:
        shown = _type_name(info.annotation)
        raise CatalogError(
            f"job {job!r}: parameter {name!r} has type {shown}, which a "
            "form cannot show; use str, int, float, bool, a Literal or Enum of strings, "
            "or an optional one of these"
        )
    kind, choices = kind_and_choices
    required = info.is_required()
    default = None if required else info.get_default(call_default_factory=True)
    return FormField(
        name=name,
        title=info.title or name.replace("_", " ").capitalize(),
        kind=kind,
        required=required,
        default=default.value if isinstance(default, enum.Enum) else default,
        help=info.description or "",
        choices=choices,
        min=next((cast(float, m.ge) for m in info.metadata if isinstance(m, Ge)), None),
        max=next((cast(float, m.le) for m in info.metadata if isinstance(m, Le)), None),
        max_length=next((m.max_length for m in info.metadata if isinstance(m, MaxLen)), None),
    )


def _without_none(annotation: object) -> object:
    """`X | None` and `Optional[X]` become X; other annotations are returned as they are."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _type_name(annotation: object) -> str:
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation.__name__  # a class, not an alias such as list[str]
    return str(annotation).replace("typing.", "")


def _kind_and_choices(annotation: object) -> tuple[FieldKind, tuple[str, ...]] | None:
    for scalar, kind in SCALAR_KINDS:
        if annotation is scalar:
            return kind, ()
    if typing.get_origin(annotation) is Literal:
        values = typing.get_args(annotation)
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = tuple(member.value for member in annotation)
    else:
        return None
    if not all(isinstance(value, str) for value in values):
        return None
    return "select", values


def load_job_modules(catalog: Catalog, module_names: Iterable[str]) -> None:
    """Imports the operator's job modules and merges each one's `catalog` into `catalog`.

    The names come from configuration (SCHEDULER_JOB_MODULES), never from the database.
    """
    for module_name in dict.fromkeys(module_names):  # a name listed twice is loaded once
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise CatalogError(
                f"cannot import job module {module_name!r} (SCHEDULER_JOB_MODULES): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        module_catalog = getattr(module, "catalog", None)
        if not isinstance(module_catalog, Catalog):
            raise CatalogError(
                f"job module {module_name!r} has no `catalog = Catalog()` holding its jobs"
            )
        catalog.include(module_catalog)
