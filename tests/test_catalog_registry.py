"""The job catalog: registration, lookup, arguments, forms, defaults and job modules."""

from __future__ import annotations

import enum
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from webapp import create_app
from webapp.catalog import (
    ArgsError,
    Catalog,
    CatalogError,
    FormField,
    JobContext,
    UnknownJobError,
    build_catalog,
    load_job_modules,
)
from webapp.config import ConfigError


def noop(ctx: JobContext, params: Any) -> None:
    pass


def register(catalog: Catalog, name: str = "acme.thing", **options: Any) -> None:
    options.setdefault("title", "Do a thing")
    catalog.job(name, **options)(noop)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class RichParams(BaseModel):
    report_name: str = Field(title="Report", description="Shown in the subject.")
    count: int = Field(default=3, ge=1, le=10)
    ratio: float | None = None
    send_email: bool = False
    color: Color = Color.BLUE
    mode: Literal["fast", "slow"] | None = None


# Registration


def test_it_registers_a_job_and_returns_the_function_unchanged() -> None:
    catalog = Catalog()

    decorated = catalog.job("acme.thing", title="Do a thing", scope="system", max_attempts=3)(noop)

    spec = catalog.get("acme.thing")
    assert decorated is noop
    assert (spec.name, spec.title, spec.scope, spec.max_attempts) == (
        "acme.thing",
        "Do a thing",
        "system",
        3,
    )
    assert (spec.retry_backoff, spec.timeout, spec.fn) == (30.0, 3600.0, noop)


def test_the_description_defaults_to_the_docstring() -> None:
    catalog = Catalog()

    @catalog.job("acme.documented", title="Documented")
    def documented(ctx: JobContext, params: Any) -> None:
        """Explains itself."""

    assert catalog.get("acme.documented").description == "Explains itself."


def test_a_job_without_params_takes_no_arguments() -> None:
    catalog = Catalog()
    register(catalog)
    spec = catalog.get("acme.thing")

    assert spec.validate_args({}) == {}
    assert spec.form_fields() == []
    with pytest.raises(ArgsError, match=r"^args\.x: Extra inputs are not permitted$"):
        spec.validate_args({"x": 1})


def test_it_refuses_a_second_job_with_the_same_name() -> None:
    catalog = Catalog()
    register(catalog, "demo.echo")

    with pytest.raises(CatalogError) as refused:
        register(catalog, "demo.echo")

    assert str(refused.value) == "job 'demo.echo' is already registered"


@pytest.mark.parametrize(
    "name",
    ["echo", "Demo.echo", "demo..echo", "demo.echo.", ".demo", "demo.1echo", "demo.echo-x", ""],
)
def test_it_refuses_names_that_are_not_lower_case_dotted_identifiers(name: str) -> None:
    with pytest.raises(CatalogError) as refused:
        register(Catalog(), name)

    assert str(refused.value) == (
        f"job name {name!r} must be lower-case dotted identifiers such as 'reports.summary'"
    )


