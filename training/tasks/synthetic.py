"""Small synthetic Python repositories with test suites, deterministic by seed.

For fast curricula and CI: no download, no virtual environment (the suites need only
pytest), seconds to build. A repository is a package of 2-5 modules drawn by seed
from a bank of function templates (number theory, sequences, text, parsing, and one
stateful class: an inventory, a bank account or a ring buffer), with names,
constants and module names varied by seed, functions calling each other across
modules, and a tests/ suite whose expected values are computed by running the clean
code while generating, so every test passes on the clean repository and the
assertions are exact (which is what makes most injected bugs visible).

    repo = generate_repo(7, Path("out/synth-7"))
    repo.test_command  # "{python} -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests"

Same seed, same bytes: only random.Random(seed) decides, never hash() or set order.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import random
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

MIN_TESTS = 15
TEST_COMMAND = "{python} -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests"


class SyntheticError(Exception):
    """A repository that could not be generated (a template whose tests do not hold)."""


@dataclass
class SyntheticRepo:
    name: str  # the project (and package) name
    root: Path
    package_dir: Path
    source_files: list[str]  # repository-relative, "/"-separated
    test_files: list[str]
    test_command: str = TEST_COMMAND
    tests: int = 0  # test functions written
    seed: int = 0


@dataclass(frozen=True)
class _Fn:
    """One function (or class) template: code with ${key} placeholders for the names
    of itself, its dependencies and its parameters; tests are groups of checks."""

    key: str
    module: str  # the module kind: numbers, sequences, text, parsing, or a domain
    names: tuple[str, ...]
    code: str
    tests: tuple[tuple[str, ...], ...]  # per test function: "expr", "> stmt", "raises Exc: expr"
    deps: tuple[str, ...] = ()
    params: dict[str, tuple] = field(default_factory=dict)


_LAYERS = {
    "numbers": 0,
    "sequences": 1,
    "text": 1,
    "parsing": 2,
    "inventory": 3,
    "bank": 3,
    "buffer": 3,
}
_MODULE_NAMES = {
    "numbers": ("numbers", "arith", "numeric", "mathutil"),
    "sequences": ("sequences", "listops", "seqtools", "collections_util"),
    "text": ("text", "strings", "textutil", "wording"),
    "parsing": ("parsing", "parse", "readers", "formats"),
    "inventory": ("inventory", "stock", "warehouse"),
    "bank": ("account", "ledger", "banking"),
    "buffer": ("buffer", "ring", "history"),
}
_PREFIXES = (
    "tidy",
    "quick",
    "little",
    "plain",
    "neat",
    "brisk",
    "handy",
    "sturdy",
    "clear",
    "simple",
)
_SUFFIXES = ("kit", "tools", "lib", "box", "utils", "works", "craft", "core")

_BANK: list[_Fn] = [
    # --- numbers ------------------------------------------------------------------
    _Fn(
        "is_prime",
        "numbers",
        ("is_prime", "check_prime", "prime_p"),
        '''
        def ${is_prime}(n: int) -> bool:
            """True when n is a prime number (0, 1 and negatives are not)."""
            if n < 2:
                return False
            divisor = 2
            while divisor * divisor <= n:
                if n % divisor == 0:
                    return False
                divisor += 1
            return True
        ''',
        (
            (
                "${is_prime}(2)",
                "${is_prime}(3)",
                "${is_prime}(4)",
                "${is_prime}(1)",
                "${is_prime}(0)",
            ),
            (
                "${is_prime}(25)",
                "${is_prime}(29)",
                "${is_prime}(49)",
                "${is_prime}(97)",
                "${is_prime}(-7)",
            ),
        ),
    ),
    _Fn(
        "gcd",
        "numbers",
        ("gcd", "greatest_common_divisor", "common_divisor"),
        '''
        def ${gcd}(a: int, b: int) -> int:
            """The greatest common divisor of a and b (Euclid), never negative."""
            a, b = abs(a), abs(b)
            while b:
                a, b = b, a % b
            return a
        ''',
        (
            (
                "${gcd}(12, 18)",
                "${gcd}(18, 12)",
                "${gcd}(7, 5)",
                "${gcd}(0, 9)",
                "${gcd}(-8, 12)",
                "${gcd}(21, 14)",
            ),
        ),
    ),
    _Fn(
        "lcm",
        "numbers",
        ("lcm", "least_common_multiple"),
        '''
        def ${lcm}(a: int, b: int) -> int:
            """The least common multiple of a and b; 0 when either is 0."""
            if a == 0 or b == 0:
                return 0
            return abs(a * b) // ${gcd}(a, b)
        ''',
        (
            (
                "${lcm}(4, 6)",
                "${lcm}(3, 5)",
                "${lcm}(0, 5)",
                "${lcm}(7, 0)",
                "${lcm}(12, 18)",
                "${lcm}(-4, 6)",
                "${lcm}(0, 0)",
            ),
        ),
        deps=("gcd",),
    ),
    _Fn(
        "digit_sum",
        "numbers",
        ("digit_sum", "sum_of_digits"),
        '''
        def ${digit_sum}(n: int, base: int = ${base}) -> int:
            """The sum of the digits of |n| written in the given base."""
            if base < 2:
                raise ValueError("base must be at least 2")
            n = abs(n)
            total = 0
            while n > 0:
                total += n % base
                n //= base
            return total
        ''',
        (
            (
                "${digit_sum}(0)",
                "${digit_sum}(7)",
                "${digit_sum}(1234)",
                "${digit_sum}(-909)",
                "${digit_sum}(10)",
            ),
            (
                "${digit_sum}(255, 16)",
                "${digit_sum}(5, 2)",
                "${digit_sum}(8, 2)",
                "raises ValueError: ${digit_sum}(5, 1)",
            ),
        ),
        params={"base": (10,)},
    ),
    _Fn(
        "clamp",
        "numbers",
        ("clamp", "bound", "limit_to"),
        '''
        def ${clamp}(value: int, low: int, high: int) -> int:
            """value limited to [low, high]; ValueError when the range is empty."""
            if low > high:
                raise ValueError(f"empty range: {low} > {high}")
            if value < low:
                return low
            if value > high:
                return high
            return value
        ''',
        (
            (
                "${clamp}(5, 0, 10)",
                "${clamp}(-3, 0, 10)",
                "${clamp}(12, 0, 10)",
                "${clamp}(0, 0, 10)",
                "${clamp}(10, 0, 10)",
                "${clamp}(4, 4, 4)",
                "raises ValueError: ${clamp}(1, 5, 2)",
            ),
        ),
    ),
    _Fn(
        "fibonacci",
        "numbers",
        ("fibonacci", "fib", "nth_fibonacci"),
        '''
        def ${fibonacci}(n: int) -> int:
            """The n-th Fibonacci number, counting fib(0) = 0 and fib(1) = 1."""
            if n < 0:
                raise ValueError("n must not be negative")
            previous, current = 0, 1
            for _ in range(n):
                previous, current = current, previous + current
            return previous
        ''',
        (
            (
                "${fibonacci}(0)",
                "${fibonacci}(1)",
                "${fibonacci}(2)",
                "${fibonacci}(5)",
                "${fibonacci}(10)",
                "raises ValueError: ${fibonacci}(-1)",
            ),
        ),
    ),
    _Fn(
        "divisors",
        "numbers",
        ("divisors", "factors_of", "all_divisors"),
        '''
        def ${divisors}(n: int) -> list[int]:
            """The positive divisors of n (n >= 1) in increasing order."""
            if n < 1:
                raise ValueError("n must be positive")
            small, large = [], []
            i = 1
            while i * i <= n:
                if n % i == 0:
                    small.append(i)
                    if i != n // i:
                        large.append(n // i)
                i += 1
            return small + large[::-1]
        ''',
        (
            (
                "${divisors}(1)",
                "${divisors}(12)",
                "${divisors}(16)",
                "${divisors}(13)",
                "${divisors}(36)",
                "raises ValueError: ${divisors}(0)",
            ),
        ),
    ),
    _Fn(
        "mean",
        "numbers",
        ("mean", "average", "arithmetic_mean"),
        '''
        def ${mean}(values: list[float]) -> float:
            """The arithmetic mean, rounded to ${digits} places; ValueError when empty."""
            if not values:
                raise ValueError("mean of no values")
            return round(sum(values) / len(values), ndigits=${digits})
        ''',
        (
            (
                "${mean}([1, 2, 3, 4])",
                "${mean}([5])",
                "${mean}([2, 3])",
                "${mean}([1, 1, 4])",
                "raises ValueError: ${mean}([])",
            ),
        ),
        params={"digits": (2, 3)},
    ),
    _Fn(
        "median",
        "numbers",
        ("median", "middle_value"),
        '''
        def ${median}(values: list[float]) -> float:
            """The median: the middle value, or the mean of the two middle ones."""
            if not values:
                raise ValueError("median of no values")
            ordered = sorted(values)
            middle = len(ordered) // 2
            if len(ordered) % 2 == 1:
                return ordered[middle]
            return ${mean}([ordered[middle - 1], ordered[middle]])
        ''',
        (
            (
                "${median}([3, 1, 2])",
                "${median}([4, 1, 3, 2])",
                "${median}([7])",
                "${median}([5, 9])",
                "${median}([9, 1, 8, 2, 7])",
                "raises ValueError: ${median}([])",
            ),
        ),
        deps=("mean",),
    ),
    # --- sequences ----------------------------------------------------------------
    _Fn(
        "chunked",
        "sequences",
        ("chunked", "batches", "split_into_chunks"),
        '''
        def ${chunked}(items: list, size: int) -> list[list]:
            """items split into lists of `size` (the last one may be shorter)."""
            if size < 1:
                raise ValueError("size must be at least 1")
            chunks = []
            for start in range(0, len(items), size):
                chunks.append(items[start : start + size])
            return chunks
        ''',
        (
            (
                "${chunked}([1, 2, 3, 4, 5], 2)",
                "${chunked}([1, 2, 3, 4], 2)",
                "${chunked}([], 3)",
                "${chunked}([1, 2], 5)",
                "${chunked}([1, 2, 3], 1)",
                "raises ValueError: ${chunked}([1], 0)",
            ),
        ),
    ),
    _Fn(
        "running_total",
        "sequences",
        ("running_total", "cumulative_sum", "prefix_sums"),
        '''
        def ${running_total}(values: list[int]) -> list[int]:
            """The running sums of values: [a, a + b, a + b + c, ...]."""
            totals = []
            total = 0
            for value in values:
                total += value
                totals.append(total)
            return totals
        ''',
        (
            (
                "${running_total}([1, 2, 3])",
                "${running_total}([])",
                "${running_total}([5])",
                "${running_total}([3, -1, 4, -2])",
            ),
        ),
    ),
    _Fn(
        "dedupe",
        "sequences",
        ("dedupe", "unique_in_order", "remove_duplicates"),
        '''
        def ${dedupe}(items: list) -> list:
            """items without repeats, keeping the first occurrence of each."""
            seen = []
            result = []
            for item in items:
                if item in seen:
                    continue
                seen.append(item)
                result.append(item)
            return result
        ''',
        (
            (
                "${dedupe}([1, 2, 1, 3, 2])",
                "${dedupe}([])",
                "${dedupe}(['a', 'a', 'a'])",
                "${dedupe}([3, 2, 1])",
            ),
        ),
    ),
    _Fn(
        "rotate",
        "sequences",
        ("rotate", "rotate_left", "shift_items"),
        '''
        def ${rotate}(items: list, steps: int) -> list:
            """items rotated left by `steps` (negative: right); empty stays empty."""
            if not items:
                return []
            steps = steps % len(items)
            return items[steps:] + items[:steps]
        ''',
        (
            (
                "${rotate}([1, 2, 3, 4], 1)",
                "${rotate}([1, 2, 3, 4], 0)",
                "${rotate}([1, 2, 3, 4], 5)",
                "${rotate}([1, 2, 3, 4], -1)",
                "${rotate}([], 3)",
                "${rotate}([1, 2, 3], 2)",
            ),
        ),
    ),
    _Fn(
        "pairwise_differences",
        "sequences",
        ("pairwise_differences", "deltas", "step_changes"),
        '''
        def ${pairwise_differences}(values: list[int]) -> list[int]:
            """The difference between each value and the one before it."""
            return [values[i] - values[i - 1] for i in range(1, len(values))]
        ''',
        (
            (
                "${pairwise_differences}([1, 4, 9, 16])",
                "${pairwise_differences}([5])",
                "${pairwise_differences}([])",
                "${pairwise_differences}([10, 7, 7, 12])",
            ),
        ),
    ),
    _Fn(
        "moving_average",
        "sequences",
        ("moving_average", "rolling_mean", "window_averages"),
        '''
        def ${moving_average}(values: list[float], window: int) -> list[float]:
            """The mean of every run of `window` consecutive values."""
            if window < 1 or window > len(values):
                return []
            return [${mean}(values[i : i + window]) for i in range(len(values) - window + 1)]
        ''',
        (
            (
                "${moving_average}([1, 2, 3, 4, 5], 2)",
                "${moving_average}([1, 2, 3], 3)",
                "${moving_average}([1, 2, 3], 4)",
                "${moving_average}([2, 4, 6, 8], 1)",
                "${moving_average}([1, 2], 0)",
            ),
        ),
        deps=("mean",),
    ),
    _Fn(
        "binary_search",
        "sequences",
        ("binary_search", "find_sorted", "bisect_index"),
        '''
        def ${binary_search}(items: list[int], target: int) -> int:
            """The index of target in the sorted list items, or -1 when it is absent."""
            low, high = 0, len(items) - 1
            while low <= high:
                middle = (low + high) // 2
                if items[middle] == target:
                    return middle
                if items[middle] < target:
                    low = middle + 1
                else:
                    high = middle - 1
            return -1
        ''',
        (
            (
                "${binary_search}([1, 3, 5, 7, 9], 7)",
                "${binary_search}([1, 3, 5, 7, 9], 1)",
                "${binary_search}([1, 3, 5, 7, 9], 9)",
                "${binary_search}([1, 3, 5, 7, 9], 4)",
                "${binary_search}([], 1)",
                "${binary_search}([2], 2)",
                "${binary_search}([1, 3, 5, 7, 9], 10)",
                "${binary_search}([1, 3, 5, 7, 9], 0)",
            ),
        ),
    ),
    _Fn(
        "largest_gap",
        "sequences",
        ("largest_gap", "widest_gap", "max_gap"),
        '''
        def ${largest_gap}(values: list[int]) -> int:
            """The largest difference between neighbours once values are sorted (0 for < 2 values)."""
            ordered = sorted(values)
            gaps = ${pairwise_differences}(ordered)
            best = 0
            for gap in gaps:
                if gap > best:
                    best = gap
            return best
        ''',
        (
            (
                "${largest_gap}([1, 10, 4])",
                "${largest_gap}([5])",
                "${largest_gap}([])",
                "${largest_gap}([3, 3, 3])",
                "${largest_gap}([1, 2, 8, 9])",
            ),
        ),
        deps=("pairwise_differences",),
    ),
    # --- text ---------------------------------------------------------------------
    _Fn(
        "normalize_whitespace",
        "text",
        ("normalize_whitespace", "squash_spaces", "collapse_whitespace"),
        '''
        def ${normalize_whitespace}(text: str) -> str:
            """text with runs of whitespace turned into one space and the ends trimmed."""
            return " ".join(text.split())
        ''',
        (
            (
                "${normalize_whitespace}('  a   b  ')",
                "${normalize_whitespace}('')",
                "${normalize_whitespace}('one\\ttwo\\nthree')",
            ),
        ),
    ),
    _Fn(
        "slugify",
        "text",
        ("slugify", "make_slug", "to_slug"),
        '''
        def ${slugify}(title: str) -> str:
            """A URL slug: lowercase words of letters and digits joined by '${sep}'."""
            words = []
            for word in ${normalize_whitespace}(title).lower().split(" "):
                cleaned = "".join(ch for ch in word if ch.isalnum())
                if cleaned:
                    words.append(cleaned)
            return "${sep}".join(words)
        ''',
        (
            (
                "${slugify}('Hello World')",
                "${slugify}('  Many   spaces here ')",
                "${slugify}('Already-slugged!')",
                "${slugify}('')",
                "${slugify}('C3PO & R2D2')",
            ),
        ),
        deps=("normalize_whitespace",),
        params={"sep": ("-", "_")},
    ),
    _Fn(
        "truncate",
        "text",
        ("truncate", "shorten", "clip_text"),
        '''
        def ${truncate}(text: str, width: int, marker: str = "...") -> str:
            """text cut to at most `width` characters, ending in marker when cut."""
            if width < len(marker):
                raise ValueError("width is smaller than the marker")
            if len(text) <= width:
                return text
            return text[: width - len(marker)] + marker
        ''',
        (
            (
                "${truncate}('hello world', 8)",
                "${truncate}('hello', 5)",
                "${truncate}('hello', 10)",
                "${truncate}('hello world', 6, '~')",
                "${truncate}('abcdef', 3)",
                "raises ValueError: ${truncate}('abc', 2)",
            ),
        ),
    ),
    _Fn(
        "word_frequencies",
        "text",
        ("word_frequencies", "count_words", "word_counts"),
        '''
        def ${word_frequencies}(text: str, min_length: int = ${min_length}) -> dict[str, int]:
            """How often each lowercase word of at least min_length letters occurs."""
            counts: dict[str, int] = {}
            for raw in text.lower().split():
                word = raw.strip(".,;:!?")
                if len(word) < min_length:
                    continue
                counts[word] = counts.get(word, 0) + 1
            return counts
        ''',
        (
            (
                "${word_frequencies}('the cat and the hat')",
                "${word_frequencies}('')",
                "${word_frequencies}('Go go GO!')",
                "${word_frequencies}('a bb ccc dddd', 3)",
            ),
        ),
        params={"min_length": (1, 2)},
    ),
    _Fn(
        "is_palindrome",
        "text",
        ("is_palindrome", "reads_same_backwards"),
        '''
        def ${is_palindrome}(text: str) -> bool:
            """True when text reads the same backwards, ignoring case and non-letters."""
            letters = [ch.lower() for ch in text if ch.isalnum()]
            left, right = 0, len(letters) - 1
            while left < right:
                if letters[left] != letters[right]:
                    return False
                left += 1
                right -= 1
            return True
        ''',
        (
            (
                "${is_palindrome}('A man, a plan, a canal: Panama')",
                "${is_palindrome}('abca')",
                "${is_palindrome}('')",
                "${is_palindrome}('ab')",
                "${is_palindrome}('aba')",
                "${is_palindrome}('abcd')",
            ),
        ),
    ),
    _Fn(
        "caesar_shift",
        "text",
        ("caesar_shift", "rotate_letters", "shift_cipher"),
        '''
        def ${caesar_shift}(text: str, shift: int) -> str:
            """Letters moved `shift` places along the alphabet (case kept, others unchanged)."""
            out = []
            for ch in text:
                if "a" <= ch <= "z":
                    out.append(chr((ord(ch) - ord("a") + shift) % 26 + ord("a")))
                elif "A" <= ch <= "Z":
                    out.append(chr((ord(ch) - ord("A") + shift) % 26 + ord("A")))
                else:
                    out.append(ch)
            return "".join(out)
        ''',
        (
            (
                "${caesar_shift}('abc', 1)",
                "${caesar_shift}('xyz', 3)",
                "${caesar_shift}('Hello, World!', 13)",
                "${caesar_shift}('abc', -1)",
                "${caesar_shift}('Zz', 1)",
                "${caesar_shift}('', 5)",
            ),
        ),
    ),
    _Fn(
        "run_length_encode",
        "text",
        ("run_length_encode", "rle_encode", "compress_runs"),
        '''
        def ${run_length_encode}(text: str) -> list[tuple[str, int]]:
            """text as (character, run length) pairs: 'aab' -> [('a', 2), ('b', 1)]."""
            runs: list[tuple[str, int]] = []
            for ch in text:
                if runs and runs[-1][0] == ch:
                    runs[-1] = (ch, runs[-1][1] + 1)
                else:
                    runs.append((ch, 1))
            return runs
        ''',
        (
            (
                "${run_length_encode}('aaabcc')",
                "${run_length_encode}('')",
                "${run_length_encode}('x')",
                "${run_length_encode}('abab')",
            ),
        ),
    ),
    _Fn(
        "initials",
        "text",
        ("initials", "acronym", "abbreviate"),
        '''
        def ${initials}(name: str, limit: int = ${limit}) -> str:
            """The uppercase first letters of at most `limit` words of name."""
            words = ${normalize_whitespace}(name).split(" ")
            letters = [word[0].upper() for word in words if word]
            return "".join(letters[:limit])
        ''',
        (
            (
                "${initials}('ada lovelace')",
                "${initials}('  grace   brewster murray hopper ')",
                "${initials}('')",
                "${initials}('a b c d e f', 2)",
                "${initials}('x', 1)",
            ),
        ),
        deps=("normalize_whitespace",),
        params={"limit": (3, 4)},
    ),
    # --- parsing ------------------------------------------------------------------
    _Fn(
        "parse_ranges",
        "parsing",
        ("parse_ranges", "expand_ranges", "read_page_ranges"),
        '''
        def ${parse_ranges}(spec: str) -> list[int]:
            """Numbers of a spec like '1-3,5' (inclusive ranges), sorted, without repeats."""
            numbers: list[int] = []
            for part in spec.split(","):
                part = part.strip()
                if not part:
                    continue
                if "-" in part:
                    first, last = part.split("-", maxsplit=1)
                    start, stop = int(first), int(last)
                    if start > stop:
                        raise ValueError(f"backwards range: {part}")
                    numbers.extend(range(start, stop + 1))
                else:
                    numbers.append(int(part))
            return ${dedupe}(sorted(numbers))
        ''',
        (
            (
                "${parse_ranges}('1-3,5')",
                "${parse_ranges}('')",
                "${parse_ranges}('7')",
                "${parse_ranges}('4-4, 2-3, 3')",
                "${parse_ranges}('1-2,,9')",
                "raises ValueError: ${parse_ranges}('5-1')",
            ),
        ),
        deps=("dedupe",),
    ),
    _Fn(
        "parse_key_values",
        "parsing",
        ("parse_key_values", "read_settings", "parse_config"),
        '''
        def ${parse_key_values}(text: str) -> dict[str, str]:
            """'key = value' lines as a dict; blank lines and '#' comments are skipped."""
            settings: dict[str, str] = {}
            for number, line in enumerate(text.splitlines(), start=1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if "=" not in line:
                    raise ValueError(f"line {number}: expected key = value")
                key, value = line.split("=", maxsplit=1)
                settings[key.strip()] = value.strip()
            return settings
        ''',
        (
            (
                "${parse_key_values}('a = 1\\nb=two')",
                "${parse_key_values}('')",
                "${parse_key_values}('# note\\n\\nname = x = y')",
                "${parse_key_values}('k=1\\nk=2')",
                "raises ValueError: ${parse_key_values}('a = 1\\noops')",
            ),
        ),
    ),
    _Fn(
        "parse_duration",
        "parsing",
        ("parse_duration", "duration_seconds", "read_duration"),
        '''
        def ${parse_duration}(text: str) -> int:
            """Seconds in a duration like '1h30m', '45s' or '2h5s' (units h, m, s)."""
            units = {"h": 3600, "m": 60, "s": 1}
            total = 0
            digits = ""
            for ch in text.strip():
                if ch.isdigit():
                    digits += ch
                elif ch in units and digits:
                    total += int(digits) * units[ch]
                    digits = ""
                else:
                    raise ValueError(f"bad duration: {text!r}")
            if digits:
                raise ValueError(f"missing unit in {text!r}")
            return total
        ''',
        (
            (
                "${parse_duration}('1h30m')",
                "${parse_duration}('45s')",
                "${parse_duration}('2h5s')",
                "${parse_duration}('10m')",
                "${parse_duration}('')",
                "raises ValueError: ${parse_duration}('12')",
                "raises ValueError: ${parse_duration}('h')",
                "raises ValueError: ${parse_duration}('1x')",
            ),
        ),
    ),
    _Fn(
        "parse_version",
        "parsing",
        ("parse_version", "version_tuple", "read_version"),
        '''
        def ${parse_version}(text: str) -> tuple[int, int, int]:
            """'1.2.3' as (1, 2, 3); missing parts count as 0, at most three parts."""
            parts = text.strip().split(".")
            if len(parts) > 3 or not all(part.isdigit() for part in parts):
                raise ValueError(f"not a version: {text!r}")
            numbers = [int(part) for part in parts]
            while len(numbers) < 3:
                numbers.append(0)
            return (numbers[0], numbers[1], numbers[2])
        ''',
        (
            (
                "${parse_version}('1.2.3')",
                "${parse_version}('2')",
                "${parse_version}(' 0.10 ')",
                "raises ValueError: ${parse_version}('1.2.3.4')",
                "raises ValueError: ${parse_version}('1.x')",
            ),
        ),
    ),
    _Fn(
        "is_newer",
        "parsing",
        ("is_newer", "version_greater", "newer_than"),
        '''
        def ${is_newer}(candidate: str, current: str) -> bool:
            """True when version candidate is strictly newer than current."""
            return ${parse_version}(candidate) > ${parse_version}(current)
        ''',
        (
            (
                "${is_newer}('1.2.4', '1.2.3')",
                "${is_newer}('1.2', '1.2.0')",
                "${is_newer}('0.9', '1.0')",
                "${is_newer}('2', '1.9.9')",
            ),
        ),
        deps=("parse_version",),
    ),
    # --- stateful classes ------------------------------------------------------------
    _Fn(
        "Inventory",
        "inventory",
        ("Inventory", "Stockroom", "StockLedger"),
        '''
        class ${Inventory}:
            """Item counts and unit prices, with a low-stock report."""

            def __init__(self, low_stock: int = ${low}) -> None:
                self.low_stock = low_stock
                self.counts: dict[str, int] = {}
                self.prices: dict[str, int] = {}

            def add(self, name: str, quantity: int, price: int | None = None) -> int:
                """Add quantity of an item (and set its price); the new count."""
                if quantity <= 0:
                    raise ValueError("quantity must be positive")
                self.counts[name] = self.counts.get(name, 0) + quantity
                if price is not None:
                    self.prices[name] = price
                return self.counts[name]

            def remove(self, name: str, quantity: int) -> int:
                """Take quantity of an item out; KeyError if unknown, ValueError if short."""
                if name not in self.counts:
                    raise KeyError(name)
                if quantity > self.counts[name]:
                    raise ValueError(f"only {self.counts[name]} {name} left")
                self.counts[name] -= quantity
                return self.counts[name]

            def total_value(self) -> int:
                """The value of everything in stock (items without a price count 0)."""
                total = 0
                for name, count in self.counts.items():
                    total += count * self.prices.get(name, 0)
                return total

            def low_items(self) -> list[str]:
                """Names whose count is at or below the low-stock level, sorted."""
                return sorted(name for name, count in self.counts.items() if count <= self.low_stock)

            def label(self, name: str) -> str:
                """A shelf label: the item's slug and its count."""
                return f"{${slugify}(name)}:{self.counts.get(name, 0)}"
        ''',
        (
            (
                "> inv = ${Inventory}()",
                "inv.add('apple', 5, 3)",
                "inv.add('apple', 2)",
                "inv.add('pear', 1, 10)",
                "inv.counts",
                "inv.total_value()",
            ),
            (
                "> inv = ${Inventory}()",
                "> inv.add('nut', 4, 2)",
                "inv.remove('nut', 1)",
                "inv.remove('nut', 3)",
                "inv.counts['nut']",
                "raises ValueError: inv.remove('nut', 1)",
                "raises KeyError: inv.remove('bolt', 1)",
                "raises ValueError: inv.add('nut', 0)",
            ),
            (
                "> inv = ${Inventory}(low_stock=2)",
                "> inv.add('b', 2)",
                "> inv.add('a', 1)",
                "> inv.add('c', 3)",
                "inv.low_items()",
                "inv.total_value()",
                "${Inventory}().low_stock",
            ),
            (
                "> inv = ${Inventory}()",
                "> inv.add('Green Tea', 3)",
                "inv.label('Green Tea')",
                "inv.label('Black Coffee')",
            ),
        ),
        deps=("slugify",),
        params={"low": (2, 3)},
    ),
    _Fn(
        "Account",
        "bank",
        ("Account", "BankAccount", "Wallet"),
        '''
        class ${Account}:
            """A balance in cents with a history of (kind, amount) entries."""

            def __init__(self, owner: str, balance: int = 0) -> None:
                if balance < 0:
                    raise ValueError("opening balance cannot be negative")
                self.owner = owner
                self.balance = balance
                self.history: list[tuple[str, int]] = []

            def deposit(self, amount: int) -> int:
                """Add amount (positive); the new balance."""
                if amount <= 0:
                    raise ValueError("deposit must be positive")
                self.balance += amount
                self.history.append(("deposit", amount))
                return self.balance

            def withdraw(self, amount: int) -> int:
                """Take amount out; ValueError when the balance would go below zero."""
                if amount <= 0:
                    raise ValueError("withdrawal must be positive")
                if amount > self.balance:
                    raise ValueError("insufficient funds")
                self.balance -= amount
                self.history.append(("withdraw", amount))
                return self.balance

            def apply_interest(self, percent: int) -> int:
                """Add whole-cent interest at `percent` per cent (rounded down); the interest."""
                interest = self.balance * percent // 100
                if interest > 0:
                    self.deposit(interest)
                return interest

            def statement(self, limit: int = ${limit}) -> list[str]:
                """The last `limit` history entries as 'kind amount' lines, newest first."""
                lines = []
                for kind, amount in reversed(self.history[-limit:]):
                    lines.append(f"{kind} {amount}")
                return lines

            def average_deposit(self) -> float:
                """The mean of the deposits (0.0 when there are none)."""
                amounts = [amount for kind, amount in self.history if kind == "deposit"]
                if not amounts:
                    return 0.0
                return ${mean}(amounts)
        ''',
        (
            (
                "> acct = ${Account}('ann', 100)",
                "acct.deposit(50)",
                "acct.withdraw(30)",
                "acct.balance",
                "acct.history",
                "raises ValueError: acct.withdraw(121)",
                "acct.withdraw(120)",
            ),
            (
                "> acct = ${Account}('bo')",
                "raises ValueError: acct.deposit(0)",
                "raises ValueError: acct.withdraw(0)",
                "raises ValueError: ${Account}('x', -1)",
                "acct.balance",
                "acct.average_deposit()",
            ),
            (
                "> acct = ${Account}('cy', 1000)",
                "acct.apply_interest(5)",
                "acct.balance",
                "acct.apply_interest(0)",
                "${Account}('dee', 99).apply_interest(1)",
            ),
            (
                "> acct = ${Account}('di')",
                "> acct.deposit(10)",
                "> acct.deposit(20)",
                "> acct.withdraw(5)",
                "> acct.deposit(40)",
                "acct.statement(2)",
                "acct.statement()",
                "acct.average_deposit()",
            ),
        ),
        deps=("mean",),
        params={"limit": (3,)},
    ),
    _Fn(
        "RingBuffer",
        "buffer",
        ("RingBuffer", "RecentItems", "BoundedHistory"),
        '''
        class ${RingBuffer}:
            """The last `capacity` items pushed, oldest first."""

            def __init__(self, capacity: int = ${capacity}) -> None:
                if capacity < 1:
                    raise ValueError("capacity must be at least 1")
                self.capacity = capacity
                self.items: list = []
                self.dropped = 0

            def push(self, item) -> None:
                """Add item, dropping the oldest when full."""
                self.items.append(item)
                if len(self.items) > self.capacity:
                    self.items.pop(0)
                    self.dropped += 1

            def is_full(self) -> bool:
                return len(self.items) == self.capacity

            def latest(self, count: int = 1) -> list:
                """The `count` newest items, newest last."""
                if count <= 0:
                    return []
                return self.items[-count:]

            def totals(self) -> list[int]:
                """Running totals of the (numeric) items held."""
                return ${running_total}(self.items)
        ''',
        (
            (
                "> buf = ${RingBuffer}(3)",
                "> buf.push(1)",
                "> buf.push(2)",
                "buf.is_full()",
                "> buf.push(3)",
                "buf.is_full()",
                "> buf.push(4)",
                "buf.items",
                "buf.dropped",
                "buf.is_full()",
            ),
            (
                "> buf = ${RingBuffer}(4)",
                "> buf.push(5)",
                "> buf.push(6)",
                "> buf.push(7)",
                "buf.latest()",
                "buf.latest(2)",
                "buf.latest(0)",
                "buf.totals()",
                "raises ValueError: ${RingBuffer}(0)",
                "${RingBuffer}().capacity",
                "${RingBuffer}(1).capacity",
            ),
        ),
        deps=("running_total",),
        params={"capacity": (5, 8)},
    ),
]
_BY_KEY = {fn.key: fn for fn in _BANK}
_DOMAINS = ("inventory", "bank", "buffer")
_BASES = ("numbers", "sequences", "text", "parsing")

# The bank split in two, each part closed under its templates' dependencies, so that a
# held-out task set shares no code with a training one: repositories of one part are
# written from templates the other part never uses (`tachy tasks build --templates`).
_HELDOUT_KEYS = frozenset({
    "digit_sum", "fibonacci", "divisors",                              # numbers
    "rotate", "binary_search", "chunked", "running_total",             # sequences
    "caesar_shift", "run_length_encode", "is_palindrome",              # text
    "parse_duration", "parse_key_values",                              # parsing
    "RingBuffer",                                                      # a domain class
})  # fmt: skip
TEMPLATE_BANKS = {
    "all": frozenset(_BY_KEY),
    "train": frozenset(_BY_KEY) - _HELDOUT_KEYS,
    "heldout": _HELDOUT_KEYS,
}


def _choose(rng: random.Random, bank: frozenset[str] = TEMPLATE_BANKS["all"]) -> list[_Fn]:
    """The templates of one repository, all from `bank`: a domain class, base modules,
    dependencies."""
    pool_of = [fn for fn in _BANK if fn.key in bank]
    wanted: list[str] = []
    domains = [d for d in _DOMAINS if any(fn.module == d for fn in pool_of)]
    domain = rng.choice(domains) if domains and rng.random() < 0.8 else None
    if domain:
        wanted += [fn.key for fn in pool_of if fn.module == domain]
    bases = rng.sample(_BASES, rng.randint(1, 3))
    for base in sorted(bases, key=_BASES.index):
        pool = [fn.key for fn in pool_of if fn.module == base]
        wanted += rng.sample(pool, min(len(pool), rng.randint(3, 5)))
    chosen: list[str] = []

    def add(key: str) -> None:
        if key in chosen:
            return
        for dep in _BY_KEY[key].deps:
            add(dep)
        chosen.append(key)

    for key in wanted:
        add(key)
    if len({_BY_KEY[k].module for k in chosen}) < 2:  # at least two modules
        add(
            rng.choice(
                [fn.key for fn in pool_of if fn.module != _BY_KEY[chosen[0]].module and not fn.deps]
            )
        )
    modules = {_BY_KEY[k].module for k in chosen}
    spare = [fn.key for fn in pool_of if fn.module in modules and fn.key not in chosen]
    while spare and sum(len(_split(_BY_KEY[k].tests)) for k in chosen) < MIN_TESTS:
        add(spare.pop(rng.randrange(len(spare))))
        spare = [k for k in spare if k not in chosen]
    return [_BY_KEY[k] for k in chosen]


def _render(fn: _Fn, names: dict[str, str], params: dict[str, str]) -> str:
    return Template(textwrap.dedent(fn.code).strip("\n")).substitute({**names, **params})


def generate_repo(seed: int, out_dir: Path, templates: str = "all") -> SyntheticRepo:
    """Write a synthetic repository for seed into out_dir (created; must be empty or
    absent) and return what it holds, written from the `templates` part of the bank
    (TEMPLATE_BANKS). Deterministic: same seed and part, same bytes."""
    out_dir = Path(out_dir)
    if templates not in TEMPLATE_BANKS:
        raise SyntheticError(
            f"unknown template part {templates!r}; choose from {list(TEMPLATE_BANKS)}"
        )
    if out_dir.exists() and any(out_dir.iterdir()):
        raise SyntheticError(f"{out_dir} is not empty; generate into a new directory")
    rng = random.Random(seed)
    fns = _choose(rng, TEMPLATE_BANKS[templates])
    project = rng.choice(_PREFIXES) + rng.choice(_SUFFIXES)
    names = {fn.key: rng.choice(fn.names) for fn in fns}
    params = {fn.key: {k: str(rng.choice(v)) for k, v in sorted(fn.params.items())} for fn in fns}
    kinds = sorted({fn.module for fn in fns}, key=lambda k: (_LAYERS[k], k))
    module_of_kind = {kind: rng.choice(_MODULE_NAMES[kind]) for kind in kinds}
    module_of = {fn.key: module_of_kind[fn.module] for fn in fns}

    package = out_dir / project
    package.mkdir(parents=True)
    (out_dir / "tests").mkdir()
    sources, tests = [], []
    files: dict[str, str] = {}
    for kind in kinds:
        module = module_of_kind[kind]
        members = [fn for fn in fns if fn.module == kind]
        imports: dict[str, list[str]] = {}
        for fn in members:
            for dep in fn.deps:
                if module_of[dep] != module:
                    imports.setdefault(module_of[dep], [])
                    if names[dep] not in imports[module_of[dep]]:
                        imports[module_of[dep]].append(names[dep])
        header = [f'"""{_MODULE_DOCS[kind]}"""', "", "from __future__ import annotations", ""]
        for other in sorted(imports):
            header.append(f"from .{other} import {', '.join(sorted(imports[other]))}")
        if imports:
            header.append("")
        body = "\n\n\n".join(_render(fn, names, params[fn.key]) for fn in members)
        files[f"{project}/{module}.py"] = "\n".join(header) + "\n\n" + body + "\n"
    files[f"{project}/__init__.py"] = f'"""{project}: small utilities (a synthetic project)."""\n'
    for rel, text in files.items():
        (out_dir / rel).write_text(text, encoding="utf-8")
        sources.append(rel)

    count = 0
    namespace = _load(package, project, seed, sorted(set(module_of_kind.values())))
    try:
        for kind in kinds:
            module = module_of_kind[kind]
            members = [fn for fn in fns if fn.module == kind]
            text, n = _test_file(project, module, members, names, params, namespace[module])
            rel = f"tests/test_{module}.py"
            (out_dir / rel).write_text(text, encoding="utf-8")
            tests.append(rel)
            count += n
    finally:
        _unload(project, seed)
    (out_dir / "tests" / "conftest.py").write_text(_CONFTEST, encoding="utf-8")
    tests.append("tests/conftest.py")
    (out_dir / "pyproject.toml").write_text(_PYPROJECT.format(name=project), encoding="utf-8")
    listing = "\n".join(f"- `{project}/{module_of_kind[k]}.py`: {_MODULE_DOCS[k]}" for k in kinds)
    (out_dir / "README.md").write_text(
        _README.format(name=project, modules=listing), encoding="utf-8"
    )
    return SyntheticRepo(
        name=project,
        root=out_dir,
        package_dir=package,
        source_files=sources,
        test_files=tests,
        tests=count,
        seed=seed,
    )


_MODULE_DOCS = {
    "numbers": "Number theory and small statistics on integers.",
    "sequences": "Helpers for lists: chunks, running sums, rotation, search.",
    "text": "Text helpers: whitespace, slugs, truncation, word counts, ciphers.",
    "parsing": "Parsers for small human-written formats: ranges, settings, durations, versions.",
    "inventory": "A stock inventory with prices and a low-stock report.",
    "bank": "A bank account with deposits, withdrawals, interest and a statement.",
    "buffer": "A bounded buffer that keeps the most recent items.",
}
# A mutant that loops forever (a dropped `i += 1`) fails its test in seconds instead
# of holding the whole suite until the builder's timeout.
_CONFTEST = '''"""Shared test setup: a time limit for every test."""

