"""Checks deploy/: the nginx config renders and passes `nginx -t`; the Kubernetes manifests parse and hold what
docs/deploy.md promises (GPU workers, probes on /health, Redis with its append-only file, grace periods above
--shutdown-grace, the KEDA trigger on the queue's stream and group); every serve flag they use exists.
They are never applied to a cluster here. usage: check_deploy.py ERNIE_IMAGE_BINARY"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def main():
    binary = sys.argv[1]
    try:
        import yaml
    except ImportError:
        print("SKIP: python3-yaml is not installed")
        return 0
    # nginx: the loopback config that the shared-queue test runs, from the production locations.
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["bash", f"{ROOT}/deploy/nginx/render.sh", d, "18080", "127.0.0.1:1", "127.0.0.1:2"], check=True)
        conf = open(f"{d}/nginx.conf").read()
        check("include " + f"{ROOT}/deploy/nginx/ernie-image.conf" in conf, "render.sh includes ernie-image.conf")
        if subprocess.run(["which", "nginx"], capture_output=True).returncode == 0:
            t = subprocess.run(["nginx", "-t", "-p", d, "-e", f"{d}/error.log", "-c", f"{d}/nginx.conf"],
                               capture_output=True, text=True)
            check(t.returncode == 0, f"nginx -t: {t.stderr}")
    locs = open(f"{ROOT}/deploy/nginx/ernie-image.conf").read()
    for want in ("proxy_buffering off", "proxy_read_timeout 1h", "client_max_body_size 16m", "proxy_set_header Connection \"\""):
        check(want in locs, f"ernie-image.conf has {want}")

    docs = {}
    for name in sorted(os.listdir(f"{ROOT}/deploy/k8s")):
        with open(f"{ROOT}/deploy/k8s/{name}") as f:
            for doc in yaml.safe_load_all(f):
                if doc and "kind" in doc:
                    docs[(doc["kind"], doc["metadata"]["name"])] = doc
    try:
        help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        help_text = ""
    if "--queue" not in help_text:  # e.g. /bin/true, or a build without Redis
        print(f"note: {binary} serve --help names no --queue: the manifests' flags are not checked against it")
        help_text = None

    def pod(kind, name):
        d = docs.get((kind, name))
        check(d is not None, f"{kind} {name} exists")
        return d["spec"]["template"]["spec"] if d else {"containers": [{}]}

    def grace_of(args):
        return float(args[args.index("--shutdown-grace") + 1]) if "--shutdown-grace" in args else 30.0

    for name, role in (("ernie-api", "api"), ("ernie-worker", "worker")):
        spec = pod("Deployment", name)
        c = spec["containers"][0]
        args = c.get("args", [])
        check(args[:1] == ["serve"] and args[args.index("--role") + 1] == role, f"{name}: serve --role {role}")
        check("redis://redis:6379" in args, f"{name}: --queue redis://redis:6379")
        for a in args if help_text is not None else []:
            if a.startswith("--"):
                check(a in help_text, f"{name}: serve has no flag {a}")
        check(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/health", f"{name}: readiness on /health")
        check("livenessProbe" in c, f"{name}: a liveness probe")
        check(spec.get("terminationGracePeriodSeconds", 30) > grace_of(args),
              f"{name}: terminationGracePeriodSeconds above --shutdown-grace")
        gpu = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        check((gpu == 1) == (role == "worker"), f"{name}: nvidia.com/gpu {gpu}")
    redis = pod("StatefulSet", "redis")["containers"][0]["args"]
    check(redis[redis.index("--appendonly") + 1] == "yes", "Redis runs with its append-only file")
    so = docs.get(("ScaledObject", "ernie-worker"), {}).get("spec", {})
    check(so.get("scaleTargetRef", {}).get("name") == "ernie-worker", "KEDA scales the worker Deployment")
    trig = (so.get("triggers") or [{}])[0]
    md = trig.get("metadata", {})
    check(trig.get("type") == "redis-streams" and md.get("stream") == "ernie:jobs" and md.get("consumerGroup") == "workers",
          f"KEDA trigger on ernie:jobs / workers: {trig}")
    check(any(k in md for k in ("streamLength", "pendingEntriesCount", "lagCount")), "KEDA trigger has a target")
    kust = yaml.safe_load(open(f"{ROOT}/deploy/k8s/kustomization.yaml"))
    check(sorted(kust["resources"]) == sorted(n for n in os.listdir(f"{ROOT}/deploy/k8s") if n != "kustomization.yaml"),
          "kustomization.yaml lists every manifest")
    if failures:
        print(f"deploy/k8s: {len(failures)} checks failed")
        return 1
    print("deploy/k8s: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
