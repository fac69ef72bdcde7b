"""Plain-English schedules: "every weekday at 9:30" -> "30 9 * * 1-5".

A grammar of our own, offline: no model, no network, no regular expressions. The phrase is cut
into words (`_words`); a loop then reads it clause by clause, in any order, each clause matched
by one rule below, one rule per phrase shape ("every 15 minutes", "at 9 and 17", "on weekdays",
"the last Friday of the month"...). A rule fills slots of a `Plan`; `Plan.cron()` then writes
the five fields. What the grammar cannot read raises PhraseError, which names the word it
stopped at and gives three examples.

Days of the month and of the week use the extended syntax where plain cron has no words for
them: `L` (the last day), `LW` (the last weekday), `D#N` and `D#L` (the n-th or last weekday D).
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from typing import TypeVar

from .fields import DAY_NAMES, MONTH_NAMES
from .phrase_plan import (
    DAY_EXAMPLES,
    REPEAT_EXAMPLES,
    TIME_EXAMPLES,
    PhraseError,
    Plan,
)

# --- Words --------------------------------------------------------------------------------

_FULL_DAYS = [calendar.day_name[(day - 1) % 7].lower() for day in range(7)]  # sunday first
WEEKDAY_WORDS = {
    **{name: number for number, name in enumerate(_FULL_DAYS)},
    **{name + "s": number for number, name in enumerate(_FULL_DAYS)},
    **{name: number for number, name in enumerate(DAY_NAMES)},
    **{"tues": 2, "weds": 3, "thur": 4, "thurs": 4},
}
MONTH_WORDS = {
    **{calendar.month_name[number].lower(): number for number in range(1, 13)},
    **{name: number for number, name in enumerate(MONTH_NAMES, start=1)},
    "sept": 9,
}
NUMBER_WORDS = {
    **{word: n for n, word in enumerate("one two three four five six".split(), start=1)},
    **{"seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12},
    **{"fifteen": 15, "twenty": 20, "thirty": 30, "other": 2},
}
ORDINAL_WORDS: dict[str, int | str] = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "last": "L",
}
ORDINAL_ENDINGS = ("st", "nd", "rd", "th")
UNITS = {"min": "minute", "hr": "hour", "quarter": "quarter", "fortnight": "fortnight"}
UNITS |= {unit: unit for unit in ("minute", "hour", "day", "week", "month", "year")}
ADVERBS = {"hourly": (1, "hour"), "daily": (1, "day"), "nightly": (1, "day"), "weekly": (1, "week")}
ADVERBS |= {"fortnightly": (1, "fortnight"), "monthly": (1, "month"), "quarterly": (3, "month")}
ADVERBS |= {"yearly": (1, "year"), "annually": (1, "year")}
TIMES_A_DAY = {"once": 1, "twice": 2, "thrice": 3}
WORKDAYS = {"weekday", "weekdays", "workday", "workdays"}
WORKDAY_FIRST_WORDS = {"business", "working", "week", "work"}  # "business days", "week days"
WEEKEND = {"weekend", "weekends"}
RANGE_WORDS = ("to", "through", "thru", "till", "until")
# Longer input is refused before it is read (a form field, a query parameter).
MAX_PHRASE_LENGTH = 200
FILLERS = {"and", "or", "on", "the", "every", "each", "only", "run", "runs", "of", "in", "from"}


def _words(text: str) -> list[str]:
    """Lower case; commas, semicolons and '&' read as "and", a hyphen as "to" (mon-fri)."""
    text = text.lower().replace("a.m.", "am").replace("p.m.", "pm").replace("\u2019", "'")
    for mark in ",;&+":
        text = text.replace(mark, " and ")
    text = text.replace("-", " to ")
    return [word.rstrip(".!") for word in text.split() if word.rstrip(".!")]


def _digits(text: str) -> bool:
    return bool(text) and all(char in "0123456789" for char in text)


def _unit(word: str) -> str | None:
    return UNITS.get(word) or UNITS.get(word.removesuffix("s"))


def _ordinal(word: str) -> int | str | None:
    """1 for "1st" or "first", "L" for "last"; None for any other word."""
    if word in ORDINAL_WORDS:
        return ORDINAL_WORDS[word]
    if word[-2:] in ORDINAL_ENDINGS and _digits(word[:-2]) and len(word) <= 4:
        return int(word[:-2])
    return None


# --- Reading ------------------------------------------------------------------------------


class _Reader:
    """The words of a phrase and the position reached."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.at = 0

    def peek(self, ahead: int = 0) -> str:
        index = self.at + ahead
        return self.words[index] if index < len(self.words) else ""

    def take(self, *options: str) -> bool:
        if self.peek() in options:
            self.at += 1
            return True
        return False

    def since(self, start: int) -> str:
        return " ".join(self.words[start : self.at])


