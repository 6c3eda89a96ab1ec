#!/usr/bin/env python3
"""Writes tests/data/json/schema_cases.json: JSON Schemas, texts that are instances of them and
texts that are not, as the `jsonschema` package (the reference, Draft 2020-12) and Python's json
module judge them, for tests/unit/json_schema_test.cc.

The valid texts are json.dumps of random instances in several layouts, in the form the schema
constraint writes (sampling/json_schema.h): properties in the schema's order (each optional one
present or not), enum values and names as json.dumps spells them (ensure_ascii=False), integers
as Python writes ints. The invalid texts are edits of them, on the values (a required property
dropped, one added, a value of another type, an enum value outside the list, an item too many or
too few, properties swapped...) and on the bytes (one dropped, inserted, replaced, the text cut);
each is kept only if jsonschema (after json.loads) refuses it, so the label is the reference's.

Usage (jsonschema 4.26, which scripts/install_deps.sh installs into .tools/):
  .tools/bin/python3 tools/reference/make_json_schema_cases.py > tests/data/json/schema_cases.json
"""
import json
import random
import sys

import jsonschema

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "ignored"},
        "age": {"type": "integer"},
        "email": {"type": ["string", "null"]},
        "height": {"type": "number"},
    },
    "required": ["name", "age", "email"],
    "additionalProperties": False,
}
ENUMS = {
    "type": "object",
    "properties": {
        "status": {"enum": ["active", "inactive", "pending", "caf\u00e9 \"q\" \\ \u4f60"]},
        "level": {"enum": [1, 12, 123, -4, 0]},
        "kind": {"const": "fixed"},
        "mixed": {"enum": ["x", 3, True, None]},
        "flag": {"type": "boolean"},
        "nothing": {"type": "null"},
    },
    "required": ["status", "level", "kind", "mixed", "flag", "nothing"],
    "additionalProperties": False,
}
ARRAYS = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "points": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"], "additionalProperties": False}},
        "empty": {"type": "array", "items": {"type": "string"}, "maxItems": 0},
    },
    "required": ["tags", "matrix", "points"],
    "additionalProperties": False,
}
ANY_OF = {
    "type": "object",
    "properties": {
        "value": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"},
                            {"type": "object", "properties": {"n": {"type": "integer"}},
                             "required": ["n"], "additionalProperties": False},
                            {"type": "array", "items": {"type": "boolean"}}]},
        "choice": {"anyOf": [{"enum": ["a", "b"]}, {"type": "integer"}]},
    },
    "required": ["value", "choice"],
    "additionalProperties": False,
}
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3},
            },
            "required": ["name"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}, "count": {"type": "integer"}},
    "required": ["root", "count"],
    "additionalProperties": False,
}
OPTIONAL = {
    "type": "object",
    "properties": {
        "a": {"type": "integer"},
        "b": {"type": "string"},
        "ab": {"type": "boolean"},
        "c": {"type": "integer"},
        "d": {"type": "string"},
    },
    "required": ["b", "d"],
}
EMPTY = {"type": "object", "properties": {}, "additionalProperties": False}
NAMES = {
    "type": "object",
    "properties": {
        "caf\u00e9": {"type": "string"},
        "quote\"key": {"type": "integer"},
        "back\\slash": {"type": "boolean"},
        "": {"type": "null"},
        "\u4f60\u597d \U0001f916": {"type": "string"},
    },
    "required": ["caf\u00e9", "quote\"key", "back\\slash", "", "\u4f60\u597d \U0001f916"],
    "additionalProperties": False,
}
STRICT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Event",
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "date": {"anyOf": [{"$ref": "#/definitions/date"}, {"type": "null"}]},
        "attendees": {"type": "array", "items": {"$ref": "#/definitions/person"}},
    },
    "required": ["event", "date", "attendees"],
    "additionalProperties": False,
    "definitions": {
        "date": {"type": "object", "properties": {"y": {"type": "integer"}, "m": {"type": "integer"}},
                 "required": ["y", "m"], "additionalProperties": False},
        "person": {"type": "object",
                   "properties": {"name": {"type": "string"},
                                  "role": {"enum": ["host", "guest"]}},
                   "required": ["name", "role"], "additionalProperties": False},
    },
}
# anyOf alternatives of enum, const and null values, which the constraint merges into one list
# of values: one repeated across alternatives, integers that are prefixes of each other in
# different alternatives, a nested anyOf, a definition used inside an anyOf and alone.
LITERAL_UNIONS = {
    "type": "object",
    "properties": {
        "unit": {"anyOf": [{"const": "cm"}, {"const": "in"}, {"enum": ["m", "ft", "cm"]}]},
        "size": {"anyOf": [{"enum": [1, 12]}, {"const": 123}, {"type": "null"}]},
        "answer": {"anyOf": [{"anyOf": [{"const": True}, {"$ref": "#/$defs/yes"}]},
                             {"const": False},
                             {"type": "array", "maxItems": 2,
                              "items": {"anyOf": [{"const": "a"}, {"enum": ["b", "a"]}]}}]},
        "confirm": {"$ref": "#/$defs/yes"},
    },
    "required": ["unit", "size", "answer"],
    "additionalProperties": False,
    "$defs": {"yes": {"const": "yes"}},
}
# anyOf alternatives that are objects, which the constraint reads as one object whose names and
# values narrow which alternative it is: a "kind" const or enum in each (a value shared by two of
# them), a property two share with the same schema (descriptions aside), one whose first name
# is not the discriminator, optional properties, one nested in an array and beside null.
OBJECT_UNIONS = {
    "type": "object",
    "properties": {
        "shape": {"anyOf": [
            {"type": "object",
             "properties": {"kind": {"const": "circle"}, "id": {"type": "integer"},
                            "radius": {"type": "number"}},
             "required": ["kind", "radius"], "additionalProperties": False},
            {"type": "object",
             "properties": {"kind": {"const": "rect"},
                            "id": {"type": "integer", "description": "the rectangle's"},
                            "width": {"type": "number"}, "height": {"type": "number"}},
             "required": ["kind", "width", "height"], "additionalProperties": False},
            {"type": "object",
             "properties": {"label": {"type": "string"}, "kind": {"enum": ["note", "rect"]}},
             "required": ["kind"], "additionalProperties": False},
            {"type": "null"}]},
        "events": {"type": "array", "maxItems": 3, "items": {"anyOf": [
            {"type": "object", "properties": {"at": {"type": "integer"}, "up": {"const": True}},
             "required": ["at", "up"], "additionalProperties": False},
            {"type": "object", "properties": {"at": {"type": "integer"}, "down": {"const": True}},
             "required": ["at", "down"], "additionalProperties": False}]}},
    },
    "required": ["shape"],
    "additionalProperties": False,
}
# oneOf, whose instances match exactly one alternative: objects told apart by a required "kind"
# (not the first property of one of them) with values of their own, beside Pydantic's
# "discriminator" annotation; enum, const, null and integer alternatives with no value in common.
ONE_OF = {
    "type": "object",
    "properties": {
        "pet": {"oneOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}],
                "discriminator": {"propertyName": "kind"}},
        "size": {"oneOf": [{"enum": ["s", "m"]}, {"const": "l"}, {"type": "null"},
                           {"type": "integer"}]},
    },
    "required": ["pet", "size"],
    "additionalProperties": False,
    "$defs": {
        "cat": {"type": "object",
                "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
                "required": ["kind"], "additionalProperties": False},
        "dog": {"type": "object",
                "properties": {"name": {"type": "string"}, "kind": {"enum": ["dog", "puppy"]},
                               "lives": {"type": "integer"}},
                "required": ["kind"], "additionalProperties": False},
    },
}
# A oneOf inside a oneOf (Pydantic's nested discriminated union: two cats told apart by "color"
# inside a oneOf with a dog, all three by "pet_type"), and a recursive anyOf of two object kinds
# that both have it as a property.
NESTED_UNIONS = {
    "type": "object",
    "properties": {
        "pet": {"oneOf": [{"oneOf": [{"$ref": "#/$defs/black"}, {"$ref": "#/$defs/white"}],
                           "discriminator": {"propertyName": "color"}},
                          {"$ref": "#/$defs/dog"}],
                "discriminator": {"propertyName": "pet_type"}},
        "chain": {"$ref": "#/$defs/a"},
    },
    "required": ["pet", "chain"],
    "additionalProperties": False,
    "$defs": {
        "black": {"type": "object",
                  "properties": {"pet_type": {"const": "cat"}, "color": {"const": "black"},
                                 "name": {"type": "string"}},
                  "required": ["pet_type", "color"], "additionalProperties": False},
        "white": {"type": "object",
                  "properties": {"pet_type": {"const": "cat"}, "color": {"const": "white"},
                                 "lives": {"type": "integer"}},
                  "required": ["pet_type", "color"], "additionalProperties": False},
        "dog": {"type": "object",
                "properties": {"pet_type": {"const": "dog"}, "name": {"type": "string"}},
                "required": ["pet_type", "name"], "additionalProperties": False},
        "a": {"type": "object",
              "properties": {"kind": {"const": "a"},
                             "next": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]}},
              "required": ["kind"], "additionalProperties": False},
        "b": {"type": "object",
              "properties": {"kind": {"const": "b"}, "n": {"type": "integer"},
                             "next": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]}},
              "required": ["kind"], "additionalProperties": False},
    },
}
# Objects whose shared property ("arguments") has a schema of each one's own, after a required
# discriminator ("name") that has chosen: the form of tool calls.
DECIDED_UNIONS = {
    "type": "object",
    "properties": {"calls": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"anyOf": [
        {"type": "object",
         "properties": {"name": {"const": "get_weather"},
                        "arguments": {"type": "object",
                                      "properties": {"city": {"type": "string"},
                                                     "days": {"type": "integer"}},
                                      "required": ["city"], "additionalProperties": False}},
         "required": ["name", "arguments"], "additionalProperties": False},
        {"type": "object",
         "properties": {"name": {"const": "search"},
                        "arguments": {"type": "object",
                                      "properties": {"query": {"type": "string"},
                                                     "exact": {"type": "boolean"}},
                                      "required": ["query"], "additionalProperties": False}},
         "required": ["name", "arguments"], "additionalProperties": False},
        {"type": "object",
         "properties": {"name": {"enum": ["now", "today"]},
                        "arguments": {"type": "object", "properties": {},
                                      "additionalProperties": False}},
         "required": ["name", "arguments"], "additionalProperties": False}]}}},
    "required": ["calls"],
    "additionalProperties": False,
}
# New schemas go last: the draws of one random generator run through them in order, so the
# cases of the earlier ones stay as they are.
SCHEMAS = {"person": PERSON, "enums": ENUMS, "arrays": ARRAYS, "any_of": ANY_OF, "tree": TREE,
           "optional": OPTIONAL, "empty": EMPTY, "names": NAMES, "strict": STRICT,
           "literal_unions": LITERAL_UNIONS, "object_unions": OBJECT_UNIONS, "one_of": ONE_OF,
           "nested_unions": NESTED_UNIONS, "decided_unions": DECIDED_UNIONS}

