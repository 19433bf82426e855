#!/usr/bin/env python3
"""The podman run flags of a Kubernetes Pod manifest (examples/kubernetes/).

podman 4.3's `kube play` ignores `securityContext.seccompProfile` (it reads
only the old seccomp annotations) and its pod's infra container does not start
under this machine's rlimits, so scripts/test-containers runs the manifest with
`podman run` instead, with every flag DERIVED from the manifest here (never
written a second time by hand). A field this script does not know is an error,
so the manifest cannot say something the test ignores.

  kube.py podman-args MANIFEST --work DIR [--seccomp-dir DIR] [--localhost PROFILE]
      one podman flag per line: the pod's and container's securityContext,
      env, workingDir, volumes (configMap: written under DIR and mounted
      read-only; emptyDir: a tmpfs), the seccomp profile (RuntimeDefault:
      Docker's and containerd's default, i.e. the Localhost profile without
      its `capsule:` rules; Localhost: the file of that name in --seccomp-dir).
      --localhost PROFILE switches the pod to `type: Localhost` with that
      profile, as the manifest's comment tells a cluster to.
  kube.py command MANIFEST     the container's command + args, one per line
  kube.py runtimedefault PROFILE OUT
      OUT = PROFILE without the rules whose comment starts with `capsule:`
"""
import json
import os
import sys

import yaml


def die(msg):
    sys.exit(f"kube.py: {msg}")


def load(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    pods = [d for d in docs if d.get("kind") == "Pod"]
    if len(pods) != 1:
        die(f"{path}: expected exactly one Pod, found {len(pods)}")
    maps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
    other = [d.get("kind") for d in docs if d.get("kind") not in ("Pod", "ConfigMap")]
    if other:
        die(f"{path}: kinds this test cannot run: {other}")
    spec = pods[0]["spec"]
    if len(spec.get("containers", [])) != 1 or spec.get("initContainers"):
        die("expected one container and no init containers")
    return spec, maps


def known(d, keys, where):
    extra = set(d) - set(keys)
    if extra:
        die(f"{where}: fields the test does not map to podman: {sorted(extra)}")


def runtimedefault(profile):
    d = json.load(open(profile))
    d["syscalls"] = [s for s in d["syscalls"] if not s.get("comment", "").startswith("capsule:")]
    return d


def podman_args(path, work, seccomp_dir, localhost):
    spec, maps = load(path)
    os.makedirs(work, exist_ok=True)
    known(spec, ["restartPolicy", "automountServiceAccountToken", "securityContext", "containers",
                 "volumes"], "spec")
    c = spec["containers"][0]
    known(c, ["name", "image", "command", "args", "workingDir", "env", "securityContext",
              "volumeMounts"], "container")
    psc = dict(spec.get("securityContext") or {})
    csc = dict(c.get("securityContext") or {})
    known(psc, ["runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"], "pod securityContext")
    known(csc, ["allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities", "runAsUser",
                "runAsGroup", "runAsNonRoot", "seccompProfile", "procMount"],
          "container securityContext")
    sc = {**psc, **csc}  # the container's fields win, as in Kubernetes
    if localhost:
        sc["seccompProfile"] = {"type": "Localhost", "localhostProfile": localhost}
    args = []
    uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
    if sc.get("runAsNonRoot") and (uid is None or int(uid) == 0):
        die("runAsNonRoot needs a non-zero runAsUser here (the image's user is root)")
    if uid is not None:
        args.append(f"--user={uid}:{gid if gid is not None else uid}")
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if sc.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    caps = sc.get("capabilities") or {}
    known(caps, ["drop", "add"], "capabilities")
    for cap in caps.get("drop", []):
        args.append(f"--cap-drop={cap}")
    for cap in caps.get("add", []):
        args.append(f"--cap-add={cap}")
    if sc.get("procMount") == "Unmasked":
        args += ["--security-opt", "unmask=ALL"]
    prof = sc.get("seccompProfile") or {"type": "RuntimeDefault"}
    kind = prof.get("type")
    if kind == "RuntimeDefault":
        out = os.path.join(work, "runtimedefault.json")
        base = os.path.join(seccomp_dir, "capsule-seccomp.json")
        json.dump(runtimedefault(base), open(out, "w"))
        args += ["--security-opt", f"seccomp={out}"]
    elif kind == "Localhost":
        args += ["--security-opt",
                 f"seccomp={os.path.join(seccomp_dir, os.path.basename(prof['localhostProfile']))}"]
    elif kind == "Unconfined":
        args += ["--security-opt", "seccomp=unconfined"]
    else:
        die(f"seccompProfile type {kind!r}")
    for e in c.get("env", []):
        known(e, ["name", "value"], "env")
        args += ["-e", f"{e['name']}={e.get('value', '')}"]
    if c.get("workingDir"):
        args += ["-w", c["workingDir"]]
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        known(m, ["name", "mountPath", "readOnly"], "volumeMount")
        v = vols.get(m["name"]) or die(f"volume {m['name']} is not declared")
        known(v, ["name", "configMap", "emptyDir"], f"volume {m['name']}")
        if "emptyDir" in v:
            known(v["emptyDir"] or {}, ["medium", "sizeLimit"], "emptyDir")
            size = (v["emptyDir"] or {}).get("sizeLimit")
            opts = "rw,exec,mode=1777" + (f",size={size}" if size else "")
            args += ["--tmpfs", f"{m['mountPath']}:{opts}"]
        elif "configMap" in v:
            cm = maps.get(v["configMap"]["name"]) or die(f"ConfigMap {v['configMap']['name']} missing")
            d = os.path.join(work, "configmap-" + m["name"])
            os.makedirs(d, exist_ok=True)
            for k, text in cm.get("data", {}).items():
                with open(os.path.join(d, k), "w") as f:
                    f.write(text)
                os.chmod(os.path.join(d, k), 0o644)
            os.chmod(d, 0o755)
            args += ["-v", f"{d}:{m['mountPath']}" + (":ro" if m.get("readOnly", True) else "")]
    return args


def command(path):
    spec, _ = load(path)
    c = spec["containers"][0]
    return list(c.get("command", [])) + list(c.get("args", []))


def main(argv):
    if len(argv) >= 2 and argv[0] == "podman-args":
        path = argv[1]
        work = seccomp_dir = localhost = None
        rest = argv[2:]
        while rest:
            k, v, rest = rest[0], rest[1], rest[2:]
            if k == "--work":
                work = v
            elif k == "--seccomp-dir":
                seccomp_dir = v
            elif k == "--localhost":
                localhost = v
            else:
                die(f"unknown option {k}")
        seccomp_dir = seccomp_dir or os.path.dirname(os.path.abspath(path))
        print("\n".join(podman_args(path, work or die("--work DIR"), seccomp_dir, localhost)))
    elif len(argv) == 2 and argv[0] == "command":
        print("\n".join(command(argv[1])))
    elif len(argv) == 3 and argv[0] == "runtimedefault":
        json.dump(runtimedefault(argv[1]), open(argv[2], "w"))
    else:
        die(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