def _number(r: _Reader) -> int | None:
    word = r.peek()
    if _digits(word) and len(word) <= 4:
        r.at += 1
        return int(word)
    if word in NUMBER_WORDS:
        r.at += 1
        return NUMBER_WORDS[word]
    return None


def _clock(r: _Reader, bare: bool) -> int | None:
    """A time of day as minutes since midnight: 9:30, 09:30, 9.30am, 9am, 9 pm, noon,
    midnight, 17:30; a bare hour ("9") only where `bare` (after "at", in "between 9 and 17")."""
    word = r.peek()
    if word in ("noon", "midday", "midnight"):
        r.at += 1
        return 0 if word == "midnight" else 12 * 60
    text, suffix = word, ""
    if text[-2:] in ("am", "pm") and len(text) > 2:
        text, suffix = text[:-2], text[-2:]
    hour_text, separator, minute_text = text.partition(":")
    if not separator:
        hour_text, separator, minute_text = text.partition(".")
    if not _digits(hour_text) or len(hour_text) > 2:
        return None
    if separator and (len(minute_text) != 2 or not _digits(minute_text)):
        raise PhraseError(f"“{word}” is not a time: write minutes with two digits", TIME_EXAMPLES)
    used = 1
    if not suffix and r.peek(1) in ("am", "pm", "o'clock"):
        suffix, used = r.peek(1), 2
    if not (separator or suffix or bare):
        return None
    hour, minute = int(hour_text), int(minute_text or 0)
    if suffix in ("am", "pm"):
        if not 1 <= hour <= 12:
            raise PhraseError(f"“{word}”: with am or pm the hour is 1 to 12", TIME_EXAMPLES)
        hour = hour % 12 + (12 if suffix == "pm" else 0)
    if hour > 23 or minute > 59:
        raise PhraseError(f"“{word}” is not a time of day (00:00 to 23:59)", TIME_EXAMPLES)
    r.at += used
    return hour * 60 + minute


T = TypeVar("T")


def _items(r: _Reader, item: Callable[[_Reader], list[T] | None]) -> list[T]:
    """One or more items joined by "and" (or commas); an "and" before a word that is no item
    is left for the next clause."""
    found = item(r)
    if found is None:
        return []
    values = list(found)
    while True:
        start = r.at
        while r.take("and"):
            pass
        more = item(r)
        if more is None:
            r.at = start
            return values
        values += more


# --- The rules, one per phrase shape --------------------------------------------------------


def _every(r: _Reader, plan: Plan) -> bool:
    """every 15 minutes, every 2 hours, every other day, every half hour, every month,
    every quarter, every year; every minute; "every" before anything else is a filler."""
    start = r.at
    if not r.take("every", "each"):
        return False
    amount = _number(r)
    if r.peek() in ("half", "quarter") and _unit(r.peek(1)) == "hour":
        amount = 30 if r.peek() == "half" else 15
        r.at += 1
        unit: str | None = "minute"
    else:
        unit = _unit(r.peek())
    if r.peek().startswith("second"):
        raise PhraseError("cron counts whole minutes: every minute is the most often")
    if unit is None:
        if amount is not None:
            raise PhraseError(f"“{r.since(start)}” what? say minutes, hours, days or months")
        return True  # "every Monday": the days' rule reads on
    r.at += 1
    _repeat(plan, amount or 1, unit, r.since(start))
    return True


