"""What a plain-English phrase says, as slots (times, repeats, days, months), and the five
cron fields they make; PhraseError, the error of a phrase that cannot be read or written as
cron. The grammar that fills the slots is `phrases`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import CronError
from .words import clock_words, cron_list, not_one_cron, time_fields

# Three phrases that work, shown with an error: in general, for times, repeats and days.
GENERAL_EXAMPLES = (
    "every weekday at 9:30",
    "every 15 minutes",
    "the last day of the month at 23:00",
)
TIME_EXAMPLES = ("every day at 9:30", "on weekdays at 9am and 5pm", "daily at noon")
REPEAT_EXAMPLES = ("every 15 minutes", "every 2 hours at :30", "every 10 minutes between 9 and 17")
DAY_EXAMPLES = ("on the 1st and 15th at noon", "the first Monday of the month", "weekends at 10")


class PhraseError(CronError):
    """A phrase the grammar does not understand: `problem` says which part, `examples` shows
    three phrases it does understand. str() is one line with both."""

    def __init__(self, problem: str, examples: tuple[str, ...] = GENERAL_EXAMPLES) -> None:
        self.problem = problem
        self.examples = examples
        quoted = [f"“{example}”" for example in examples]
        super().__init__(f"{problem}; try e.g. {quoted[0]}, {quoted[1]} or {quoted[2]}")


@dataclass
class Plan:
    """The slots a phrase fills, clause by clause; cron() writes the five fields."""

    times: list[tuple[int, int]] = field(default_factory=list)  # at 9:30 and 17:00
    minute: int | None = None  # at :15, 15 past the hour
    repeat: tuple[int, str] | None = None  # every 15 minutes: (15, "minute"); (2, "hour")
    period: tuple[int, str] | None = None  # daily (1, "day"), every 3 months (3, "month")
    window: tuple[int, int] | None = None  # between 9 and 17, in minutes of the day
    per_day: int | None = None  # twice a day
    weekdays: set[int] = field(default_factory=set)
    nth_weekdays: list[str] = field(default_factory=list)  # "1#1", "5#L"
    except_weekdays: set[int] = field(default_factory=set)
    days: set[int] = field(default_factory=set)
    last_days: list[str] = field(default_factory=list)  # "L", "LW"
    months: set[int] = field(default_factory=set)

    def set_once(self, slot: str, value: object, words: str) -> None:
        if getattr(self, slot) not in (None, value):
            raise PhraseError(f"“{words}” says how often a second time: keep one", REPEAT_EXAMPLES)
        setattr(self, slot, value)

    def cron(self) -> str:
        minute, hour = self._time_fields()
        day, month, weekday = self._day_fields()
        return f"{minute} {hour} {day} {month} {weekday}"

    def _time_fields(self) -> tuple[str, str]:
        every, unit = self.repeat or (1, "")
        if self.repeat or self.minute is not None or self.window is not None:
            if self.times:
                raise PhraseError(
                    f"a repeat within the day and a time of day ({clock_words(self.times[0])}) "
                    "do not go together",
                    REPEAT_EXAMPLES,
                )
            if unit == "minute":
                if self.minute is not None:
                    raise PhraseError(f"every {every} minutes has no minute past the hour")
                minutes = list(range(0, 60, every))
                return "*" if every == 1 else f"*/{every}", self._hours(minutes, every=1)
            if not self.repeat and self.minute is None:
                raise PhraseError("say how often within those hours", REPEAT_EXAMPLES)
            return str(self.minute or 0), self._hours([self.minute or 0], every)
        times = sorted(set(self.times or [(0, 0)]))
        if self.per_day is not None and self.per_day != len(times):
            raise PhraseError(
                f"{self.per_day} times a day needs {self.per_day} times of day, got {len(times)}",
                TIME_EXAMPLES,
            )
        fields = time_fields(times)
        if fields is None:
            raise PhraseError(not_one_cron(times), TIME_EXAMPLES)
        return fields

    def _hours(self, minutes: list[int], every: int) -> str:
        """The hour field of a repeat: every `every` hours, within the window if there is one.

        A window of whole hours keeps the hours whose fires all fall inside it: between 9 and
        17, every 10 minutes fires from 09:00 to 16:50, every hour from 09:00 to 17:00."""
        if self.window is None:
            return "*" if every == 1 else f"*/{every}"
        start, end = self.window

        def inside(moment: int) -> bool:
            # A repeat within the hour ends before the window does; once an hour, at its end.
            if len(minutes) > 1 and moment == end:
                return False
            return start <= moment <= end if start <= end else moment >= start or moment <= end

        # An hour's fires span its first to its last minute: inside, outside, or cut (refused).
        spans = [(inside(h * 60 + minutes[0]), inside(h * 60 + minutes[-1])) for h in range(24)]
        hours = [hour for hour, (first, last) in enumerate(spans) if first and last]
        if not hours or any(first != last for first, last in spans):
            raise PhraseError(
                "cron can only repeat within whole hours: start and end the stretch on the hour",
                REPEAT_EXAMPLES,
            )
        kept = hours[::every]
        if every > 1 and len(kept) > 1 and kept == list(range(kept[0], kept[-1] + 1, every)):
            return f"{kept[0]}-{kept[-1]}/{every}"
        return cron_list(kept)

    def _day_fields(self) -> tuple[str, str, str]:
        every, unit = self.period or (1, "")
        day = [cron_list(sorted(self.days))] if self.days else []
        day += self.last_days
        month = cron_list(sorted(self.months)) if self.months else "*"
        weekdays = set(self.weekdays)
        if unit == "day" and every > 1:
            day = [f"*/{every}"]
        if unit == "week" and not weekdays and not self.nth_weekdays:
            weekdays = {0}  # as @weekly: Sunday
        if unit == "month" and every > 1:
            if self.months:
                raise PhraseError(f"every {every} months already names the months", DAY_EXAMPLES)
            month = f"*/{every}"
        if unit == "year" and not self.months:
            month = "1"
        named_day = day or weekdays or self.nth_weekdays
        if unit in ("month", "year") and not named_day:
            day = ["1"]
        if self.except_weekdays:
            weekdays = (weekdays or set(range(7))) - self.except_weekdays
            if not weekdays:
                raise PhraseError("that leaves no day of the week", DAY_EXAMPLES)
        weekday = [cron_list(sorted(weekdays))] if weekdays else []
        weekday += self.nth_weekdays
        return ",".join(day) or "*", month, ",".join(weekday) or "*"