STRINGS = ["", "a", "hello world", "caf\u00e9", "\u4f60\u597d", "\U0001f916", "quote \" in",
           "back\\slash", "tab\tnewline\n", "\u0000 nul", "\u2028", "slash/"]
NUMBERS = [0, -1, 7, 42, 1234567890, -98765, 0.5, -0.25, 3.14159, 1e10, 1.5e-7, -2.5e30]


def resolve(root, schema):
    while "$ref" in schema:
        path = schema["$ref"].lstrip("#/").split("/")
        schema = root
        for part in path:
            schema = schema[part]
    return schema


def types_of(schema):
    t = schema["type"]
    return t if isinstance(t, list) else [t]


def instance(rng, root, schema, depth):
    schema = resolve(root, schema)
    if "anyOf" in schema or "oneOf" in schema:
        options = schema.get("anyOf") or schema["oneOf"]
        if depth > 3:  # prefer what ends
            options = [o for o in options if "object" not in json.dumps(o)] or options
        return instance(rng, root, rng.choice(options), depth)
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "const" in schema:
        return schema["const"]
    t = rng.choice(types_of(schema))
    if t == "object":
        out = {}
        required = schema.get("required", [])
        for name, sub in schema.get("properties", {}).items():
            if name in required or (depth < 3 and rng.random() < 0.6):
                out[name] = instance(rng, root, sub, depth + 1)
        return out
    if t == "array":
        low = schema.get("minItems", 0)
        high = schema.get("maxItems", 4 if depth < 3 else low)
        return [instance(rng, root, schema["items"], depth + 1)
                for _ in range(rng.randint(low, max(low, high)))]
    if t == "string":
        return rng.choice(STRINGS)
    if t == "integer":
        return rng.choice([n for n in NUMBERS if isinstance(n, int)])
    if t == "number":
        return rng.choice(NUMBERS)
    if t == "boolean":
        return rng.choice([True, False])
    return None


