"""English phrasing shared by the cron module's messages: lists and runs of wall times, and
the runs of consecutive values that cron writes as ranges."""

from __future__ import annotations

from datetime import datetime


def join_words(words: list[str], conjunction: str) -> str:
    """E.g. "February", "April and June" or "29, 30 or 31"."""
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


def wall_times_phrase(times: list[datetime], verb: str) -> str:
    """E.g. "02:30 does not exist", "02:00, 02:05 and 02:10 do not exist" or "01:00-01:59
    happens twice", for the verbs "not exist" and "happen twice"."""
    singular = {"not exist": "does not exist", "happen twice": "happens twice"}[verb]
    plural = {"not exist": "do not exist", "happen twice": "happen twice"}[verb]
    if len(times) == 1:
        return f"{times[0]:%H:%M} {singular}"
    if len(times) <= 3:
        return f"{join_words([f'{t:%H:%M}' for t in times], 'and')} {plural}"
    return f"{times[0]:%H:%M}-{times[-1]:%H:%M} {singular}"


def consecutive_runs(values: list[int]) -> list[list[int]]:
    """Sorted values cut into runs of consecutive ones: [1, 2, 3, 6] -> [[1, 2, 3], [6]]."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return runs


def cron_list(values: list[int]) -> str:
    """Sorted values as a cron list, runs of three or more as ranges: "1-5", "0,6", "9,17"."""
    parts = []
    for run in consecutive_runs(values):
        parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(value) for value in run]
    return ",".join(parts)


def clock_words(time: tuple[int, int]) -> str:
    """(9, 30) as "09:30"."""
    return f"{time[0]:02d}:{time[1]:02d}"


def time_fields(times: list[tuple[int, int]]) -> tuple[str, str] | None:
    """The minute and hour fields of times of day (hour, minute), or None when cron cannot
    write them: it fires at every listed minute of every listed hour, so 09:00 and 17:30 would
    also fire at 09:30 and 17:00."""
    hours = sorted({hour for hour, _ in times})
    minutes = sorted({minute for _, minute in times})
    if len(hours) * len(minutes) != len(set(times)):
        return None
    return cron_list(minutes), cron_list(hours)


def not_one_cron(times: list[tuple[int, int]]) -> str:
    """Why time_fields refused these times."""
    listed = ", ".join(clock_words(time) for time in sorted(set(times)))
    return (
        f"{listed} cannot be one cron expression: it repeats the same minutes every hour it "
        "names (make one schedule per minute)"
    )
