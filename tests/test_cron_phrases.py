"""Plain-English input: each phrase shape to its exact cron, round trips through the cron
description, and a specific message with three examples for what the grammar cannot read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies

from webapp.cron import (
    CronError,
    PhraseError,
    cron_from_input,
    describe,
    looks_like_cron,
    parse_phrase,
    validate,
)

# The phrases, then the extras a demanding user expects (docs/reference/cron.md:
# "Plain-English input").
PHRASES = {
    "every weekday at 9:30": "30 9 * * 1-5",
    "every 15 minutes": "*/15 * * * *",
    "twice a day at 9 and 17": "0 9,17 * * *",
    "every Monday and Thursday at 8am": "0 8 * * 1,4",
    "on the 1st and 15th at noon": "0 12 1,15 * *",
    "the first Monday of the month at 8:00": "0 8 * * 1#1",
    "the last Friday of the month at 17:30": "30 17 * * 5#L",
    "the last day of the month at 23:00": "0 23 L * *",
    "every quarter on the 1st at 6:00": "0 6 1 */3 *",
    "every 10 minutes between 9 and 17 on weekdays": "*/10 9-16 * * 1-5",
    "hourly": "0 * * * *",
    "daily at midnight": "0 0 * * *",
    # Times: 9:30, 09:30, 9.30am, 9am, noon, midnight, 17:30, and more.
    "every day at 09:30": "30 9 * * *",
    "every day at 9.30am": "30 9 * * *",
    "every day at 9.30 pm": "30 21 * * *",
    "every day at 12am": "0 0 * * *",
    "every day at 12pm": "0 12 * * *",
    "at 9 o'clock": "0 9 * * *",
    "every day at 6pm": "0 18 * * *",
    "at 17:30 every day": "30 17 * * *",
    "9:30 mon-fri": "30 9 * * 1-5",
    # Repeats.
    "every minute": "* * * * *",
    "every 5 minutes": "*/5 * * * *",
    "every five minutes": "*/5 * * * *",
    "every half hour": "*/30 * * * *",
    "every 60 minutes": "0 * * * *",
    "every hour": "0 * * * *",
    "every hour at :15": "15 * * * *",
    "every hour at 15 past": "15 * * * *",
    "every hour at half past": "30 * * * *",
    "every hour on the hour": "0 * * * *",
    "every 2 hours": "0 */2 * * *",
    "every 2 hours at :30": "30 */2 * * *",
    "every hour between 9 and 17": "0 9-17 * * *",
    "every 2 hours from 8:00 to 18:00 on weekdays": "0 8-18/2 * * 1-5",
    "every 30 minutes between 22:00 and 6:00": "*/30 0-5,22,23 * * *",
    "every 24 hours": "0 0 * * *",
    "every other day at noon": "0 12 */2 * *",
    # Days of the week.
    "weekends at 10": "0 10 * * 0,6",
    "on weekdays at 9am and 5pm": "0 9,17 * * 1-5",
    "every business day at 7:45": "45 7 * * 1-5",
    "Monday to Friday at 8": "0 8 * * 1-5",
    "every day except Sunday at 7": "0 7 * * 1-6",
    "weekly": "0 0 * * 0",
    "weekly on Friday at 16:00": "0 16 * * 5",
    "Tues, Thurs at 11am": "0 11 * * 2,4",
    "Friday to Monday at 22:00": "0 22 * * 0,1,5,6",
    # Days of the month and months.
    "monthly": "0 0 1 * *",
    "each month on the 15th at 9": "0 9 15 * *",
    "on day 1 and 15 of the month at 12:00": "0 12 1,15 * *",
    "from the 1st to the 7th at 9": "0 9 1-7 * *",
    "the first and third Tuesday at 10": "0 10 * * 2#1,2#3",
    "the last weekday of the month at 18:00": "0 18 LW * *",
    "every 3 months": "0 0 1 */3 *",
    "quarterly at 6": "0 6 1 */3 *",
    "yearly": "0 0 1 1 *",
    "every year on December 25 at 9": "0 9 25 12 *",
    "on the 1st of January at 00:05": "5 0 1 1 *",
    "25 Dec at 7am": "0 7 25 12 *",
    "at the end of the month at 22:00": "0 22 L * *",
    "end of every month": "0 0 L * *",
    "in January and July on the 1st at 3": "0 3 1 1,7 *",
    # Case, spaces, commas and "and" are tolerated.
    "  EVERY   Weekday ,  at 9:30 ": "30 9 * * 1-5",
    "on Mondays, Wednesdays, and Fridays at 7": "0 7 * * 1,3,5",
}
# The description lists these hours as times ("at 00:00 through 05:59, 22:00, and 23:00").
NOT_READ_BACK = {"*/30 0-5,22,23 * * *"}


@pytest.mark.parametrize(("phrase", "expected"), PHRASES.items(), ids=list(PHRASES))
def test_a_phrase_gives_its_cron(phrase: str, expected: str) -> None:
    assert parse_phrase(phrase) == expected


@pytest.mark.parametrize(
    "expected",
    [c for c in PHRASES.values() if c not in NOT_READ_BACK],
    ids=str,
)
def test_the_cron_of_a_phrase_reads_back_as_itself_from_its_description(expected: str) -> None:
    """parse(describe(cron)) == cron: the words the preview shows name the same schedule
    (a step's note on its gaps, in brackets, adds nothing to read back)."""
    words = describe(validate(expected, "UTC")).partition(" (")[0]
    assert parse_phrase(words) == expected, words


DESCRIBED = [
    "30 9 * * 1-5",
    "*/15 * * * *",
    "0 9,17 * * *",
    "0 8 * * 1,4",
    "0 12 1,15 * *",
    "0 6 1 1,4,7,10 *",
    "*/10 9-16 * * 1-5",
    "*/10 9-17 * * 1-5",
    "0 * * * *",
    "0 0 * * *",
    "0 10 * * 0,6",
    "15 * * * *",
    "0 */2 * * *",
    "30 */2 * * *",
    "0 9-17 * * *",
    "* * * * *",
    "0 9 25 12 *",
    "30 8 * 1,7 *",
    "0 0 1 1 *",
    "45 23 * * 5",
    "0 9 1-7 * *",
    "0 8 * * 1#1",
    "30 17 * * 5#L",
    "0 23 L * *",
    "0 18 LW * *",
    "0 10 * * 2#1,2#3",
    "0 9 L * 5",
    "0 0 1 * 1",
    "0 0 */2 * 1",
]


@pytest.mark.parametrize("expression", DESCRIBED)
def test_the_description_of_a_cron_parses_back_to_it(expression: str) -> None:
    words = describe(validate(expression, "UTC"))
    assert parse_phrase(words) == expression, words


@pytest.mark.parametrize(
    ("phrase", "part"),
    [
        ("every fortnight at 9", "“every fortnight” is not a cron schedule: cron cannot count"),
        ("fortnightly", "cron cannot count weeks"),
        ("every blue moon", "did not understand “blue”"),
        ("every 90 minutes", "“every 90 minutes” is not a cron schedule"),
        ("every 2 weeks", "cron cannot count weeks"),
        ("every 30 seconds", "cron counts whole minutes"),
        ("at 25:00", "“25:00” is not a time of day"),
        ("at 13pm", "with am or pm the hour is 1 to 12"),
        ("at 9:5", "write minutes with two digits"),
        ("at lunch", "expected a time after “at”, not “lunch”"),
        ("twice a day at 9", "2 times a day needs 2 times of day, got 1"),
        ("at 9:30 and 17:15", "09:30, 17:15 cannot be one cron expression"),
        ("every 10 minutes at 9:00", "do not go together"),
        ("between 9 and 17", "say how often within those hours"),
        ("every 10 minutes between 9:30 and 17", "start and end the stretch on the hour"),
        ("the 6th Monday", "“the 6th monday”: say first to fifth, or last"),
        ("the first weekday of the month", "cron knows only the last weekday"),
        ("hourly every 15 minutes", "says how often a second time"),
        ("every day except every day", "did not understand “except”"),
        ("every 15", "“every 15” what?"),
        ("", "describe when the schedule should run"),
    ],
)
def test_a_phrase_not_understood_says_which_part_and_gives_three_examples(
    phrase: str, part: str
) -> None:
    with pytest.raises(PhraseError) as caught:
        parse_phrase(phrase)
    assert part in caught.value.problem
    assert len(caught.value.examples) == 3
    # Each example is itself understood.
    assert all(parse_phrase(example) for example in caught.value.examples)
    assert str(caught.value).startswith(caught.value.problem + "; try e.g. “")
    assert "\n" not in str(caught.value)


def test_a_phrase_error_is_a_cron_error() -> None:
    """Callers that refuse bad cron refuse an unreadable phrase the same way."""
    with pytest.raises(CronError):
        parse_phrase("whenever")


@pytest.mark.parametrize(
    ("text", "cron_like"),
    [
        ("0 9 * * 1-5", True),
        ("0 9 * *", True),  # one field short: cron's own message
        ("0 8 * * MON#1", True),
        ("30 17 * * 5#L", True),
        ("0 23 L * *", True),
        ("@daily", True),
        ("", True),
        ("every weekday at 9:30", False),
        ("9am", False),
        ("hourly", False),
        ("sun", False),
    ],
)
def test_a_cron_field_tells_cron_from_a_phrase(text: str, cron_like: bool) -> None:
    assert looks_like_cron(text) is cron_like


def test_a_cron_field_keeps_cron_as_typed_and_turns_a_phrase_into_cron() -> None:
    assert cron_from_input("0 9 * *") == "0 9 * *"  # validated later, with cron's message
    assert cron_from_input("every weekday at 9:30") == "30 9 * * 1-5"
    with pytest.raises(PhraseError):
        cron_from_input("every blue moon")


WORDS = (
    "every each 15 2 0 60 90 24 minutes minute hours hour day days week month months quarter "
    "year at on the between and from to , - 9 17 9:30 09:30 9.30am 9am pm am noon midnight "
    "17:30 :15 past half of first last third fifth 1st 15th 31st 6th weekday weekdays weekend "
    "monday mon fri sunday january dec march except twice once times a daily hourly weekly "
    "monthly quarterly other business o'clock 99 25:00 13pm 9:5 through until"
).split()


@settings(max_examples=1000, derandomize=True, database=None, deadline=None)
@given(strategies.lists(strategies.sampled_from(WORDS), min_size=1, max_size=8))
def test_any_jumble_of_schedule_words_gives_cron_or_a_phrase_error(words: list[str]) -> None:
    """Never a crash: cron with five fields (valid, or refused by cron's own check with a
    message), or PhraseError."""
    try:
        expression = parse_phrase(" ".join(words))
    except PhraseError as error:
        assert error.problem and len(error.examples) == 3
        return
    assert len(expression.split(" ")) == 5
    try:
        validate(expression, "UTC")
    except CronError as error:
        assert str(error)