def _repeat(plan: Plan, amount: int, unit: str, words: str) -> None:
    if unit == "minute" and amount % 60 == 0:
        amount, unit = amount // 60, "hour"
    if unit == "hour" and amount == 24:
        amount, unit = 1, "day"
    if unit in ("quarter", "fortnight"):
        amount, unit = (amount * 3, "month") if unit == "quarter" else (amount * 2, "week")
    limits = {"minute": 59, "hour": 23, "day": 31, "week": 1, "month": 12, "year": 1}
    if not 1 <= amount <= limits[unit]:
        why = {
            "minute": "use 1 to 59 minutes, or whole hours",
            "hour": "use 1 to 23 hours",
            "week": "cron cannot count weeks: name the days instead",
            "year": "cron cannot count years",
        }.get(unit, f"use 1 to {limits[unit]} {unit}s")
        raise PhraseError(f"“{words}” is not a cron schedule: {why}", REPEAT_EXAMPLES)
    slot = "repeat" if unit in ("minute", "hour") else "period"
    plan.set_once(slot, (amount, unit), words)


def _adverb(r: _Reader, plan: Plan) -> bool:
    """hourly, daily, nightly, weekly, monthly, quarterly, yearly, annually."""
    word = r.peek()
    if word not in ADVERBS:
        return False
    r.at += 1
    _repeat(plan, *ADVERBS[word], word)
    return True


def _times_a_day(r: _Reader, plan: Plan) -> bool:
    """twice a day, three times a day, once daily, 4 times per day."""
    start = r.at
    count = TIMES_A_DAY.get(r.peek())
    if count is not None:
        r.at += 1
    else:
        count = _number(r)
        if count is None or not r.take("times"):
            r.at = start
            return False
    if not (r.take("daily") or (r.take("a", "per", "each", "every") and r.take("day"))):
        raise PhraseError(f"“{r.since(start)}” goes with “a day”", TIME_EXAMPLES)
    plan.per_day = count
    return True


def _minute_past(r: _Reader, plan: Plan) -> bool:
    """at :15, at 15 past, 15 minutes past the hour, at minute 15, on the hour,
    at quarter past, at half past."""
    start = r.at
    r.take("at", "on")
    word = r.peek()
    minute: int | None = None
    if word.startswith(":") and _digits(word[1:]) and len(word) == 3:
        r.at += 1
        minute = int(word[1:])
    elif r.take("minute"):
        minute = _number(r)
    elif word == "the" and r.peek(1) == "hour":
        r.at += 2
        minute = 0
    else:
        minute = {"quarter": 15, "half": 30}.get(word)
        if minute is not None:
            r.at += 1
        else:
            minute = _number(r)
            r.take("minutes", "minute", "mins", "min")
        if minute is None or not r.take("past", "after"):
            r.at = start
            return False
        if r.take("the"):
            r.take("hour")
    if minute is None or minute > 59:
        raise PhraseError(f"“{r.since(start)}”: a minute past the hour is 0 to 59", TIME_EXAMPLES)
    if plan.minute not in (None, minute):
        raise PhraseError(f"“{r.since(start)}” is a second minute past the hour", TIME_EXAMPLES)
    plan.minute = minute
    return True


def _at_times(r: _Reader, plan: Plan) -> bool:
    """at 9:30, at 9 and 17, at 9am and 5pm, at noon; 9:30 without "at" too."""
    start = r.at
    after_at = r.take("at")
    times = _items(r, lambda reader: _one(_clock(reader, bare=after_at)))
    if not times:
        if after_at:
            raise PhraseError(f"expected a time after “at”, not “{r.peek()}”", TIME_EXAMPLES)
        r.at = start
        return False
    plan.times += [divmod(time, 60) for time in times]
    return True


def _one(value: T | None) -> list[T] | None:
    return None if value is None else [value]


