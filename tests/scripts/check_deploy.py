"""Checks deploy/ without running it (test_deploy_files.sh runs nginx): the nginx locations say what they must;
the Kubernetes manifests parse and hold what docs/deploy.md promises (GPU workers, readiness on /health and
liveness not on it, Redis with its append-only file fsynced always and no eviction, grace periods above
--shutdown-grace, the KEDA trigger on the queue's stream length, Services and the Ingress pointing at ports that
exist); every serve flag they use exists (when the binary has --queue). They are never applied to a cluster
here. usage: check_deploy.py ERNIE_IMAGE_BINARY"""
import os
import subprocess
import sys

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
    # nginx runs in test_deploy_files.sh; here only what the locations must say.
    locs = open(f"{ROOT}/deploy/nginx/ernie-image.conf").read()
    for want in ("proxy_buffering off", "proxy_cache off", "proxy_read_timeout 1h", "client_max_body_size 16m",
                 "proxy_set_header Connection \"\"", "proxy_next_upstream error timeout http_502;"):
        check(want in locs, f"ernie-image.conf has {want}")
    directives = "\n".join(line.split("#")[0] for line in locs.splitlines())
    check("non_idempotent" not in directives and "proxy_ignore_headers" not in directives,
          "ernie-image.conf neither resends POSTs nor ignores X-Accel-Buffering")

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
        # /health is 503 while Redis is down: liveness and startup must not use it, or an outage restarts pods.
        for probe in ("livenessProbe", "startupProbe"):
            if probe in c:
                check(c[probe].get("httpGet", {}).get("path") != "/health", f"{name}: {probe} not on /health")
        check(c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/metrics", f"{name}: liveness on /metrics")
        ports = {p.get("name") for p in c.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in c:
                check(c[probe].get("httpGet", {}).get("port") in ports, f"{name}: {probe} on a named container port")
        check(spec.get("terminationGracePeriodSeconds", 30) > grace_of(args),
              f"{name}: terminationGracePeriodSeconds above --shutdown-grace")
        gpu = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        check((gpu == 1) == (role == "worker"), f"{name}: nvidia.com/gpu {gpu}")
    redis = pod("StatefulSet", "redis")["containers"][0]["args"]

    def arg(args, flag):
        return args[args.index(flag) + 1] if flag in args else None

    check(arg(redis, "--appendonly") == "yes", "Redis runs with its append-only file")
    check(arg(redis, "--appendfsync") == "always", "Redis fsyncs every write (docs/scale-out.md, Redis restarts)")
    check(arg(redis, "--maxmemory-policy") == "noeviction", "Redis never evicts a job")
    so = docs.get(("ScaledObject", "ernie-worker"), {}).get("spec", {})
    check(so.get("scaleTargetRef", {}).get("name") == "ernie-worker", "KEDA scales the worker Deployment")
    check(0 < so.get("minReplicaCount", 0) <= so.get("maxReplicaCount", 0), "KEDA: 1 <= min <= max replicas")
    trig = (so.get("triggers") or [{}])[0]
    md = trig.get("metadata", {})
    check(trig.get("type") == "redis-streams" and md.get("stream") == "ernie:jobs", f"KEDA trigger on ernie:jobs: {trig}")
    # KEDA's redis-streams scaler reads XLEN only without consumerGroup; with it, XPENDING or the lag (keda.yaml).
    check("streamLength" in md and "consumerGroup" not in md, "KEDA scales on the stream's length (XLEN)")
    worker_args = pod("Deployment", "ernie-worker")["containers"][0].get("args", [])
    check(f"redis://{md.get('address')}" == arg(worker_args, "--queue"), "KEDA reads the workers' Redis")
    # Services and the Ingress point at pods and ports that exist.
    pods = [d for d in docs.values() if d["kind"] in ("Deployment", "StatefulSet")]
    for (kind, name), d in docs.items():
        if kind != "Service":
            continue
        sel = d["spec"].get("selector", {})
        match = [p for p in pods if sel and sel.items() <= p["spec"]["template"]["metadata"]["labels"].items()]
        check(len(match) == 1, f"Service {name} selects one workload")
        for p in d["spec"].get("ports", []):
            names = {q.get("name") for m in match for c in m["spec"]["template"]["spec"]["containers"]
                     for q in c.get("ports", [])}
            check(p.get("targetPort") in names, f"Service {name}: targetPort {p.get('targetPort')} exists")
    for (kind, name), d in docs.items():
        if kind == "Deployment" or kind == "StatefulSet":
            check(d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items(),
                  f"{kind} {name}: selector matches its pods")
        if kind == "Ingress":
            for rule in d["spec"]["rules"]:
                for path in rule["http"]["paths"]:
                    svc = path["backend"]["service"]
                    target = docs.get(("Service", svc["name"]), {}).get("spec", {})
                    check(svc["port"].get("name") in {p.get("name") for p in target.get("ports", [])},
                          f"Ingress {name}: Service {svc['name']} port {svc['port']}")
            ann = d["metadata"].get("annotations", {})
            check(ann.get("nginx.ingress.kubernetes.io/proxy-buffering") == "off", f"Ingress {name}: proxy-buffering off")
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
