#!/usr/bin/env python3
"""Checks CDI spec files against tests/cdi/cdi-schema.json with the
jsonschema package (Debian python3-jsonschema, installed by `make deps`), then
what SPEC.md says beyond the schema: absolute container paths, one device
per name. validate.py SCHEMA SPEC... exits 0 when every SPEC is valid, 1
naming the first problem of each invalid one, 77 (CTest SKIP) without
jsonschema."""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("SKIP: python3-jsonschema is missing (apt-get install python3-jsonschema)")
    sys.exit(77)

schema = json.load(open(sys.argv[1]))
jsonschema.Draft7Validator.check_schema(schema)
validator = jsonschema.Draft7Validator(schema)
bad = 0
for path in sys.argv[2:]:
    spec = json.load(open(path))
    problems = [f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}"
                for e in validator.iter_errors(spec)]
    if not problems:
        names = [d["name"] for d in spec["devices"]]
        if len(set(names)) != len(names):
            problems.append("devices: a name appears twice")
        for d in spec["devices"]:
            for m in d["containerEdits"].get("mounts", []):
                if not m["containerPath"].startswith("/"):
                    problems.append(f"{d['name']}: containerPath {m['containerPath']} is relative")
    if problems:
        bad += 1
        print(f"{path}: INVALID: {problems[0]}")
    else:
        print(f"{path}: valid CDI {spec['cdiVersion']} spec, kind {spec['kind']}, "
              f"devices {', '.join(d['name'] for d in spec['devices'])}")
sys.exit(1 if bad else 0)