def dump(rng, value):
    style = rng.randint(0, 3)
    if style == 0:
        return json.dumps(value, ensure_ascii=False)
    if style == 1:
        return json.dumps(value, indent=rng.choice([1, 2, 4]), ensure_ascii=False)
    if style == 2:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(value, indent="\t", separators=(" ,", " : "), ensure_ascii=False)


def value_edit(rng, value):
    """A copy of `value` (a dict) with one edit somewhere inside."""
    value = json.loads(json.dumps(value))
    spots = []

    def visit(v):
        if isinstance(v, dict):
            spots.append(v)
            for x in v.values():
                visit(x)
        elif isinstance(v, list):
            spots.append(v)
            for x in v:
                visit(x)
    visit(value)
    spot = rng.choice(spots)
    op = rng.randint(0, 4)
    if isinstance(spot, dict):
        keys = list(spot)
        if op == 0 and keys:
            del spot[rng.choice(keys)]
        elif op == 1:
            spot[rng.choice(["extra", "name", "a", "zz"])] = 1
        elif op == 2 and len(keys) >= 2:
            items = list(spot.items())
            items[0], items[-1] = items[-1], items[0]
            spot.clear()
            spot.update(items)
        elif keys:
            spot[rng.choice(keys)] = rng.choice(["other", 3.5, -2, True, None, [], {}, "pending!"])
    elif spot:
        if op <= 1:
            spot.append(rng.choice(spot))
        elif op == 2:
            spot.pop()
        else:
            spot[rng.randrange(len(spot))] = rng.choice(["s", 1.5, 7, False, None, {}])
    else:
        spot.append(rng.choice(["s", 1, None]))
    return value