def _window(r: _Reader, plan: Plan) -> bool:
    """between 9 and 17, from 9:00 to 17:00, between 22:00 and 6:00 (across midnight)."""
    start = r.at
    if not r.take("between", "from"):
        return False
    first = _clock(r, bare=True)
    if first is None or not r.take("and", *RANGE_WORDS):
        r.at = start
        return False
    last = _clock(r, bare=True)
    if last is None:
        raise PhraseError(f"expected a time after “{r.since(start)}”", REPEAT_EXAMPLES)
    if plan.window is not None:
        raise PhraseError(f"“{r.since(start)}” is a second stretch of the day", REPEAT_EXAMPLES)
    plan.window = (first, last)
    return True


def _weekday_item(r: _Reader) -> list[int] | None:
    """monday, mondays, mon; monday to friday; weekdays, business days; weekends."""
    word = r.peek()
    if word in WORKDAYS or (word in WORKDAY_FIRST_WORDS and r.peek(1) in ("day", "days")):
        r.at += 1 if word in WORKDAYS else 2
        return [1, 2, 3, 4, 5]
    if word in WEEKEND:
        r.at += 1
        r.take("day", "days")
        return [0, 6]
    if word not in WEEKDAY_WORDS:
        return None
    first = WEEKDAY_WORDS[word]
    r.at += 1
    if r.peek() in RANGE_WORDS and r.peek(1) in WEEKDAY_WORDS:
        last = WEEKDAY_WORDS[r.peek(1)]
        r.at += 2
        return [day % 7 for day in range(first, last + 1 if last >= first else last + 8)]
    return [first]


def _weekdays(r: _Reader, plan: Plan) -> bool:
    """on Monday and Thursday, every weekday, Monday through Friday, weekends, mon-fri;
    except Sundays."""
    start = r.at
    excluding = r.take("except", "excluding", "but")
    r.take("not", "on")
    days = _items(r, _weekday_item)
    if not days:
        r.at = start
        return False
    (plan.except_weekdays if excluding else plan.weekdays).update(days)
    return True


def _ordinal_item(r: _Reader) -> list[int | str] | None:
    r.take("the")
    value = _ordinal(r.peek())
    if value is None:
        return None
    r.at += 1
    if r.peek() in RANGE_WORDS and isinstance(value, int):  # the 1st to the 7th
        r.at += 1
        r.take("the")
        last = _ordinal(r.peek())
        if not isinstance(last, int) or last < value:
            raise PhraseError(f"“{r.peek()}” does not end a range of days", DAY_EXAMPLES)
        r.at += 1
        return [*range(value, last + 1)]
    return [value]


def _ordinals(r: _Reader, plan: Plan) -> bool:
    """the 1st and 15th; the first Monday; the last Friday; the first and third Tuesday;
    the last day; the last weekday; the 1st of January."""
    start = r.at
    values = _items(r, _ordinal_item)
    if not values:
        r.at = start
        return False
    if r.take("weekday") or (r.peek(1) == "day" and r.take("business", "working")):
        r.take("day")
        if values != ["L"]:
            raise PhraseError(f"“{r.since(start)}”: cron knows only the last weekday", DAY_EXAMPLES)
        plan.last_days.append("LW")
        return True
    days = _items(r, _weekday_item)
    if days:
        if any(value != "L" and not 1 <= int(value) <= 5 for value in values):
            raise PhraseError(f"“{r.since(start)}”: say first to fifth, or last")
        plan.nth_weekdays += [f"{day}#{value}" for day in sorted(set(days)) for value in values]
        return True
    r.take("day")
    _add_days(plan, values, r.since(start))
    return True


def _add_days(plan: Plan, values: list[int | str], words: str) -> None:
    for value in values:
        if value == "L":
            plan.last_days.append("L")
        elif isinstance(value, int) and 1 <= value <= 31:
            plan.days.add(value)
        else:
            raise PhraseError(f"“{words}”: a day of the month is 1 to 31", DAY_EXAMPLES)


def _day_numbers(r: _Reader, plan: Plan) -> bool:
    """on day 1 and 15 (of the month), days 1 to 7, between day 1 and 7."""
    start = r.at
    between = r.take("between")
    if not r.take("day", "days"):
        r.at = start
        return False

    def item(reader: _Reader) -> list[int | str] | None:
        first = _number(reader)
        if first is None or not reader.take(*RANGE_WORDS, *(["and"] if between else [])):
            return _one(first)
        last = _number(reader)
        return None if last is None else [*range(first, last + 1)]

    values = _items(r, item)
    if not values:
        r.at = start
        return False
    _add_days(plan, values, r.since(start))
    return True