import signal

import pytest

TIME_LIMIT_S = 5


@pytest.fixture(autouse=True)
def time_limit():
    """Fail a test that runs longer than TIME_LIMIT_S seconds (an endless loop)."""

    def expire(signum, frame):
        raise TimeoutError(f"the test ran longer than {TIME_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
'''
_PYPROJECT = """[project]
name = "{name}"
version = "0.1.0"
description = "Small utilities (a synthetic project made for training)"
requires-python = ">=3.10"

[tool.pytest.ini_options]
testpaths = ["tests"]
"""
_README = """# {name}

Small utilities, generated for training coding agents. Run the tests with
`python -m pytest tests`.

{modules}
"""


def _alias(project: str, seed: int) -> str:
    return f"_tachy_synthetic_{project}_{seed}"


def _load(package: Path, project: str, seed: int, modules: list[str]) -> dict[str, dict]:
    """The generated modules imported under a private name (no bytecode written)."""
    alias = _alias(project, seed)
    importlib.invalidate_caches()
    spec = importlib.util.spec_from_file_location(
        alias, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert spec is not None and spec.loader is not None
    root = importlib.util.module_from_spec(spec)
    sys.modules[alias] = root
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        spec.loader.exec_module(root)
        return {m: vars(importlib.import_module(f"{alias}.{m}")) for m in modules}
    except Exception as exc:
        _unload(project, seed)
        raise SyntheticError(f"the generated package does not import: {exc!r}") from exc
    finally:
        sys.dont_write_bytecode = dont_write


def _unload(project: str, seed: int) -> None:
    alias = _alias(project, seed)
    for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
        del sys.modules[name]


def _test_file(
    project: str,
    module: str,
    members: list[_Fn],
    names: dict[str, str],
    params: dict[str, dict[str, str]],
    namespace: dict,
) -> tuple[str, int]:
    """The test module for one source module, expected values computed by running it."""
    exported = sorted(names[fn.key] for fn in members)
    lines = [
        f'"""Tests for {project}.{module}."""',
        "",
        "import pytest",
        "",
        f"from {project}.{module} import {', '.join(exported)}",
    ]
    uses_raises = False
    count = 0
    for fn in members:
        mapping = {**names, **params[fn.key]}
        for index, group in enumerate(_split(fn.tests)):
            suffix = "" if index == 0 else f"_{index + 1}"
            lines += ["", "", f"def test_{names[fn.key].lower()}{suffix}():"]
            scope = dict(namespace)
            for check in group:
                check = Template(check).substitute(mapping)
                lines.append("    " + _check_line(check, scope, fn.key))
                uses_raises |= check.startswith("raises ")
            count += 1
    if not uses_raises:
        lines.remove("import pytest")
        lines.remove("")
    return "\n".join(lines) + "\n", count


def _split(groups: tuple[tuple[str, ...], ...], size: int = 2) -> list[tuple[str, ...]]:
    """Groups of plain checks cut into tests of at most `size` checks (a failing test
    then names the case); scenarios with statements stay whole."""
    out: list[tuple[str, ...]] = []
    for group in groups:
        if any(check.startswith("> ") for check in group):
            out.append(group)
        else:
            out += [group[i : i + size] for i in range(0, len(group), size)]
    return out


def _check_line(check: str, scope: dict, key: str) -> str:
    """One line of a test: a statement run as is, a raises check, or an exact assert."""
    if check.startswith("> "):
        statement = check[2:]
        exec(statement, scope)
        return statement
    if check.startswith("raises "):
        exc_name, expr = check[len("raises ") :].split(": ", 1)
        try:
            eval(expr, scope)
        except Exception as exc:
            if type(exc).__name__ != exc_name:
                raise SyntheticError(f"{key}: {expr} raised {exc!r}, not {exc_name}") from exc
        else:
            raise SyntheticError(f"{key}: {expr} did not raise {exc_name}")
        return f"with pytest.raises({exc_name}):\n        {expr}"
    try:
        value = eval(check, scope)
    except Exception as exc:
        raise SyntheticError(f"{key}: {check} raised {exc!r}") from exc
    literal = repr(value)
    if ast.literal_eval(literal) != value:
        raise SyntheticError(f"{key}: {check} gives {literal}, which is not a literal")
    if isinstance(value, bool) or value is None:
        return f"assert {check} is {literal}"
    return f"assert {check} == {literal}"
