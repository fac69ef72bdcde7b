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