def _month_item(r: _Reader) -> list[int] | None:
    word = r.peek()
    if word not in MONTH_WORDS:
        return None
    r.at += 1
    first = MONTH_WORDS[word]
    if r.peek() in RANGE_WORDS and r.peek(1) in MONTH_WORDS:
        last = MONTH_WORDS[r.peek(1)]
        r.at += 2
        return [(m - 1) % 12 + 1 for m in range(first, last + 1 if last >= first else last + 13)]
    return [first]


def _months(r: _Reader, plan: Plan) -> bool:
    """in January and July, only in January, April, July, and October, March to May;
    a date: December 25, Dec 25th, 25 December."""
    start = r.at
    day = _number(r) if r.peek(1) in MONTH_WORDS else None
    months = _items(r, _month_item)
    if not months:
        r.at = start
        return False
    plan.months.update(months)
    after = _ordinal(r.peek()) or (int(r.peek()) if _digits(r.peek()) else None)
    if day is None and isinstance(after, int):  # December 25, Dec 25th
        day = after
        r.at += 1
    if day is not None:
        _add_days(plan, [day], r.since(start))
    return True


def _month_end(r: _Reader, plan: Plan) -> bool:
    """(at the) end of the month: its last day."""
    start = r.at
    r.take("at")
    r.take("the")
    if r.take("end") and r.take("of"):
        r.take("the", "each", "every", "a")
        if r.take("month"):
            plan.last_days.append("L")
            return True
    r.at = start
    return False


def _of_the_month(r: _Reader, _plan: Plan) -> bool:
    """of the month, of every month, in each month: words that add nothing."""
    start = r.at
    if r.take("of", "in"):
        r.take("the", "each", "every", "a")
        if r.take("month"):
            return True
    r.at = start
    return False


RULES: tuple[Callable[[_Reader, Plan], bool], ...] = (
    _month_end,
    _of_the_month,
    _every,
    _adverb,
    _times_a_day,
    _minute_past,
    _window,
    _ordinals,
    _day_numbers,
    _weekdays,
    _months,
    _at_times,
)


def parse_phrase(text: str) -> str:
    """The cron expression of a plain-English schedule, e.g. "30 9 * * 1-5" for "every weekday
    at 9:30"; PhraseError (a CronError) saying which part it did not understand."""
    if len(text) > MAX_PHRASE_LENGTH:
        raise PhraseError(f"a phrase is at most {MAX_PHRASE_LENGTH} characters")
    words = _words(text)
    if not words:
        raise PhraseError("describe when the schedule should run")
    r = _Reader(words)
    plan = Plan()
    while r.at < len(words):
        if not any(rule(r, plan) for rule in RULES):
            if not r.take(*FILLERS):
                raise PhraseError(f"did not understand “{r.peek()}” in “{' '.join(words)}”")
    return plan.cron()


def looks_like_cron(text: str) -> bool:
    """Whether a cron field's input is meant as cron (so that its errors are cron's): an
    @alias, or words made only of cron's characters and day or month names, one with a digit
    or '*'. "0 9 * *" is cron (one field short); "every weekday at 9:30" and "sun" are not."""
    words = text.lower().split()
    if not words or words[0].startswith("@"):
        return True
    names = {*DAY_NAMES, *MONTH_NAMES, "l", "lw", "w", "?", "*"}
    for word in words:
        for piece in word.replace(",", " ").replace("-", " ").replace("/", " ").split():
            for part in piece.split("#"):
                if not (_digits(part.rstrip("lw")) or part in names):
                    return False
    return any(char in "0123456789*" for char in text)


def cron_from_input(text: str) -> str:
    """What a cron field's input means: the input itself when it looks like cron (validated
    later, with cron's own messages), else the cron expression of the phrase it is."""
    return text if looks_like_cron(text) else parse_phrase(text)