def test_it_refuses_names_with_dunder_parts() -> None:
    with pytest.raises(CatalogError, match="must be lower-case dotted identifiers"):
        register(Catalog(), "demo.__globals__")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scope": "global"}, "job 'acme.thing': scope must be 'tenant' or 'system', not 'global'"),
        ({"max_attempts": 0}, "job 'acme.thing': max_attempts must be at least 1, not 0"),
        (
            {"retry_backoff": -1.0},
            "job 'acme.thing': retry_backoff must be zero or more seconds, not -1.0",
        ),
        ({"timeout": -5.0}, "job 'acme.thing': timeout must be more than zero seconds, not -5.0"),
        ({"timeout": 0}, "job 'acme.thing': timeout must be more than zero seconds, not 0"),
        ({"title": " "}, "job 'acme.thing': title must not be empty"),
        (
            {"params": dict},
            "job 'acme.thing': params must be a pydantic BaseModel, not <class 'dict'>",
        ),
    ],
)
def test_it_refuses_settings_a_worker_could_not_honour(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(CatalogError) as refused:
        register(Catalog(), **options)

    assert str(refused.value) == message


class Inner(BaseModel):
    x: int


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


@pytest.mark.parametrize(
    ("annotation", "shown"),
    [
        (Inner, "Inner"),
        (list[str], "list[str]"),
        (dict[str, int], "dict[str, int]"),
        (Literal[1, 2], "Literal[1, 2]"),
        (Level, "Level"),
        (int | str, "int | str"),
        (list[int] | None, "list[int] | None"),
    ],
)
def test_it_refuses_parameters_that_a_form_cannot_show(annotation: Any, shown: str) -> None:
    params = type("Params", (BaseModel,), {"__annotations__": {"items": annotation}})

    with pytest.raises(CatalogError) as refused:
        register(Catalog(), params=params)

    assert str(refused.value) == (
        f"job 'acme.thing': parameter 'items' has type {shown}, which a form cannot show; "
        "use str, int, float, bool, a Literal or Enum of strings, or an optional one of these"
    )


def test_it_refuses_parameters_with_an_alias() -> None:
    class Aliased(BaseModel):
        message: str = Field(alias="msg")

    with pytest.raises(CatalogError) as refused:
        register(Catalog(), params=Aliased)

    assert str(refused.value) == (
        "job 'acme.thing': parameter 'message' has an alias; use the field name"
    )


def test_a_refused_registration_leaves_the_catalog_unchanged() -> None:
    catalog = Catalog()

    with pytest.raises(CatalogError):
        register(catalog, max_attempts=0)

    assert catalog.jobs() == []


# Lookup


@pytest.mark.parametrize(
    "name",
    ["os.system", "builtins.eval", "demo.echo.__globals__", "", "__import__", "demo.Echo"],
)
def test_names_that_are_not_registered_are_unknown(name: str) -> None:
    catalog = build_catalog(demo_jobs=True)

    with pytest.raises(UnknownJobError) as refused:
        catalog.get(name)

    assert str(refused.value) == f"job {name!r} is not in the catalog"
    assert name not in catalog


def test_jobs_are_listed_by_name_and_filtered_by_scope() -> None:
    catalog = Catalog()
    register(catalog, "zeta.last")
    register(catalog, "alpha.system", scope="system")
    register(catalog, "alpha.tenant")

    assert [spec.name for spec in catalog.jobs()] == ["alpha.system", "alpha.tenant", "zeta.last"]
    assert [spec.name for spec in catalog.jobs(scope="system")] == ["alpha.system"]
    assert [spec.name for spec in catalog.jobs(scope="tenant")] == ["alpha.tenant", "zeta.last"]


def test_the_demo_jobs_are_registered_only_when_asked() -> None:
    assert [spec.name for spec in build_catalog(demo_jobs=False).jobs()] == [
        "http.webhook",
        "maintenance.prune_runs",
    ]
    assert [spec.name for spec in build_catalog(demo_jobs=True).jobs()] == [
        "demo.echo",
        "demo.fail",
        "demo.sleep",
        "http.webhook",
        "maintenance.prune_runs",
    ]


def test_each_catalog_holds_its_own_jobs() -> None:
    first, second = build_catalog(demo_jobs=True), build_catalog(demo_jobs=True)

    register(first, "acme.only_here")

    assert "acme.only_here" in first
    assert "acme.only_here" not in second


# Arguments


def test_valid_arguments_are_returned_normalized_with_defaults() -> None:
    spec = build_catalog(demo_jobs=False).get("http.webhook")

    args = spec.validate_args({"url": "https://hooks.example.com/x"})

    assert args == {
        "method": "POST",
        "url": "https://hooks.example.com/x",
        "body": None,
        "expected_status": 200,
    }


def test_numbers_typed_into_a_form_are_normalized() -> None:
    spec = build_catalog(demo_jobs=True).get("demo.sleep")

    assert spec.validate_args({"seconds": "0.5"}) == {"seconds": 0.5}
    assert spec.validate_args({"seconds": 2}) == {"seconds": 2.0}


@pytest.mark.parametrize(
    ("job", "args", "errors"),
    [
        ("demo.echo", {}, [("message", "Field required")]),
        ("demo.echo", {"message": 5}, [("message", "Input should be a valid string")]),
        (
            "demo.echo",
            {"message": "hi", "shell": "rm -rf /"},
            [("shell", "Extra inputs are not permitted")],
        ),
        (
            "demo.sleep",
            {"seconds": "soon"},
            [("seconds", "Input should be a valid number, unable to parse string as a number")],
        ),
        (
            "demo.sleep",
            {"seconds": 3601},
            [("seconds", "Input should be less than or equal to 3600")],
        ),
        (
            "demo.sleep",
            {"seconds": -1},
            [("seconds", "Input should be greater than or equal to 0")],
        ),
        (
            "http.webhook",
            {"url": "https://hooks.example.com/", "method": "TRACE"},
            [("method", "Input should be 'GET', 'POST', 'PUT', 'PATCH' or 'DELETE'")],
        ),
        (
            "http.webhook",
            {"url": "https://hooks.example.com/", "expected_status": 600},
            [("expected_status", "Input should be less than or equal to 599")],
        ),
        ("demo.echo", ["hi"], [("", "Input should be a JSON object")]),
        ("demo.echo", None, [("", "Input should be a JSON object")]),
    ],
)
def test_arguments_that_do_not_fit_the_parameters_are_refused(
    job: str, args: object, errors: list[tuple[str, str]]
) -> None:
    spec = build_catalog(demo_jobs=True).get(job)

    with pytest.raises(ArgsError) as refused:
        spec.validate_args(args)

    assert refused.value.errors == errors


def test_every_argument_error_is_reported_with_its_path() -> None:
    spec = build_catalog(demo_jobs=False).get("http.webhook")

    with pytest.raises(ArgsError) as refused:
        spec.validate_args({"method": "TRACE", "extra": 1})

    assert str(refused.value) == (
        "args.method: Input should be 'GET', 'POST', 'PUT', 'PATCH' or 'DELETE'; "
        "args.url: Field required; "
        "args.extra: Extra inputs are not permitted"
    )


def test_an_extra_key_is_reported_once_when_the_model_forbids_extras_itself() -> None:
    class Strict(BaseModel, extra="forbid"):
        message: str

    catalog = Catalog()
    register(catalog, params=Strict)

    with pytest.raises(ArgsError) as refused:
        catalog.get("acme.thing").validate_args({"message": "hi", "x": 1})

    assert refused.value.errors == [("x", "Extra inputs are not permitted")]


def test_calling_a_job_validates_its_stored_arguments_again(
    job_context: Callable[..., JobContext], caplog: pytest.LogCaptureFixture
) -> None:
    catalog = build_catalog(demo_jobs=True)
    ctx = job_context()

    catalog.get("demo.echo").call(ctx, {"message": "hello"})
    with pytest.raises(ArgsError):
        catalog.get("demo.echo").call(ctx, {"message": "hello", "code": "import os"})

    assert caplog.messages == ["hello"]


# Size limits (SCHEDULER_MAX_ARG_BYTES, SCHEDULER_MAX_ARGS_BYTES)


class ShortParams(BaseModel):
    code: str = Field(max_length=8, description="A short code.")
    note: str = ""
    count: int = 0


def test_each_text_argument_is_bounded_in_utf8_bytes() -> None:
    catalog = Catalog()
    register(catalog, params=ShortParams)
    spec = catalog.get("acme.thing")
    settings = {"SCHEDULER_MAX_ARG_BYTES": 10}

    assert spec.validate_args({"code": "a", "note": "x" * 10}, settings)["note"] == "x" * 10
    with pytest.raises(ArgsError) as refused:
        spec.validate_args({"code": "a", "note": "é" * 6}, settings)  # 6 characters, 12 bytes
    assert refused.value.errors == [("note", "should be at most 10 bytes, not 12")]
    assert str(refused.value) == "args.note: should be at most 10 bytes, not 12"


def test_the_default_limits_apply_without_settings() -> None:
    spec = build_catalog(demo_jobs=True).get("demo.echo")

    assert spec.validate_args({"message": "x" * 4096}) == {"message": "x" * 4096}
    with pytest.raises(ArgsError) as refused:
        spec.validate_args({"message": "x" * 10 * 1024 * 1024})  # the 10 MB of the report
    assert refused.value.errors == [
        ("", "should be at most 16384 bytes as JSON in all, not 10485774")
    ]


def test_all_arguments_together_are_bounded_and_reported_alone() -> None:
    catalog = Catalog()
    register(catalog, params=ShortParams)
    spec = catalog.get("acme.thing")
    settings = {"SCHEDULER_MAX_ARG_BYTES": 100, "SCHEDULER_MAX_ARGS_BYTES": 40}

    # {"code":"a","note":"xxxxxxxxxxxxxxxxxx"} is 40 bytes; an extra key is not even read.
    assert spec.validate_args({"code": "a", "note": "x" * 18}, settings)["note"] == "x" * 18
    with pytest.raises(ArgsError) as refused:
        spec.validate_args({"code": "a", "note": "x" * 22, "x" * 50: 1}, settings)
    assert refused.value.errors == [("", "should be at most 40 bytes as JSON in all, not 99")]


def test_a_lone_surrogate_is_measured_not_a_crash() -> None:
    spec = build_catalog(demo_jobs=True).get("demo.echo")

    with pytest.raises(ArgsError) as refused:
        spec.validate_args({"message": "\ud800" * 2000}, {"SCHEDULER_MAX_ARG_BYTES": 4096})
    assert refused.value.errors == [("message", "should be at most 4096 bytes, not 6000")]


def test_a_job_may_declare_a_tighter_limit() -> None:
    catalog = Catalog()
    register(catalog, params=ShortParams)

    with pytest.raises(ArgsError) as refused:
        catalog.get("acme.thing").validate_args({"code": "x" * 9})
    assert refused.value.errors == [("code", "String should have at most 8 characters")]


def test_the_form_states_the_limits_of_text_fields() -> None:
    catalog = Catalog()
    register(catalog, params=ShortParams)
    settings = {"SCHEDULER_MAX_ARG_BYTES": 20}

    code, note, count = catalog.get("acme.thing").form_fields(settings)

    # 8 characters are at most 32 bytes: both limits can bind.
    assert (code.help, code.max_length, code.max_bytes, code.input_maxlength) == (
        "A short code. At most 8 characters and 20 bytes (UTF-8).",
        8,
        20,
        8,
    )
    assert (note.help, note.input_maxlength) == ("At most 20 bytes (UTF-8).", 20)
    assert (count.help, count.input_maxlength) == ("", None)  # JSON's limit bounds numbers
    code, _, _ = catalog.get("acme.thing").form_fields({"SCHEDULER_MAX_ARG_BYTES": 4096})
    assert code.help == "A short code. At most 8 characters."


@pytest.mark.parametrize("value", [0, -1, "none", True, 1.5])
def test_a_limit_that_is_not_a_positive_number_stops_the_app(value: object) -> None:
    refused = r"SCHEDULER_MAX_ARGS_BYTES=.* (must be a whole number above 0|is not a valid int)"
    with pytest.raises(ConfigError, match=refused):
        create_app({"TESTING": True, "SCHEDULER_MAX_ARGS_BYTES": value})


# Forms


def test_form_fields_describe_every_kind_of_parameter() -> None:
    catalog = Catalog()
    register(catalog, params=RichParams)

    assert catalog.get("acme.thing").form_fields() == [
        FormField("report_name", "Report", "text", True, None, "Shown in the subject."),
        FormField("count", "Count", "integer", False, 3, "", min=1, max=10),
        FormField("ratio", "Ratio", "number", False, None, ""),
        FormField("send_email", "Send email", "checkbox", False, False, ""),
        FormField("color", "Color", "select", False, "blue", "", choices=("red", "blue")),
        FormField("mode", "Mode", "select", False, None, "", choices=("fast", "slow")),
    ]


def test_form_fields_of_the_bundled_jobs() -> None:
    catalog = build_catalog(demo_jobs=True)

    def fields(job: str) -> list[FormField]:
        return catalog.get(job).form_fields()

    assert fields("demo.echo") == [
        FormField("message", "Message", "text", True, None, "Written to the run's output."),
    ]
    assert fields("demo.sleep") == [
        FormField(
            "seconds", "Seconds", "number", True, None, "How long the run lasts.", (), 0, 3600
        ),
    ]
    assert fields("demo.fail") == [
        FormField(
            "message",
            "Message",
            "text",
            False,
            "Failed on purpose",
            "The error the run fails with.",
        ),
    ]
    assert [(f.name, f.title, f.kind, f.required, f.default) for f in fields("http.webhook")] == [
        ("method", "Method", "select", False, "POST"),
        ("url", "URL", "text", True, None),
        ("body", "Body", "text", False, None),
        ("expected_status", "Expected status", "integer", False, 200),
    ]
    method, _, _, expected_status = fields("http.webhook")
    assert method.choices == ("GET", "POST", "PUT", "PATCH", "DELETE")
    assert (expected_status.min, expected_status.max) == (100, 599)


# Default schedules


def test_a_default_schedule_is_stored_with_normalized_arguments() -> None:
    catalog = build_catalog(demo_jobs=True)

    catalog.register_default("nightly-sleep", "demo.sleep", "0 3 * * *", args={"seconds": 1})
    catalog.register_default(
        "hello", "demo.echo", "@daily", {"message": "hi"}, time_zone="Europe/Berlin", name="Hi"
    )

    hello, _prune, nightly = catalog.defaults()
    assert (hello.key, hello.job, hello.cron, hello.args) == (
        "hello",
        "demo.echo",
        "@daily",
        {"message": "hi"},
    )
    assert (hello.scope, hello.time_zone, hello.name) == ("tenant", "Europe/Berlin", "Hi")
    assert (nightly.args, nightly.time_zone, nightly.name) == (
        {"seconds": 1.0},
        None,
        "Sleep for a while",
    )


@pytest.mark.parametrize(
    ("key", "job", "options", "message"),
    [
        (
            "Nightly",
            "demo.echo",
            {},
            "default schedule key 'Nightly' must be 1 to 64 of a-z, 0-9, '_', '.', '-', "
            "starting with a letter or digit",
        ),
        (
            "-nightly",
            "demo.echo",
            {},
            "default schedule key '-nightly' must be 1 to 64 of a-z, 0-9, '_', '.', '-', "
            "starting with a letter or digit",
        ),
        (
            "x" * 65,
            "demo.echo",
            {},
            f"default schedule key '{'x' * 65}' must be 1 to 64 of a-z, 0-9, '_', '.', '-', "
            "starting with a letter or digit",
        ),
        (
            "nightly",
            "acme.missing",
            {},
            "default schedule 'nightly': job 'acme.missing' is not in the catalog",
        ),
        (
            "nightly",
            "demo.echo",
            {"args": {"message": "hi"}, "scope": "system"},
            "default schedule 'nightly': job 'demo.echo' has scope 'tenant', not 'system'",
        ),
        (
            "nightly",
            "demo.echo",
            {"args": {"text": "hi"}},
            "default schedule 'nightly': args.message: Field required; "
            "args.text: Extra inputs are not permitted",
        ),
        ("nightly", "demo.echo", {}, "default schedule 'nightly': args.message: Field required"),
    ],
)
def test_a_default_schedule_that_cannot_be_materialized_is_refused(
    key: str, job: str, options: dict[str, Any], message: str
) -> None:
    catalog = build_catalog(demo_jobs=True)

    with pytest.raises(CatalogError) as refused:
        catalog.register_default(key, job, "@daily", **options)

    assert str(refused.value) == message
    assert [d.key for d in catalog.defaults()] == ["maintenance.prune_runs"]


def test_a_default_schedule_key_is_declared_once() -> None:
    catalog = build_catalog(demo_jobs=True)
    catalog.register_default("nightly", "demo.sleep", "@daily", {"seconds": 1})

    with pytest.raises(CatalogError) as refused:
        catalog.register_default("nightly", "demo.sleep", "@hourly", {"seconds": 2})

    assert str(refused.value) == "default schedule 'nightly' is already registered"


# Job modules

GREETER_MODULE = """
from pydantic import BaseModel, Field

from webapp.catalog import Catalog

catalog = Catalog()


class GreetParams(BaseModel):
    name: str = Field(description="Who to greet.")


@catalog.job("acme.greet", title="Greet someone", params=GreetParams)
def greet(ctx, params):
    ctx.log(f"Hello, {params.name}!")


catalog.register_default("greet-world", "acme.greet", "0 9 * * 1-5", args={"name": "world"})
"""


@pytest.fixture
def write_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str, str], None]]:
    """Writes importable modules; forgets them afterwards so that each test imports afresh."""
    monkeypatch.syspath_prepend(tmp_path)
    written: list[str] = []

    def write(name: str, source: str) -> None:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)

    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_it_loads_the_jobs_and_defaults_of_a_job_module(
    write_module: Callable[[str, str], None],
    job_context: Callable[..., JobContext],
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_module("acme_greeter", GREETER_MODULE)

    catalog = build_catalog(demo_jobs=False, modules=["acme_greeter"])

    assert [spec.name for spec in catalog.jobs()] == [
        "acme.greet",
        "http.webhook",
        "maintenance.prune_runs",
    ]
    assert [(d.key, d.args) for d in catalog.defaults()] == [
        ("greet-world", {"name": "world"}),
        ("maintenance.prune_runs", {}),
    ]
    ctx = job_context()
    catalog.get("acme.greet").call(ctx, {"name": "Ada"})
    assert caplog.messages == ["Hello, Ada!"]


def test_a_job_module_can_be_loaded_into_several_catalogs(
    write_module: Callable[[str, str], None],
) -> None:
    write_module("acme_greeter", GREETER_MODULE)

    first = build_catalog(demo_jobs=False, modules=["acme_greeter", "acme_greeter"])
    second = build_catalog(demo_jobs=True, modules=["acme_greeter"])

    assert "acme.greet" in first
    assert "acme.greet" in second


def test_looking_up_a_name_never_imports_it(write_module: Callable[[str, str], None]) -> None:
    write_module("acme_greeter", GREETER_MODULE)

    with pytest.raises(UnknownJobError):
        build_catalog(demo_jobs=False).get("acme_greeter.greet")

    assert "acme_greeter" not in sys.modules


def test_a_job_module_that_cannot_be_imported_is_named() -> None:
    with pytest.raises(CatalogError) as refused:
        load_job_modules(Catalog(), ["acme_not_there.jobs"])

    assert str(refused.value) == (
        "cannot import job module 'acme_not_there.jobs' (SCHEDULER_JOB_MODULES): "
        "ModuleNotFoundError: No module named 'acme_not_there'"
    )


def test_a_job_module_whose_registration_fails_is_named(
    write_module: Callable[[str, str], None],
) -> None:
    write_module(
        "acme_broken",
        """
        from webapp.catalog import Catalog

        catalog = Catalog()

        @catalog.job("acme.broken", title="Broken", max_attempts=0)
        def broken(ctx, params):
            pass
        """,
    )

    with pytest.raises(CatalogError) as refused:
        load_job_modules(Catalog(), ["acme_broken"])

    assert str(refused.value) == (
        "cannot import job module 'acme_broken' (SCHEDULER_JOB_MODULES): "
        "CatalogError: job 'acme.broken': max_attempts must be at least 1, not 0"
    )


def test_a_job_module_without_a_catalog_is_refused(
    write_module: Callable[[str, str], None],
) -> None:
    write_module("acme_plain", "def job(ctx, params):\n    pass\n")

    with pytest.raises(CatalogError) as refused:
        load_job_modules(Catalog(), ["acme_plain"])

    assert str(refused.value) == (
        "job module 'acme_plain' has no `catalog = Catalog()` holding its jobs"
    )


def test_two_job_modules_cannot_register_the_same_job(
    write_module: Callable[[str, str], None],
) -> None:
    write_module("acme_greeter", GREETER_MODULE)
    write_module("acme_greeter_copy", GREETER_MODULE)
    catalog = Catalog()

    with pytest.raises(CatalogError) as refused:
        load_job_modules(catalog, ["acme_greeter", "acme_greeter_copy"])

    assert str(refused.value) == "job 'acme.greet' is already registered"


def test_a_job_module_cannot_replace_a_bundled_job(
    write_module: Callable[[str, str], None],
) -> None:
    write_module(
        "acme_impostor",
        """
        from webapp.catalog import Catalog

        catalog = Catalog()

        @catalog.job("http.webhook", title="Not the real webhook")
        def impostor(ctx, params):
            pass
        """,
    )

    with pytest.raises(CatalogError) as refused:
        build_catalog(demo_jobs=False, modules=["acme_impostor"])

    assert str(refused.value) == "job 'http.webhook' is already registered"


# The bundled demo jobs and the context


def test_echo_writes_its_message_to_the_run_output(
    job_context: Callable[..., JobContext], caplog: pytest.LogCaptureFixture
) -> None:
    ctx = job_context()

    build_catalog(demo_jobs=True).get("demo.echo").call(ctx, {"message": "100% done"})

    assert caplog.messages == ["100% done"]


def test_fail_raises_its_message(job_context: Callable[..., JobContext]) -> None:
    ctx = job_context()

    with pytest.raises(RuntimeError, match=r"^disk full$"):
        build_catalog(demo_jobs=True).get("demo.fail").call(ctx, {"message": "disk full"})


def test_sleep_lasts_the_given_seconds(job_context: Callable[..., JobContext]) -> None:
    ctx = job_context()
    started = time.monotonic()

    build_catalog(demo_jobs=True).get("demo.sleep").call(ctx, {"seconds": 0.01})

    assert time.monotonic() - started >= 0.01


def test_the_context_takes_only_an_aware_utc_fire_time(
    job_context: Callable[..., JobContext],
) -> None:
    ctx = job_context(scheduled_for=datetime(2024, 3, 10, 7, 0, tzinfo=UTC))
    assert ctx.scheduled_for == datetime(2024, 3, 10, 7, 0, tzinfo=UTC)

    with pytest.raises(ValueError, match="aware UTC datetime"):
        job_context(scheduled_for=datetime(2024, 3, 10, 7, 0))
