#!/usr/bin/env python3
"""Offline check of deploy/: yamllint (Debian yamllint)
for syntax and style, then python3-yaml for the structure the API server
would refuse: apiVersion/kind/metadata, a DaemonSet's selector matching its
template labels, every container with a name, image and command, every
volumeMount naming a declared volume, hostPID for the broker, the library
installed by rename, the CDI spec written into /etc/cdi after it. Exit 77
(CTest SKIP) with the reason when yamllint or PyYAML is missing (`make deps`
installs both)."""
import shutil
import subprocess
import sys
from pathlib import Path

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is missing (apt-get install python3-yaml)")
    sys.exit(77)

deploy = Path(sys.argv[1]) / "deploy"
if not shutil.which("yamllint"):
    print("SKIP: yamllint is missing (apt-get install yamllint)")
    sys.exit(77)
files = sorted(deploy.glob("*.yaml"))
rc = subprocess.call(["yamllint", "-d", "{extends: default, rules: {line-length: {max: 110}}}"]
                     + [str(f) for f in files])
errors = [] if rc == 0 else ["yamllint reported problems (above)"]


def check_daemonset(d):
    spec = d["spec"]
    sel = spec["selector"]["matchLabels"]
    labels = spec["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in sel.items()):
        errors.append("DaemonSet selector does not match its template labels")
    pod = spec["template"]["spec"]
    vols = {v["name"] for v in pod.get("volumes", [])}
    names = []
    for c in pod.get("initContainers", []) + pod["containers"]:
        names.append(c.get("name"))
        for key in ("name", "image", "command"):
            if not c.get(key):
                errors.append(f"container {c.get('name')}: no {key}")
        for m in c.get("volumeMounts", []):
            if m["name"] not in vols:
                errors.append(f"container {c['name']}: mounts undeclared volume {m['name']}")
    for want in ("install-lib", "cdi-spec", "broker", "exporter"):
        if want not in names:
            errors.append(f"DaemonSet has no {want} container")
    if not pod.get("hostPID"):
        errors.append("the broker needs hostPID: true (docs/broker.md)")
    install = " ".join(pod["initContainers"][0]["command"])
    if "mv -f" not in install:
        errors.append("install-lib must install by rename (HAMi#753)")
    inits = [c["name"] for c in pod["initContainers"]]
    if "cdi-spec" in inits and inits.index("cdi-spec") < inits.index("install-lib"):
        errors.append("cdi-spec must run after install-lib (the spec mounts the library)")
    for c in pod["initContainers"]:
        cmd = " ".join(c["command"])
        if c["name"] == "cdi-spec" and ("cushare cdi" not in cmd or "--output /etc/cdi/" not in cmd):
            errors.append("cdi-spec must run `cushare cdi ... --output /etc/cdi/...`")


for f in files:
    for doc in yaml.safe_load_all(f.read_text()):
        if doc is None:
            continue
        if f.name == "hami-values.yaml":
            dp = doc.get("devicePlugin", {})
            if dp.get("deviceMemoryScaling") != 1:
                errors.append("hami-values.yaml: deviceMemoryScaling must be 1")
            if not dp.get("image", {}).get("repository") or not dp.get("image", {}).get("tag"):
                errors.append("hami-values.yaml: devicePlugin.image must name the image that "
                              "bundles libcushare.so (HAMi's plugin re-copies its own at start)")
            continue
        for key in ("apiVersion", "kind", "metadata"):
            if key not in doc:
                errors.append(f"{f.name}: a document without {key}")
        if doc.get("kind") == "DaemonSet":
            check_daemonset(doc)
for e in errors:
    print("FAIL:", e)
print(f"{len(files)} files checked: {'ok' if not errors else 'FAILED'}")
sys.exit(1 if errors else 0)