def byte_edit(rng, data):
    i = rng.randrange(len(data) + 1)
    op = rng.randint(0, 3)
    pool = b'{}[]:,"\\ \n0123456789.-+eEtrufalsn\x00\x1f\xc3\xa9\xed\xa0\x80'
    if op == 0 and i < len(data):
        return data[:i] + data[i + 1:]
    if op == 1:
        return data[:i] + bytes([rng.choice(pool)]) + data[i:]
    if op == 2 and i < len(data):
        return data[:i] + bytes([rng.choice(pool)]) + data[i + 1:]
    return data[:i]


def literal_swaps(value, literals):
    """Copies of `value` with one string among `literals` replaced by another of them."""
    out = []

    def visit(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                visit(x, path + [k])
        elif isinstance(v, list):
            for i, x in enumerate(v):
                visit(x, path + [i])
        elif isinstance(v, str) and v in literals:
            for other in literals:
                if other == v:
                    continue
                copy = json.loads(json.dumps(value))
                spot = copy
                for step in path[:-1]:
                    spot = spot[step]
                spot[path[-1]] = other
                out.append(copy)
    visit(value, [])
    return out


def refuse_constant(name):
    raise ValueError(name)


def valid(validator, data):
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=refuse_constant)
    except (UnicodeDecodeError, ValueError):
        return False
    return validator.is_valid(value)


def main():
    rng = random.Random(20261203)
    out = []
    for name, schema in SCHEMAS.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(schema)
        good, values = [], []
        for _ in range(400):
            if len(good) >= 40:
                break
            value = instance(rng, schema, schema, 0)
            data = dump(rng, value).encode("utf-8")
            assert valid(validator, data), (name, data)
            if data not in good:
                good.append(data)
                values.append(value)
        bad = []
        for attempt in range(4000):
            if len(bad) >= 60:
                break
            k = rng.randrange(len(good))
            data = (dump(rng, value_edit(rng, values[k])).encode("utf-8") if attempt % 2 == 0
                    else byte_edit(rng, good[k]))
            if not valid(validator, data) and data not in bad:
                bad.append(data)
        swaps = {"object_unions": ["circle", "rect", "note"], "one_of": ["cat", "dog", "puppy"],
                 "nested_unions": ["cat", "dog", "black", "white", "a", "b"],
                 "decided_unions": ["get_weather", "search", "now", "today"]}
        if name in swaps:  # each discriminator value in another's place
            # (the later schemas have their values in several places: a dozen instances suffice)
            for value in values[:12] if name in ("nested_unions", "decided_unions") else values:
                for other in literal_swaps(value, swaps[name]):
                    data = json.dumps(other).encode("utf-8")
                    if not valid(validator, data) and data not in bad:
                        bad.append(data)
        out.append({"name": name, "schema": schema, "valid": [d.hex() for d in good],
                    "invalid": [d.hex() for d in bad]})
    json.dump({"generator": "tools/reference/make_json_schema_cases.py",
               "python": sys.version.split()[0],
               "jsonschema": __import__("importlib.metadata").metadata.version("jsonschema"),
               "schemas": out}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
