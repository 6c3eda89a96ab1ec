#!/usr/bin/env python3
"""Writes tests/data/json/cases.json: texts and whether each is one whole JSON object, as
Python's json module (the reference) judges it, for tests/unit/json_constraint_test.cc.

A text counts as a JSON object when it is valid UTF-8, json.loads takes it (with NaN and
Infinity refused, as RFC 8259 does) and gives a dict whose strings are all Unicode (a \\u escape
of a lone UTF-16 surrogate, which json.loads takes, is no character: such a string cannot be
encoded as UTF-8, and strict parsers refuse it), and it keeps the limits the constraint adds: no
whitespace after the object, at most 48 whitespace bytes in a row, nesting at most 64.
Valid texts come from json.dumps of random values in several layouts; the rest are random edits
of them (a byte dropped, inserted, replaced, or the text cut), each judged again by json.loads.

Usage: python3 tools/reference/make_json_cases.py > tests/data/json/cases.json
"""
import json
import random
import sys

MAX_DEPTH = 64
MAX_WHITESPACE_RUN = 48
WHITESPACE = b" \t\n\r"

STRINGS = ["", "a", "key", "hello world", "caf\u00e9", "\u4f60\u597d", "\U0001f916 robot",
           "quote \" inside", "back\\slash", "tab\tnewline\n", "\u0000 nul", "\u2028",
           "slash/", "\ud7ff", "\ue000", "\U0010ffff", "emoji \U0001f600\U0001f601"]
NUMBERS = [0, -0, 1, -1, 7, 42, 1234567890, -98765, 0.5, -0.25, 3.14159, 1e10, 1.5e-7, -2.5E+30,
           123456789012345678901234567890]


def random_value(rng, depth):
    kind = rng.random()
    if depth < 6 and kind < 0.25:
        return {random_string(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if depth < 6 and kind < 0.4:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind < 0.65:
        return random_string(rng)
    if kind < 0.85:
        return rng.choice(NUMBERS)
    return rng.choice([True, False, None])


def random_string(rng):
    return rng.choice(STRINGS) if rng.random() < 0.8 else "".join(
        chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0xd7ff),
                        rng.randint(0x10000, 0x10ffff)])) for _ in range(rng.randint(1, 6)))


def dump(rng, value):
    style = rng.randint(0, 4)
    if style == 0:
        return json.dumps(value, ensure_ascii=False)
    if style == 1:
        return json.dumps(value, ensure_ascii=True)
    if style == 2:
        return json.dumps(value, indent=rng.choice([1, 2, 4]), ensure_ascii=False)
    if style == 3:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(value, indent="\t", separators=(" ,", " : "), ensure_ascii=False)


def refuse_constant(name):
    raise ValueError(name)


def depth_of(value):
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def longest_whitespace_run(data):
    # Whitespace inside strings is escaped (\t, \n) or a space; spaces inside strings count here
    # too, which only makes the reference stricter than the automaton for texts with long space
    # runs inside strings. The random texts have none.
    longest = run = 0
    for byte in data:
        run = run + 1 if byte in WHITESPACE else 0
        longest = max(longest, run)
    return longest


def strings_of(value):
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)
    elif isinstance(value, str):
        yield value


def all_unicode(value):
    try:
        for s in strings_of(value):
            s.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def is_object(data):
    try:
        text = data.decode("utf-8")
        value = json.loads(text, parse_constant=refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return (isinstance(value, dict) and all_unicode(value)
            and data[-1:] not in (b" ", b"\t", b"\n", b"\r")
            and depth_of(value) <= MAX_DEPTH and longest_whitespace_run(data) <= MAX_WHITESPACE_RUN)


def edit(rng, data):
    i = rng.randrange(len(data) + 1)
    op = rng.randint(0, 3)
    pool = b'{}[]:,"\\ \n0123456789.-+eEtrufalsn\x00\x1f\x7f\xc3\xa9\xed\xa0\x80\xf4\x90\xc0\xaf'
    if op == 0 and i < len(data):
        return data[:i] + data[i + 1:]
    if op == 1:
        return data[:i] + bytes([rng.choice(pool)]) + data[i:]
    if op == 2 and i < len(data):
        return data[:i] + bytes([rng.choice(pool)]) + data[i + 1:]
    return data[:i]


def main():
    rng = random.Random(20261203)
    cases = []
    for _ in range(400):
        value = {random_string(rng): random_value(rng, 1) for _ in range(rng.randint(0, 5))}
        data = dump(rng, value).encode("utf-8")
        if rng.random() < 0.1:
            data = b" \n" + data
        cases.append(data)
    # Hand-picked edges: numbers, escapes, literals, UTF-8, nesting and whitespace limits.
    for text in [b'{}', b'{"a":-0}', b'{"a":01}', b'{"a":1.}', b'{"a":.5}', b'{"a":1e}',
                 b'{"a":1e+}', b'{"a":-}', b'{"a":1E-07}', b'{"a":tru}', b'{"a":nulll}',
                 b'{"a":"\\u00e9\\uD83D\\uDE00"}', b'{"a":"\\x"}', b'{"a":"\\u12G4"}',
                 b'{"a":"\\uD83D"}', b'{"a":"\\uDE00"}', b'{"a":"\\uD83Dx"}', b'{"a":"\\ud83d\\u0041"}',
                 b'{"\\uDBFF\\uDFFF":1}', b'{"a":"\\uD800\\uD800"}', b'{"a":"\\uDC00\\uD800"}',
                 b'{"a":"\\uD7FF\\uE000"}',
                 b'{"a":"\xed\x9f\xbf"}', b'{"a":"\xed\xa0\x80"}', b'{"a":"\xe0\x9f\xbf"}',
                 b'{"a":"\xf4\x8f\xbf\xbf"}', b'{"a":"\xf4\x90\x80\x80"}', b'{"a":"\xc1\xbf"}',
                 b'{"a":[1,2,]}', b'{"a":1,}', b'{,}', b'{"a" "b"}', b'[1]', b'"x"', b'1',
                 b'{"a":1}{', b'{"a":1} ', b'{"a":NaN}', b'{"a":Infinity}', b'{"a":[]]}',
                 b'{"a":{]}', b'{"a":"tab\there"}', b'{"\x7f":1}',
                 b'{"a":' + b'[' * 63 + b']' * 63 + b'}', b'{"a":' + b'[' * 64 + b']' * 64 + b'}',
                 b'{' + b' ' * 48 + b'"a":1}', b'{' + b' ' * 49 + b'"a":1}']:
        cases.append(text)
    for i in range(400):
        cases.append(edit(rng, cases[rng.randrange(400)]))
    out = [{"text": c.hex(), "object": is_object(c)} for c in cases]
    json.dump({"generator": "tools/reference/make_json_cases.py",
               "python": sys.version.split()[0], "cases": out}, sys.stdout, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
