#!/usr/bin/python3
"""Test helper for tests/grammar (not part of weir): generates JSON Schemas and checks the
outputs the C suite produced under constraints, independently of weir's code.

  grammar_check.py gen-schemas COUNT SEED   one schema per line (JSON)
  grammar_check.py check FILE              FILE: one {"kind", "constraint", "output"} per line

check validates every output: a schema's with python3-jsonschema (Draft 2020-12) and format
checks written here (date, time, date-time, uuid, email, ipv4); a regex's with Python's
re.fullmatch; a choice's by membership; the EBNF cases by their own checks. It prints each
failure and exits 1 when there is any."""

import datetime
import ipaddress
import json
import random
import re
import sys
import uuid

import jsonschema

# ---- schema generation -------------------------------------------------------------------

PATTERNS = [
    "^[a-z]{2,6}$", "^[A-Z][a-z]+$", "^\\d{3}-\\d{4}$", "^(foo|bar)+$", "^[0-9a-f]{8}$",
    "^x[^\"\\\\]{0,3}y$", "^a\"b\\\\c$", "^\\w+@\\w+\\.com$", "^(\\+1 )?\\d{3}$", "^é+ñ?$",
    "^[\\u0430-\\u044f]{1,4}$", "^(ab|cd){1,3}e?$", "^\\s?[.]{2}$", "^[^a-z]{1,3}$",
]
FORMATS = ["date", "time", "date-time", "uuid", "email", "ipv4"]
NAMES = ["id", "name", "value", "items", "x", "a b", "quote\"d", "back\\slash", "ünï", "日本",
         "n1", "kind", "tags", "meta", "emoji😀", "tab\tkey", ""]


def gen_enum_value(r, depth=0):
    k = r.randrange(7 if depth < 2 else 5)
    if k == 0:
        return r.choice(["red", "green", "a \"q\"", "back\\", "ü", "", "multi\nline", "日本"])
    if k == 1:
        return r.choice([0, 1, -7, 42, 1000000, 2.5, -0.125, 1e20])
    if k == 2:
        return r.choice([True, False])
    if k == 3:
        return None
    if k == 4:
        return r.choice(["x", 3, "y z"])
    if k == 5:
        return {r.choice(["k", "v"]): gen_enum_value(r, depth + 1)}
    return [gen_enum_value(r, depth + 1) for _ in range(r.randrange(3))]


def gen_string(r):
    s = {"type": "string"}
    k = r.randrange(4)
    if k == 1:
        lo = r.randrange(4)
        s["minLength"] = lo
        s["maxLength"] = lo + r.randrange(6)
    elif k == 2:
        s["pattern"] = r.choice(PATTERNS)
    elif k == 3:
        s["format"] = r.choice(FORMATS)
    return s


def gen_bound(r, integer):
    if integer:
        return r.choice([-1000, -5, -1, 0, 1, 3, 10, 99, 12345678901])
    return r.choice([-1000.5, -2.25, -1, -0.1, 0, 0.1, 0.5, 1, 3.75, 10, 1e3, 123.456])


def gen_number(r, integer):
    s = {"type": "integer" if integer else "number"}
    k = r.randrange(5)
    if k == 0:
        return s
    lo, hi = sorted([gen_bound(r, integer), gen_bound(r, integer)])
    if k in (1, 3):
        s["minimum" if r.random() < 0.5 else "exclusiveMinimum"] = lo
    if k in (2, 3):
        s["maximum" if r.random() < 0.5 else "exclusiveMaximum"] = hi
    if k == 4:
        s["minimum"] = lo
        s["maximum"] = hi
    # an exclusive range needs room: widen a degenerate one
    a = s.get("minimum", s.get("exclusiveMinimum"))
    b = s.get("maximum", s.get("exclusiveMaximum"))
    if a is not None and b is not None and b - a < 2:
        for key in ("maximum", "exclusiveMaximum"):
            if key in s:
                s[key] = a + 2
    return s


def gen_object(r, depth, defs):
    props = {}
    for _ in range(r.randrange(5)):
        props[r.choice(NAMES)] = gen(r, depth + 1, defs)
    s = {"type": "object"}
    if props or r.random() < 0.5:
        s["properties"] = props
    names = list(props)
    req = [n for n in names if r.random() < 0.6]
    if req:
        s["required"] = req
    k = r.randrange(5)
    if k == 0:
        s["additionalProperties"] = False
    elif k == 1:
        s["additionalProperties"] = True
    elif k == 2 and depth < 3:
        s["additionalProperties"] = gen(r, depth + 1, defs)
    return s


def gen_array(r, depth, defs):
    s = {"type": "array"}
    k = r.randrange(4)
    if k != 1:
        s["items"] = gen(r, depth + 1, defs)
    if k >= 2:
        s["prefixItems"] = [gen(r, depth + 1, defs) for _ in range(1 + r.randrange(3))]
        if k == 3:
            s["items"] = False
    if r.random() < 0.5:
        s["minItems"] = r.randrange(3)
    if r.random() < 0.7:
        s["maxItems"] = s.get("minItems", 0) + r.randrange(4)
    return s


def gen_oneof(r, depth, defs):
    # Branches with distinct types, so that a value matches exactly one of them.
    types = r.sample(["string", "integer", "boolean", "null", "array"], 2 + r.randrange(2))
    out = []
    for t in types:
        if t == "string":
            out.append(gen_string(r))
        elif t == "integer":
            out.append(gen_number(r, True))
        elif t == "array":
            out.append({"type": "array", "items": gen(r, depth + 1, defs), "maxItems": 2})
        else:
            out.append({"type": t})
    return {"oneOf": out}


