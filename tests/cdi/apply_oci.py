#!/usr/bin/env python3
"""Applies one CDI device to an OCI runtime config, as a CDI-aware runtime
(podman, containerd, CRI-O) does before it calls crun or runc: for use
where only crun is installed (the GPU machine may lack podman).

    apply_oci.py SPEC KIND=NAME CONFIG_JSON

containerEdits of the spec and of the device, in that order: env entries
replace the config's entries of the same name or are appended; mounts are
appended (type bind unless given); deviceNodes and hooks are refused, as
cushare's specs never carry them and half-applying them would be wrong."""
import json
import sys

spec_path, device, config_path = sys.argv[1:4]
spec = json.load(open(spec_path))
kind, _, name = device.partition("=")
if spec["kind"] != kind:
    sys.exit(f"apply_oci: {spec_path} is kind {spec['kind']}, not {kind}")
devs = [d for d in spec["devices"] if d["name"] == name]
if len(devs) != 1:
    sys.exit(f"apply_oci: {spec_path} has no device {name}")
config = json.load(open(config_path))
proc = config.setdefault("process", {})
for edits in (spec.get("containerEdits", {}), devs[0]["containerEdits"]):
    for key in edits:
        if key not in ("env", "mounts"):
            sys.exit(f"apply_oci: containerEdits.{key} is not supported here")
    env = proc.setdefault("env", [])
    for e in edits.get("env", []):
        var = e.split("=", 1)[0] + "="
        env[:] = [x for x in env if not x.startswith(var)] + [e]
    for m in edits.get("mounts", []):
        config.setdefault("mounts", []).append({
            "destination": m["containerPath"], "source": m["hostPath"],
            "type": m.get("type", "bind"), "options": m.get("options", ["rbind"])})
json.dump(config, open(config_path, "w"), indent=1)
