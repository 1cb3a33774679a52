#!/usr/bin/python3
"""Generate examples/pyfuncs/tasks.jsonl: small Python-function tasks.

Each task asks for one function in its own module. The agent gets the
module as a stub (signature, docstring, `raise NotImplementedError`); the
hidden tests are one pytest file, tests/test_<id>.py, with one test per
case so the pass rate grades partial solutions; the reference solution is
the same module with a body.

Run with the system Python (standard library only):

    /usr/bin/python3 examples/pyfuncs/gen.py

The output depends only on this file: tasks come out in the order below
and every value is rendered with repr or json, so running it twice gives
the same bytes. examples/pyfuncs/check.py proves the stubs fail and the
references pass.
"""

import json
import os
import re
import sys
import textwrap

WORKDIR = "/workspace"

# Modules that a task's module must not shadow: the working directory is
# first on sys.path under `python3 -m pytest`, so a module named like one
# of these would break the test run itself.
PYTEST_MODULES = {"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "attr", "tests", "conftest"}


def task(id, module, difficulty, category, signature, doc, body, cases,
         raises=(), extra="", imports="", approx=False):
    """Return one task definition; the arguments are described in TASKS."""
    return {
        "id": id,
        "module": module,
        "difficulty": difficulty,
        "category": category,
        "signature": signature,
        "doc": textwrap.dedent(doc).strip("\n"),
        "body": textwrap.dedent(body).strip("\n"),
        "cases": list(cases),
        "raises": list(raises),
        "extra": textwrap.dedent(extra).strip("\n"),
        "imports": imports,
        "approx": approx,
    }


# TASKS lists the tasks. For each: the function's signature and docstring,
# the reference body, cases as (args tuple, expected result), raises as
# (args tuple, exception name), extra hand-written test functions, imports
# the reference needs, and approx when results are floats compared with
# pytest.approx.
TASKS = [
    task(
        "reverse_words", "wordorder", "easy", "strings",
        "def reverse_words(text):",
        """
        Return the words of text in reverse order, joined by single spaces.

        Words are separated by runs of whitespace (spaces, tabs, newlines).
        Leading and trailing whitespace is ignored, so an empty or blank
        string gives "".
        """,
        """
        return " ".join(reversed(text.split()))
        """,
        [
            (("hello world",), "world hello"),
            (("  the quick   brown fox ",), "fox brown quick the"),
            (("",), ""),
            (("   ",), ""),
            (("single",), "single"),
            (("a\tb\nc",), "c b a"),
        ],
    ),
    task(
        "is_palindrome", "palindromes", "easy", "strings",
        "def is_palindrome(text):",
        """
        Return True if text reads the same forwards and backwards.

        Only letters and digits count, and case is ignored, so
        "A man, a plan, a canal: Panama" is a palindrome. A string with no
        letters or digits is a palindrome.
        """,
        """
        chars = [c.lower() for c in text if c.isalnum()]
        return chars == chars[::-1]
        """,
        [
            (("A man, a plan, a canal: Panama",), True),
            (("race a car",), False),
            (("",), True),
            (("No 'x' in Nixon",), True),
            (("12321",), True),
            (("123",), False),
            (("ab",), False),
        ],
    ),
    task(
        "count_vowels", "vowels", "easy", "strings",
        "def count_vowels(text):",
        """
        Return the number of vowels in text.

        The vowels are a, e, i, o and u, in either case; y is not a vowel.
        """,
        """
        return sum(1 for c in text.lower() if c in "aeiou")
        """,
        [
            (("hello",), 2),
            (("AEIOU aeiou",), 10),
            (("rhythm",), 0),
            (("",), 0),
            (("Yellow Sky",), 2),
        ],
    ),
    task(
        "fizzbuzz", "fizz", "easy", "numbers",
        "def fizzbuzz(n):",
        """
        Return the FizzBuzz strings for the numbers 1 to n.

        Multiples of 15 give "FizzBuzz", other multiples of 3 give "Fizz",
        other multiples of 5 give "Buzz", and every other number gives its
        decimal digits. n <= 0 gives an empty list.
        """,
        """
        out = []
        for i in range(1, n + 1):
            if i % 15 == 0:
                out.append("FizzBuzz")
            elif i % 3 == 0:
                out.append("Fizz")
            elif i % 5 == 0:
                out.append("Buzz")
            else:
                out.append(str(i))
        return out
        """,
        [
            ((0,), []),
            ((1,), ["1"]),
            ((5,), ["1", "2", "Fizz", "4", "Buzz"]),
            ((15,), ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz",
                     "11", "Fizz", "13", "14", "FizzBuzz"]),
            ((-3,), []),
        ],
    ),
    task(
        "clamp", "clamping", "easy", "numbers",
        "def clamp(value, low, high):",
        """
        Return value limited to the closed range [low, high].

        Raise ValueError if low > high.
        """,
        """
        if low > high:
            raise ValueError("low must not exceed high")
        return max(low, min(value, high))
        """,
        [
            ((5, 0, 10), 5),
            ((-1, 0, 10), 0),
            ((11, 0, 10), 10),
            ((2.5, 1.0, 2.0), 2.0),
            ((3, 3, 3), 3),
        ],
        raises=[((1, 5, 0), "ValueError")],
    ),
    task(
        "digit_sum", "digits", "easy", "numbers",
        "def digit_sum(n):",
        """
        Return the sum of the decimal digits of the integer n.

        The sign is ignored: digit_sum(-456) is 15.
        """,
        """
        return sum(int(d) for d in str(abs(n)))
        """,
        [
            ((0,), 0),
            ((123,), 6),
            ((-456,), 15),
            ((9999,), 36),
            ((1000000,), 1),
        ],
    ),
    task(
        "flatten", "flattening", "medium", "lists",
        "def flatten(nested):",
        """
        Return a flat list of the items in a nested structure of lists and tuples.

        Lists and tuples are opened at any depth; everything else (strings
        included) is an item. Items keep their left-to-right order. The
        input is not modified.
        """,
        """
        out = []
        for item in nested:
            if isinstance(item, (list, tuple)):
                out.extend(flatten(item))
            else:
                out.append(item)
        return out
        """,
        [
            (([1, [2, [3, [4]]]],), [1, 2, 3, 4]),
            (([],), []),
            (([(1, 2), [3, (4, [5])]],), [1, 2, 3, 4, 5]),
            ((["ab", ["cd"]],), ["ab", "cd"]),
            (([[], [[]], 0],), [0]),
        ],
        extra="""
        def test_flatten_leaves_input_alone():
            nested = [1, [2, [3]]]
            flatten(nested)
            assert nested == [1, [2, [3]]]
        """,
    ),
    task(
        "chunk", "chunking", "easy", "lists",
        "def chunk(items, size):",
        """
        Split the list items into consecutive lists of length size.

        The last list may be shorter; an empty list gives []. Raise
        ValueError if size < 1.
        """,
        """
        if size < 1:
            raise ValueError("size must be at least 1")
        return [items[i:i + size] for i in range(0, len(items), size)]
        """,
        [
            (([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]),
            (([], 3), []),
            (([1, 2, 3], 3), [[1, 2, 3]]),
            (([1, 2], 5), [[1, 2]]),
        ],
        raises=[(([1], 0), "ValueError"), (([1], -2), "ValueError")],
    ),
    task(
        "dedupe", "uniques", "easy", "lists",
        "def dedupe(items):",
        """
        Return a new list holding the first occurrence of each item, in order.

        The items are hashable. The input is not modified.
        """,
        """
        seen = set()
        out = []
        for item in items:
            if item not in seen:
                seen.add(item)
                out.append(item)
        return out
        """,
        [
            (([3, 1, 3, 2, 1],), [3, 1, 2]),
            (([],), []),
            ((["a", "b", "a", "A"],), ["a", "b", "A"]),
            (([1, 1, 1],), [1]),
        ],
        extra="""
        def test_dedupe_leaves_input_alone():
            items = [2, 2, 1]
            dedupe(items)
            assert items == [2, 2, 1]
        """,
    ),
    task(
        "run_length_encode", "rle", "medium", "strings",
        "def run_length_encode(text):",
        """
        Encode text as runs of equal characters.

        Each maximal run of one character becomes the character followed by
        the run's length in decimal: "aaab" gives "a3b1". An empty string
        gives "".
        """,
        """
        out = []
        i = 0
        while i < len(text):
            j = i
            while j < len(text) and text[j] == text[i]:
                j += 1
            out.append(text[i] + str(j - i))
            i = j
        return "".join(out)
        """,
        [
            (("aaab",), "a3b1"),
            (("",), ""),
            (("abc",), "a1b1c1"),
            (("zzzzzzzzzzzz",), "z12"),
            (("aabbaa",), "a2b2a2"),
            (("  x",), " 2x1"),
        ],
    ),
    task(
        "run_length_decode", "rle", "medium", "parsing",
        "def run_length_decode(text):",
        """
        Decode run-length text: the inverse of "aaab" -> "a3b1".

        text is a sequence of runs, each a character that is not a decimal
        digit followed by one or more decimal digits giving how many times
        it repeats. "x12" gives twelve x's; "" gives "". Raise ValueError if
        text does not follow this format (it starts with a digit, a
        character has no count, ...) or a count is 0.
        """,
        """
        if not re.fullmatch(r"(?:\\D\\d+)*", text):
            raise ValueError("malformed run-length text: %r" % text)
        out = []
        for char, count in re.findall(r"(\\D)(\\d+)", text):
            if int(count) == 0:
                raise ValueError("count of 0 for %r" % char)
            out.append(char * int(count))
        return "".join(out)
        """,
        [
            (("a3b1",), "aaab"),
            (("",), ""),
            (("x12",), "xxxxxxxxxxxx"),
            ((" 2-3",), "  ---"),
            (("a1b1c1",), "abc"),
        ],
        raises=[(("3a",), "ValueError"), (("ab2",), "ValueError"),
                (("a0",), "ValueError"), (("a",), "ValueError")],
        imports="import re",
    ),
    task(
        "caesar_shift", "caesar", "easy", "strings",
        "def caesar_shift(text, shift):",
        """
        Shift each ASCII letter of text by shift places in the alphabet.

        Shifting wraps around ("z" shifted by 1 is "a") and keeps case;
        shift may be negative or larger than 26. Every other character,
        including non-ASCII letters, is unchanged.
        """,
        """
        out = []
        for c in text:
            if "a" <= c <= "z":
                out.append(chr((ord(c) - ord("a") + shift) % 26 + ord("a")))
            elif "A" <= c <= "Z":
                out.append(chr((ord(c) - ord("A") + shift) % 26 + ord("A")))
            else:
                out.append(c)
        return "".join(out)
        """,
        [
            (("abc", 1), "bcd"),
            (("xyz", 3), "abc"),
            (("Hello, World!", 13), "Uryyb, Jbeyq!"),
            (("abc", -1), "zab"),
            (("Zebra", 52), "Zebra"),
            (("\u00fcn\u00ef", 1), "\u00fco\u00ef"),
        ],
    ),
    task(
        "is_anagram", "anagrams", "easy", "strings",
        "def is_anagram(a, b):",
        """
        Return True if a and b use the same letters the same number of times.

        Case is ignored, and so is every character that is not a letter:
        "Dormitory" and "Dirty room!" are anagrams.
        """,
        """
        def letters(s):
            return sorted(c for c in s.lower() if c.isalpha())
        return letters(a) == letters(b)
        """,
        [
            (("listen", "silent"), True),
            (("Dormitory", "Dirty room!"), True),
            (("abc", "abd"), False),
            (("aab", "abb"), False),
            (("", ""), True),
        ],
    ),
    task(
        "slugify", "slugs", "medium", "strings",
        "def slugify(text):",
        """
        Turn text into a URL slug.

        The text is lowercased, every run of characters that are not ASCII
        letters or digits becomes a single hyphen, and leading and trailing
        hyphens are dropped: "Hello, World!" gives "hello-world".
        """,
        """
        return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
        """,
        [
            (("Hello, World!",), "hello-world"),
            (("  Already-slugged  ",), "already-slugged"),
            (("C'est d\u00e9j\u00e0 l'\u00e9t\u00e9",), "c-est-d-j-l-t"),
            (("---",), ""),
            (("Version 2.0 Release",), "version-2-0-release"),
        ],
        imports="import re",
    ),
    task(
        "word_frequencies", "wordcount", "medium", "strings",
        "def word_frequencies(text):",
        """
        Count the words of text, ignoring case.

        A word is a maximal run of ASCII letters (a-z, A-Z); everything else
        separates words. Return a dict from each lowercased word to the
        number of times it occurs.
        """,
        """
        counts = {}
        for word in re.findall(r"[a-z]+", text.lower()):
            counts[word] = counts.get(word, 0) + 1
        return counts
        """,
        [
            (("the cat and the hat",), {"the": 2, "cat": 1, "and": 1, "hat": 1}),
            (("",), {}),
            (("Go, go, GO!",), {"go": 3}),
            (("it's 2 o'clock",), {"it": 1, "s": 1, "o": 1, "clock": 1}),
        ],
        imports="import re",
    ),
    task(
        "roman_to_int", "roman", "medium", "parsing",
        "def roman_to_int(numeral):",
        """
        Return the value of a Roman numeral.

        numeral is a valid uppercase numeral for 1 to 3999 using I, V, X, L,
        C, D, M and the subtractive forms IV, IX, XL, XC, CD and CM.
        """,
        """
        values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
        total = 0
        for i, c in enumerate(numeral):
            v = values[c]
            if i + 1 < len(numeral) and values[numeral[i + 1]] > v:
                total -= v
            else:
                total += v
        return total
        """,
        [
            (("III",), 3),
            (("IV",), 4),
            (("IX",), 9),
            (("LVIII",), 58),
            (("MCMXCIV",), 1994),
            (("MMMCMXCIX",), 3999),
        ],
    ),
    task(
        "int_to_roman", "roman", "medium", "numbers",
        "def int_to_roman(n):",
        """
        Return the Roman numeral for n, from 1 to 3999.

        Use the standard subtractive forms (IV, IX, XL, XC, CD, CM): 1994 is
        "MCMXCIV". Raise ValueError if n is outside 1..3999.
        """,
        """
        if not 1 <= n <= 3999:
            raise ValueError("out of range: %d" % n)
        table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"),
                 (90, "XC"), (50, "L"), (40, "XL"), (10, "X"), (9, "IX"),
                 (5, "V"), (4, "IV"), (1, "I")]
        out = []
        for value, symbol in table:
            count, n = divmod(n, value)
            out.append(symbol * count)
        return "".join(out)
        """,
        [
            ((1,), "I"),
            ((4,), "IV"),
            ((14,), "XIV"),
            ((944,), "CMXLIV"),
            ((2024,), "MMXXIV"),
            ((3999,), "MMMCMXCIX"),
        ],
        raises=[((0,), "ValueError"), ((4000,), "ValueError"), ((-5,), "ValueError")],
    ),
    task(
        "is_prime", "primes", "easy", "numbers",
        "def is_prime(n):",
        """
        Return True if the integer n is prime.

        Numbers below 2, negative numbers included, are not prime. It must
        answer quickly for n up to 10**12.
        """,
        """
        if n < 2:
            return False
        if n % 2 == 0:
            return n == 2
        d = 3
        while d * d <= n:
            if n % d == 0:
                return False
            d += 2
        return True
        """,
        [
            ((0,), False),
            ((1,), False),
            ((2,), True),
            ((17,), True),
            ((21,), False),
            ((25,), False),
            ((-7,), False),
            ((999983,), True),
            ((1000000007,), True),
        ],
    ),
    task(
        "primes_below", "sieve", "medium", "numbers",
        "def primes_below(n):",
        """
        Return the ascending list of primes p with 2 <= p < n.

        n <= 2 gives []. It must be fast for n up to 10**6.
        """,
        """
        if n <= 2:
            return []
        is_p = [True] * n
        is_p[0] = is_p[1] = False
        i = 2
        while i * i < n:
            if is_p[i]:
                for k in range(i * i, n, i):
                    is_p[k] = False
            i += 1
        return [i for i in range(n) if is_p[i]]
        """,
        [
            ((0,), []),
            ((2,), []),
            ((3,), [2]),
            ((10,), [2, 3, 5, 7]),
            ((30,), [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]),
        ],
        extra="""
        def test_primes_below_large():
            primes = primes_below(10000)
            assert len(primes) == 1229
            assert primes[-1] == 9973
        """,
    ),
    task(
        "lcm_list", "multiples", "medium", "numbers",
        "def lcm_list(numbers):",
        """
        Return the least common multiple of a non-empty list of positive ints.

        Raise ValueError if the list is empty or holds a number below 1.
        """,
        """
        if not numbers or any(x < 1 for x in numbers):
            raise ValueError("need a non-empty list of positive integers")
        result = 1
        for x in numbers:
            result = result * x // math.gcd(result, x)
        return result
        """,
        [
            (([4, 6],), 12),
            (([5],), 5),
            (([1, 2, 3, 4, 5, 6, 7, 8, 9, 10],), 2520),
            (([21, 6],), 42),
        ],
        raises=[(([],), "ValueError"), (([3, 0],), "ValueError"), (([2, -4],), "ValueError")],
        imports="import math",
    ),
    task(
        "fibonacci", "fib", "easy", "numbers",
        "def fibonacci(n):",
        """
        Return the n-th Fibonacci number: fibonacci(0) is 0, fibonacci(1) is 1.

        Each later number is the sum of the two before it. It must be fast
        for n up to 10000. Raise ValueError if n is negative.
        """,
        """
        if n < 0:
            raise ValueError("n must not be negative")
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        return a
        """,
        [
            ((0,), 0),
            ((1,), 1),
            ((2,), 1),
            ((10,), 55),
            ((90,), 2880067194370816120),
        ],
        raises=[((-1,), "ValueError")],
        extra="""
        def test_fibonacci_large():
            assert len(str(fibonacci(1000))) == 209
            # F(2k) = F(k) * (2 * F(k+1) - F(k))
            f500, f501 = fibonacci(500), fibonacci(501)
            assert fibonacci(1000) == f500 * (2 * f501 - f500)
        """,
    ),
    task(
        "binary_search", "searching", "medium", "lists",
        "def binary_search(items, target):",
        """
        Return the index of target in the ascending sequence items, or -1.

        When target occurs more than once, return the index of its first
        occurrence. items may be any sequence that supports len() and
        indexing; read it only that way, with O(log n) reads.
        """,
        """
        lo, hi = 0, len(items)
        while lo < hi:
            mid = (lo + hi) // 2
            if items[mid] < target:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(items) and items[lo] == target:
            return lo
        return -1
        """,
        [
            (([1, 3, 5, 7], 5), 2),
            (([1, 3, 5, 7], 4), -1),
            (([], 1), -1),
            (([2, 2, 2, 3], 2), 0),
            (([1, 2, 2, 2, 2, 5], 2), 1),
            (([1], 1), 0),
            (([1, 3], 9), -1),
        ],
        extra="""
        class Counting:
            # Counting wraps a list and counts element reads.
            def __init__(self, items):
                self.items = items
                self.reads = 0

            def __len__(self):
                return len(self.items)

            def __getitem__(self, i):
                self.reads += 1
                return self.items[i]


        def test_binary_search_is_logarithmic():
            items = Counting(list(range(0, 2000000, 2)))
            assert binary_search(items, 123456) == 61728
            assert items.reads <= 60
        """,
    ),
    task(
        "merge_intervals", "intervals", "medium", "lists",
        "def merge_intervals(intervals):",
        """
        Merge overlapping closed intervals.

        intervals is a list of [start, end] pairs with start <= end, in any
        order. Intervals that overlap or touch (one ends where the next
        starts) are merged. Return a new list of [start, end] lists sorted
        by start; the input is not modified.
        """,
        """
        merged = []
        for start, end in sorted(intervals):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return merged
        """,
        [
            (([[1, 3], [2, 6], [8, 10], [15, 18]],), [[1, 6], [8, 10], [15, 18]]),
            (([[1, 4], [4, 5]],), [[1, 5]]),
            (([],), []),
            (([[5, 6], [1, 2]],), [[1, 2], [5, 6]]),
            (([[1, 10], [2, 3], [4, 5]],), [[1, 10]]),
            (([[3, 3]],), [[3, 3]]),
        ],
        extra="""
        def test_merge_intervals_leaves_input_alone():
            intervals = [[2, 6], [1, 3]]
            merge_intervals(intervals)
            assert intervals == [[2, 6], [1, 3]]
        """,
    ),
    task(
        "rotate_matrix", "matrices", "medium", "lists",
        "def rotate_matrix(matrix):",
        """
        Return matrix rotated 90 degrees clockwise, as a new list of rows.

        matrix is a list of rows of equal length and need not be square: a
        2x3 matrix gives a 3x2 one. An empty matrix gives [].
        """,
        """
        return [list(row) for row in zip(*matrix[::-1])]
        """,
        [
            (([[1, 2], [3, 4]],), [[3, 1], [4, 2]]),
            (([[1, 2, 3]],), [[1], [2], [3]]),
            (([[1], [2], [3]],), [[3, 2, 1]]),
            (([],), []),
            (([[1, 2, 3], [4, 5, 6]],), [[4, 1], [5, 2], [6, 3]]),
        ],
    ),
    task(
        "spiral_order", "spiral", "hard", "lists",
        "def spiral_order(matrix):",
        """
        Return the elements of matrix in clockwise spiral order.

        matrix is a list of rows of equal length. The spiral starts at the
        top-left element, goes right along the top row, down the right
        column, left along the bottom row, up the left column, and so on
        inwards. An empty matrix gives [].
        """,
        """
        out = []
        if not matrix:
            return out
        top, bottom = 0, len(matrix) - 1
        left, right = 0, len(matrix[0]) - 1
        while top <= bottom and left <= right:
            for c in range(left, right + 1):
                out.append(matrix[top][c])
            for r in range(top + 1, bottom + 1):
                out.append(matrix[r][right])
            if top < bottom and left < right:
                for c in range(right - 1, left - 1, -1):
                    out.append(matrix[bottom][c])
                for r in range(bottom - 1, top, -1):
                    out.append(matrix[r][left])
            top, bottom, left, right = top + 1, bottom - 1, left + 1, right - 1
        return out
        """,
        [
            (([[1, 2, 3], [4, 5, 6], [7, 8, 9]],), [1, 2, 3, 6, 9, 8, 7, 4, 5]),
            (([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],), [1, 2, 3, 4, 8, 12, 11, 10, 9, 5, 6, 7]),
            (([],), []),
            (([[1]],), [1]),
            (([[1], [2], [3]],), [1, 2, 3]),
            (([[1, 2], [3, 4], [5, 6]],), [1, 2, 4, 6, 5, 3]),
        ],
    ),
    task(
        "balanced_brackets", "brackets", "medium", "parsing",
        "def balanced_brackets(text):",
        """
        Return True if the brackets in text are balanced.

        Every (, [ and { must be closed by the matching ), ] or }, properly
        nested: "([]{})" is balanced, "([)]" is not. Other characters are
        ignored.
        """,
        """
        pairs = {")": "(", "]": "[", "}": "{"}
        stack = []
        for c in text:
            if c in "([{":
                stack.append(c)
            elif c in pairs:
                if not stack or stack.pop() != pairs[c]:
                    return False
        return not stack
        """,
        [
            (("([]{})",), True),
            (("([)]",), False),
            (("",), True),
            (("(((",), False),
            (("a(b[c]d)e",), True),
            (("}{",), False),
            (("())",), False),
        ],
    ),
    task(
        "camel_to_snake", "naming", "hard", "strings",
        "def camel_to_snake(name):",
        """
        Convert a CamelCase or camelCase identifier to snake_case.

        A new word starts at an uppercase letter that follows a lowercase
        letter or a digit, and at the last uppercase letter of a run of
        uppercase letters when a lowercase letter follows it. The words are
        joined with "_" and the result is lowercase: "HTTPServer" gives
        "http_server", "version2Beta" gives "version2_beta".
        """,
        """
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
        """,
        [
            (("camelCase",), "camel_case"),
            (("CamelCase",), "camel_case"),
            (("HTTPServer",), "http_server"),
            (("getHTTPResponseCode",), "get_http_response_code"),
            (("already_snake",), "already_snake"),
            (("version2Beta",), "version2_beta"),
            (("ABC",), "abc"),
            (("",), ""),
        ],
        imports="import re",
    ),
    task(
        "parse_duration", "durations", "hard", "parsing",
        "def parse_duration(text):",
        """
        Parse a duration such as "1h30m" and return it in seconds (an int).

        A duration is one or more parts, each a non-negative decimal integer
        followed by a unit: d (86400 s), h (3600 s), m (60 s) or s. Each unit
        appears at most once, in the order d, h, m, s; "90m" is fine,
        "30m1h" is not. No spaces or fractions are allowed. Raise ValueError
        for anything else, the empty string included.
        """,
        """
        m = re.fullmatch(r"(?:(\\d+)d)?(?:(\\d+)h)?(?:(\\d+)m)?(?:(\\d+)s)?", text)
        if not text or m is None:
            raise ValueError("bad duration: %r" % text)
        total = 0
        for group, unit in zip(m.groups(), (86400, 3600, 60, 1)):
            if group is not None:
                total += int(group) * unit
        return total
        """,
        [
            (("45s",), 45),
            (("1h30m",), 5400),
            (("2d4h",), 187200),
            (("1d1h1m1s",), 90061),
            (("0s",), 0),
            (("90m",), 5400),
        ],
        raises=[(("",), "ValueError"), (("1x",), "ValueError"), (("30m1h",), "ValueError"),
                (("1h 30m",), "ValueError"), (("h",), "ValueError"), (("1.5h",), "ValueError")],
        imports="import re",
    ),
    task(
        "format_bytes", "sizes", "medium", "numbers",
        "def format_bytes(n):",
        """
        Format a byte count for people, with binary units.

        Below 1024 the result is "<n> B" ("0 B", "1023 B"). Otherwise n is
        divided by 1024 until it is below 1024 or the unit is TiB, through
        the units KiB, MiB, GiB and TiB, and shown with one decimal:
        1536 gives "1.5 KiB", 5 * 1024**4 gives "5.0 TiB". Raise ValueError
        if n is negative.
        """,
        """
        if n < 0:
            raise ValueError("negative size")
        if n < 1024:
            return "%d B" % n
        value = float(n)
        for unit in ("KiB", "MiB", "GiB", "TiB"):
            value /= 1024
            if value < 1024 or unit == "TiB":
                return "%.1f %s" % (value, unit)
        """,
        [
            ((0,), "0 B"),
            ((1023,), "1023 B"),
            ((1024,), "1.0 KiB"),
            ((1536,), "1.5 KiB"),
            ((10 * 1024 ** 2,), "10.0 MiB"),
            ((5 * 1024 ** 4,), "5.0 TiB"),
            ((3 * 1024 ** 5,), "3072.0 TiB"),
        ],
        raises=[((-1,), "ValueError")],
    ),
    task(
        "moving_average", "smoothing", "medium", "numbers",
        "def moving_average(values, window):",
        """
        Return the means of every run of window consecutive values.

        The result has len(values) - window + 1 floats, or is [] when there
        are fewer values than window. Raise ValueError if window < 1.
        """,
        """
        if window < 1:
            raise ValueError("window must be at least 1")
        return [sum(values[i:i + window]) / window for i in range(len(values) - window + 1)]
        """,
        [
            (([1, 2, 3, 4, 5], 2), [1.5, 2.5, 3.5, 4.5]),
            (([1, 2, 3], 3), [2.0]),
            (([1, 2], 3), []),
            (([4], 1), [4.0]),
            (([0.1, 0.2, 0.3, 0.4], 3), [0.2, 0.3]),
        ],
        raises=[(([1], 0), "ValueError")],
        approx=True,
    ),
    task(
        "group_anagrams", "anagram_groups", "hard", "lists",
        "def group_anagrams(words):",
        """
        Group the words that are anagrams of each other.

        Two words are anagrams when they hold exactly the same characters
        the same number of times (case matters). Return a list of groups;
        each group lists its words in input order, duplicates kept, and the
        groups are ordered by where their first word appears.
        """,
        """
        groups = {}
        for word in words:
            groups.setdefault("".join(sorted(word)), []).append(word)
        return list(groups.values())
        """,
        [
            ((["eat", "tea", "tan", "ate", "nat", "bat"],), [["eat", "tea", "ate"], ["tan", "nat"], ["bat"]]),
            (([],), []),
            ((["a"],), [["a"]]),
            ((["ab", "ba", "ab"],), [["ab", "ba", "ab"]]),
            ((["Ab", "ba"],), [["Ab"], ["ba"]]),
        ],
    ),
    task(
        "longest_common_prefix", "prefixes", "easy", "strings",
        "def longest_common_prefix(strings):",
        """
        Return the longest string that every string in the list starts with.

        An empty list gives "".
        """,
        """
        if not strings:
            return ""
        return os.path.commonprefix(strings)
        """,
        [
            ((["flower", "flow", "flight"],), "fl"),
            ((["dog", "racecar", "car"],), ""),
            (([],), ""),
            ((["alone"],), "alone"),
            ((["same", "same"],), "same"),
            ((["", "a"],), ""),
        ],
        imports="import os",
    ),
    task(
        "eval_rpn", "rpn", "hard", "parsing",
        "def eval_rpn(expression):",
        """
        Evaluate an integer expression in reverse Polish notation.

        expression holds tokens separated by whitespace: integers (which may
        be negative, like "-3") and the operators +, -, * and /. Division
        truncates toward zero, as in C: "7 -2 /" is -3. Return the int
        result. Raise ZeroDivisionError on division by zero and ValueError
        on a malformed expression: empty, an operator without two operands,
        operands left over, or an unknown token.
        """,
        """
        stack = []
        for token in expression.split():
            if token in ("+", "-", "*", "/"):
                if len(stack) < 2:
                    raise ValueError("operator %r needs two operands" % token)
                b = stack.pop()
                a = stack.pop()
                if token == "+":
                    stack.append(a + b)
                elif token == "-":
                    stack.append(a - b)
                elif token == "*":
                    stack.append(a * b)
                else:
                    if b == 0:
                        raise ZeroDivisionError("division by zero")
                    q = abs(a) // abs(b)
                    stack.append(q if (a < 0) == (b < 0) else -q)
            else:
                try:
                    stack.append(int(token))
                except ValueError:
                    raise ValueError("unknown token %r" % token) from None
        if len(stack) != 1:
            raise ValueError("expression must leave exactly one value")
        return stack[0]
        """,
        [
            (("2 1 + 3 *",), 9),
            (("4 13 5 / +",), 6),
            (("10 6 9 3 + -11 * / * 17 + 5 +",), 22),
            (("7 -2 /",), -3),
            (("-7 2 /",), -3),
            (("42",), 42),
        ],
        raises=[(("",), "ValueError"), (("1 +",), "ValueError"), (("1 2",), "ValueError"),
                (("1 2 ^",), "ValueError"), (("1 0 /",), "ZeroDivisionError")],
    ),
    task(
        "compare_versions", "versions", "medium", "parsing",
        "def compare_versions(a, b):",
        """
        Compare two dotted version strings such as "1.2.10" and "1.2.9".

        Each part is a non-negative decimal integer, compared as a number
        ("1.02" equals "1.2"), and missing trailing parts count as 0 ("1.0"
        equals "1"). Return -1 if a is older than b, 1 if newer, 0 if equal.
        """,
        """
        pa = [int(p) for p in a.split(".")]
        pb = [int(p) for p in b.split(".")]
        n = max(len(pa), len(pb))
        pa += [0] * (n - len(pa))
        pb += [0] * (n - len(pb))
        return (pa > pb) - (pa < pb)
        """,
        [
            (("1.2.10", "1.2.9"), 1),
            (("1.0", "1"), 0),
            (("0.9", "1.0"), -1),
            (("1.02", "1.2"), 0),
            (("2", "10"), -1),
            (("1.0.0.1", "1"), 1),
        ],
    ),
    task(
        "luhn_valid", "luhn", "medium", "numbers",
        "def luhn_valid(number):",
        """
        Return True if the string number passes the Luhn checksum.

        number holds decimal digits, possibly with spaces between them, which
        are ignored. From the rightmost digit, every second digit is doubled
        (subtracting 9 when that exceeds 9) and all digits are summed; the
        number is valid when the sum is a multiple of 10. A string with
        fewer than two digits, or with any character other than digits and
        spaces, is not valid.
        """,
        """
        digits = number.replace(" ", "")
        if len(digits) < 2 or not all("0" <= c <= "9" for c in digits):
            return False
        total = 0
        for i, c in enumerate(reversed(digits)):
            d = int(c)
            if i % 2 == 1:
                d *= 2
                if d > 9:
                    d -= 9
            total += d
        return total % 10 == 0
        """,
        [
            (("4539 3195 0343 6467",), True),
            (("8273 1232 7352 0569",), False),
            (("059",), True),
            (("0",), False),
            (("055 444 285",), True),
            (("055a 444 285",), False),
            (("79927398713",), True),
            (("79927398710",), False),
        ],
    ),
    task(
        "median", "middle", "easy", "numbers",
        "def median(values):",
        """
        Return the median of a non-empty list of numbers.

        With an even count it is the mean of the two middle values. The
        input is not modified. Raise ValueError if values is empty.
        """,
        """
        if not values:
            raise ValueError("median of an empty list")
        s = sorted(values)
        mid = len(s) // 2
        if len(s) % 2 == 1:
            return s[mid]
        return (s[mid - 1] + s[mid]) / 2
        """,
        [
            (([3, 1, 2],), 2),
            (([4, 1, 3, 2],), 2.5),
            (([5],), 5),
            (([-1, -3],), -2.0),
            (([1, 1, 1, 100],), 1.0),
        ],
        raises=[(([],), "ValueError")],
        extra="""
        def test_median_leaves_input_alone():
            values = [3, 1, 2]
            median(values)
            assert values == [3, 1, 2]
        """,
        approx=True,
    ),
    task(
        "two_sum", "pairs", "medium", "lists",
        "def two_sum(nums, target):",
        """
        Find two positions whose numbers add up to target.

        Return a tuple (i, j) with i < j and nums[i] + nums[j] == target, or
        None if there is none. When several pairs qualify, return the one
        with the smallest j, and for that j the smallest i.
        """,
        """
        first = {}
        for j, x in enumerate(nums):
            if target - x in first:
                return (first[target - x], j)
            if x not in first:
                first[x] = j
        return None
        """,
        [
            (([2, 7, 11, 15], 9), (0, 1)),
            (([3, 2, 4], 6), (1, 2)),
            (([3, 3], 6), (0, 1)),
            (([1, 2, 3], 7), None),
            (([1, 5, 1, 5], 6), (0, 1)),
            (([0, 4, 3, 0], 0), (0, 3)),
            (([], 1), None),
        ],
    ),
    task(
        "title_case", "titles", "medium", "strings",
        "def title_case(title):",
        """
        Capitalise a title.

        Words are separated by single spaces. Each word gets an uppercase
        first letter and lowercase others, except the small words a, an,
        the, and, or, of, in, on and to, which are all lowercase unless they
        are the first or the last word: "the lord of the rings" gives
        "The Lord of the Rings".
        """,
        """
        small = {"a", "an", "the", "and", "or", "of", "in", "on", "to"}
        words = title.split(" ")
        out = []
        for i, w in enumerate(words):
            lw = w.lower()
            if lw in small and 0 < i < len(words) - 1:
                out.append(lw)
            else:
                out.append(lw[:1].upper() + lw[1:])
        return " ".join(out)
        """,
        [
            (("the lord of the rings",), "The Lord of the Rings"),
            (("a tale OF two cities",), "A Tale of Two Cities"),
            (("what is it for",), "What Is It For"),
            (("something to hold on to",), "Something to Hold on To"),
            (("",), ""),
        ],
    ),
]


def stub_source(t):
    """Return the starter module: the signature and docstring, no body."""
    return "%s\n%s\n    raise NotImplementedError\n" % (t["signature"], docstring(t["doc"]))


def solution_source(t):
    """Return the reference module."""
    head = t["imports"] + "\n\n\n" if t["imports"] else ""
    body = textwrap.indent(t["body"], "    ")
    return "%s%s\n%s\n%s\n" % (head, t["signature"], docstring(t["doc"]), body)


def docstring(doc):
    """Return doc as an indented function docstring."""
    lines = doc.split("\n")
    if len(lines) == 1:
        return '    """%s"""' % doc
    return '    """' + textwrap.indent(doc, "    ").lstrip() + '\n    """'


def func_name(t):
    """Return the function name from the task's signature."""
    return t["signature"][len("def "):t["signature"].index("(")]


def test_source(t):
    """Return the hidden pytest file for the task."""
    name = func_name(t)
    out = [
        '"""Hidden tests for %s (generated by examples/pyfuncs/gen.py)."""' % name,
        "",
        "import pytest",
        "",
        "from %s import %s" % (t["module"], name),
        "",
        "CASES = [",
    ]
    out += ["    (%r, %r)," % (args, expected) for args, expected in t["cases"]]
    out += [
        "]",
        "",
        "",
        '@pytest.mark.parametrize("args, expected", CASES, ids=["case%d" % i for i in range(len(CASES))])',
        "def test_%s(args, expected):" % name,
        "    assert %s(*args) == %s" % (name, "pytest.approx(expected)" if t["approx"] else "expected"),
    ]
    if t["raises"]:
        out += ["", "", "RAISES = ["]
        out += ["    (%r, %s)," % (args, exc) for args, exc in t["raises"]]
        out += [
            "]",
            "",
            "",
            '@pytest.mark.parametrize("args, error", RAISES, ids=["bad%d" % i for i in range(len(RAISES))])',
            "def test_%s_rejects(args, error):" % name,
            "    with pytest.raises(error):",
            "        %s(*args)" % name,
        ]
    if t["extra"]:
        out += ["", "", t["extra"]]
    return "\n".join(out) + "\n"


def prompt(t):
    """Return the task's prompt."""
    return (
        "Implement the function `%s` in %s/%s.py. The file holds a stub whose "
        "docstring says what the function must do:\n\n```python\n%s\n%s\n```\n\n"
        "Keep the function's name and parameters, and use only the Python standard library. "
        "Call mark_done when you are finished."
        % (func_name(t), WORKDIR, t["module"], t["signature"], docstring(t["doc"]))
    )


def task_object(t):
    """Return the gymserver task object for t."""
    n_tests = len(t["cases"]) + len(t["raises"]) + len(re.findall(r"^def test_", t["extra"], re.M))
    module_file = t["module"] + ".py"
    return {
        "id": t["id"],
        "prompt": prompt(t),
        "files": {module_file: stub_source(t)},
        "hidden_files": {"tests/test_%s.py" % t["id"]: test_source(t)},
        "reference_solution": {"contents": {module_file: solution_source(t)}},
        "metadata": {
            "difficulty": t["difficulty"],
            "category": t["category"],
            "function": func_name(t),
            "module": module_file,
            "tests": n_tests,
        },
    }


def check_definitions(tasks):
    """Raise ValueError if the task definitions break a rule the output relies on."""
    problems = []
    seen = set()
    for t in tasks:
        if t["id"] in seen:
            problems.append("duplicate id %s" % t["id"])
        seen.add(t["id"])
        if func_name(t) != t["id"]:
            problems.append("%s: function is named %s" % (t["id"], func_name(t)))
        if t["module"] in sys.stdlib_module_names or t["module"] in PYTEST_MODULES:
            problems.append("%s: module %s shadows an installed module" % (t["id"], t["module"]))
        if len(t["cases"]) + len(t["raises"]) < 4:
            problems.append("%s: fewer than 4 cases" % t["id"])
    if len(tasks) < 30:
        problems.append("only %d tasks" % len(tasks))
    if problems:
        raise ValueError("; ".join(problems))


def render(tasks):
    """Return the JSONL text for tasks."""
    check_definitions(tasks)
    return "".join(json.dumps(task_object(t)) + "\n" for t in tasks)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks.jsonl")
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write(render(TASKS))
    print("wrote %d tasks to %s" % (len(TASKS), out))


if __name__ == "__main__":
    main()
