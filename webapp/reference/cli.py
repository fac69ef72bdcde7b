"""The command line's reference: every command of `flask --app webapp` that the app adds, and
the `scheduler-worker` console script, from the click commands themselves."""

from __future__ import annotations

from dataclasses import dataclass

import click

from webapp.cli import our_commands
from webapp.reference.text import cell, code, prose, table

FLASK = "flask --app webapp"
CONSOLE_SCRIPT = "scheduler-worker"  # pyproject.toml's [project.scripts]: `scheduler worker`


@dataclass(frozen=True)
class Entry:
    """A command as typed (`flask --app webapp tenant create`), with its click context."""

    path: str
    command: click.Command
    context: click.Context


def entries() -> list[Entry]:
    """Every command and group, in the order the page lists them: by name, a group's commands
    after it; the console script last."""
    root = click.Context(click.Group("flask"), info_name=FLASK)
    found: list[Entry] = []

    def visit(name: str, command: click.Command, parent: click.Context) -> None:
        context = click.Context(command, info_name=name, parent=parent)
        found.append(Entry(context.command_path, command, context))
        if isinstance(command, click.Group):
            for child in sorted(command.commands):
                visit(child, command.commands[child], context)

    for name, command in sorted(our_commands().items()):
        visit(name, command, root)
    worker = our_commands()["scheduler-worker"]
    found.append(Entry(CONSOLE_SCRIPT, worker, click.Context(worker, info_name=CONSOLE_SCRIPT)))
    return found


def options(entry: Entry) -> list[click.Option]:
    return [param for param in entry.command.params if isinstance(param, click.Option)]


def option_names(option: click.Option) -> str:
    return ", ".join(code(name) for name in [*option.opts, *option.secondary_opts])


def type_of(option: click.Option, context: click.Context) -> str:
    kind = option.type
    if option.is_flag and not option.secondary_opts:
        return "flag"
    if option.is_flag:
        return "on / off"
    if isinstance(kind, click.Choice):
        return " or ".join(code(choice) for choice in kind.choices)
    if isinstance(kind, click.IntRange | click.FloatRange):
        word = "integer" if isinstance(kind, click.IntRange) else "number"
        low = "" if kind.min is None else f"{kind.min}"
        high = "" if kind.max is None else f"{kind.max}"
        return f"{word} {low} to {high}" if low and high else f"{word} from {low or high}"
    return cell(option.make_metavar(context).lower())


def default_of(option: click.Option, context: click.Context) -> str:
    value = option.get_default(context, call=False)
    if value in (None, "") or callable(value) or repr(value).endswith("UNSET"):
        return ""
    if option.is_flag and not option.secondary_opts:
        return ""
    if option.is_flag:
        return code(option.opts[0] if value else option.secondary_opts[0])
    return code(value)


def render_entry(entry: Entry) -> str:
    level = "###" if " " in entry.path.removeprefix(FLASK + " ") else "##"
    parts = [
        f"{level} `{entry.path}`",
        prose(entry.command.help),
        "```\n" + entry.command.get_usage(entry.context) + "\n```",
    ]
    if isinstance(entry.command, click.Group):
        commands = ", ".join(f"`{name}`" for name in sorted(entry.command.commands))
        parts.append(f"Commands: {commands}.")
    rows = [
        (
            option_names(option),
            type_of(option, entry.context),
            default_of(option, entry.context),
            ("**required.** " if option.required else "") + cell(option.help or ""),
        )
        for option in options(entry)
    ]
    if rows:
        parts.append(table(("Option", "Takes", "Default", "Meaning"), rows))
    return "\n\n".join(part for part in parts if part)


def render() -> str:
    return "\n\n".join(render_entry(entry) for entry in entries()) + "\n"