def gen(r, depth, defs):
    if depth >= 4:
        k = r.choice(["string", "integer", "boolean", "null", "enum"])
    else:
        k = r.choice(["string", "string", "integer", "number", "boolean", "null", "enum",
                      "const", "object", "object", "array", "anyOf", "oneOf", "ref",
                      "typearray", "allOf", "any"])
    if k == "string":
        return gen_string(r)
    if k in ("integer", "number"):
        return gen_number(r, k == "integer")
    if k in ("boolean", "null"):
        return {"type": k}
    if k == "enum":
        vals = []
        for _ in range(1 + r.randrange(4)):
            v = gen_enum_value(r)
            if v not in vals:
                vals.append(v)
        return {"enum": vals}
    if k == "const":
        return {"const": gen_enum_value(r), "description": "a constant"}
    if k == "object":
        return gen_object(r, depth, defs)
    if k == "array":
        return gen_array(r, depth, defs)
    if k == "anyOf":
        return {"anyOf": [gen(r, depth + 1, defs) for _ in range(2 + r.randrange(2))]}
    if k == "oneOf":
        return gen_oneof(r, depth, defs)
    if k == "ref":
        name = "d%d" % len(defs)
        defs[name] = None  # reserved first: a definition may refer to itself
        if r.random() < 0.3:
            defs[name] = {"type": "object",
                          "properties": {"v": {"type": "integer"},
                                         "next": {"anyOf": [{"$ref": "#/$defs/" + name},
                                                            {"type": "null"}]}},
                          "required": ["v", "next"], "additionalProperties": False}
        else:
            defs[name] = gen(r, depth + 1, defs)
        return {"$ref": "#/$defs/" + name}
    if k == "typearray":
        return {"type": r.sample(["string", "integer", "boolean", "null"], 2)}
    if k == "allOf":
        a, b = r.sample(NAMES[:6], 2)
        return {"allOf": [{"type": "object", "properties": {a: gen_string(r)}, "required": [a]},
                          {"properties": {b: {"type": "boolean"}}, "required": [b]}]}
    return {}


def gen_schema(r):
    defs = {}
    s = gen(r, 0, defs)
    if defs:
        s = dict(s)
        s["$defs"] = defs
    return s


# ---- checks --------------------------------------------------------------------------------

def check_date(s):
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", s)) and bool(datetime.date.fromisoformat(s))


def check_time(s):
    m = re.fullmatch(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))", s)
    if not m:
        return False
    h, mi, se = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if h > 23 or mi > 59 or se > 60:
        return False
    if m.group(6) and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return True


def check_date_time(s):
    parts = s.split("T")
    return len(parts) == 2 and check_date(parts[0]) and check_time(parts[1])


def check_uuid(s):
    if not re.fullmatch(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}", s):
        return False
    uuid.UUID(s)
    return True


def check_email(s):
    local, at, domain = s.rpartition("@")
    if not at or not local or "@" in local or " " in s:
        return False
    labels = domain.split(".")
    return len(labels) >= 2 and all(labels) and not local.startswith(".")


def check_ipv4(s):
    try:
        ipaddress.IPv4Address(s)
        return True
    except ValueError:
        return False


def strings_only(fn):
    # A format constrains strings only; other instances pass (as the specification says).
    return lambda x: fn(x) if isinstance(x, str) else True


FORMAT_CHECKER = jsonschema.FormatChecker(formats=())
for _name, _fn in [("date", check_date), ("time", check_time), ("date-time", check_date_time),
                   ("uuid", check_uuid), ("email", check_email), ("ipv4", check_ipv4)]:
    FORMAT_CHECKER.checks(_name, raises=(ValueError,))(strings_only(_fn))


def no_constants(name):
    raise ValueError("not JSON: " + name)


def check_arith(out):
    if not re.fullmatch(r"[0-9+\-*/() ]+", out):
        return "characters outside the grammar"
    depth = 0
    for ch in out:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return "unbalanced parentheses"
    if depth:
        return "unbalanced parentheses"
    import ast
    ast.parse(out, mode="eval")
    return None


def check_one(kind, constraint, out):
    """None when out satisfies the constraint, else why not."""
    if kind in ("schema", "json_object"):
        value = json.loads(out, parse_constant=no_constants)
        if kind == "json_object":
            return None if isinstance(value, dict) else "not an object"
        jsonschema.Draft202012Validator(constraint, format_checker=FORMAT_CHECKER).validate(value)
        return None
    if kind == "regex":
        return None if re.fullmatch(constraint, out) else "no full match"
    if kind == "choice":
        return None if out in constraint else "not one of the choices"
    if kind == "ebnf-arith":
        return check_arith(out)
    if kind == "ebnf-json":
        json.loads(out, parse_constant=no_constants)
        return None
    return "unknown kind " + kind


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "gen-schemas":
        r = random.Random(int(sys.argv[3]))
        for _ in range(int(sys.argv[2])):
            print(json.dumps(gen_schema(r), ensure_ascii=False))
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        failures = total = 0
        with open(sys.argv[2], encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                total += 1
                try:
                    why = check_one(rec["kind"], rec["constraint"], rec["output"])
                except Exception as e:  # a parse or validation error is a failure
                    why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])
                if why:
                    failures += 1
                    if failures <= 20:
                        print("FAIL %s %s\n  output: %r\n  %s" % (
                            rec["kind"], json.dumps(rec["constraint"], ensure_ascii=False)[:400],
                            rec["output"][:400], why))
        print("checked %d outputs, %d failures" % (total, failures))
        return 1 if failures else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
