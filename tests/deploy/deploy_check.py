"""Checks deploy/ without Docker or a cluster (issue 31's checks that this machine can run):

- Prometheus: `promtool check config` and `promtool check rules` on the Compose stack's files.
- Every YAML file parses; each Kustomization's resources and patches exist; the Deployment has
  readiness on /ready, liveness on /health and a termination grace period longer than its
  drain time; the GPU overlay asks for a GPU; the InferencePool targets the HTTP port and the
  endpoint picker is told ridgeserve's metric names.
- The Grafana dashboard is what deploy/compose/grafana/make_dashboard.py writes.
- Every ridgeserve metric the dashboard, the alerts, the autoscaler, the adapter and the endpoint
  picker name is exported by the real server (started here on the default model).
- The Dockerfiles install packages only through scripts/install_deps.sh (the one list), run as
  a non-root user and have a HEALTHCHECK on /health; the entry point turns RIDGESERVE_* variables
  into flags without repeating one the arguments give.
- With the validators scripts/install_deps.sh puts in .tools/ (from PyPI): the overlays and the
  gateway rendered by `kubectl kustomize` and validated strictly against the Kubernetes schemas,
  and the Dockerfiles linted by hadolint.

    python3 tests/deploy/deploy_check.py --repo . --server build/server/ridgeserve
"""
import argparse
import json
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def load_yaml_documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def check_prometheus(deploy):
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool not installed (Debian package prometheus): Prometheus files unchecked")
        return
    for args in (["check", "config", "prometheus/prometheus.yml"],
                 ["check", "rules", "prometheus/alerts.yml"]):
        run = subprocess.run([promtool] + args, cwd=deploy / "compose", capture_output=True,
                             text=True)
        check(run.returncode == 0, f"promtool {' '.join(args)}: {run.stdout}{run.stderr}")


def check_kustomizations(deploy):
    documents = {}
    for path in sorted((deploy / "kubernetes").rglob("*.yaml")):
        documents[path] = load_yaml_documents(path)
    for path, docs in documents.items():
        for doc in docs:
            if doc.get("kind") != "Kustomization":
                continue
            for entry in doc.get("resources", []):
                check((path.parent / entry).exists(), f"{path}: resource {entry} is missing")
            for patch in doc.get("patches", []):
                check((path.parent / patch["path"]).exists(), f"{path}: patch {patch} is missing")
    return documents


def find(documents, kind, name=None):
    for path, docs in documents.items():
        for doc in docs:
            if doc.get("kind") == kind and (name is None or doc["metadata"]["name"] == name):
                yield path, doc


def check_kubernetes(deploy, documents):
    base = deploy / "kubernetes" / "base" / "deployment.yaml"
    deployment = load_yaml_documents(base)[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    check(container["readinessProbe"]["httpGet"]["path"] == "/ready", "readiness is not /ready")
    check(container["livenessProbe"]["httpGet"]["path"] == "/health", "liveness is not /health")
    drain = int(next(e["value"] for e in container["env"] if e["name"] == "RIDGESERVE_DRAIN_SECONDS"))
    check(pod["terminationGracePeriodSeconds"] > drain,
          "the termination grace period is not longer than the drain time")
    check(pod["securityContext"]["runAsNonRoot"] is True, "the pod may run as root")
    gpu = load_yaml_documents(deploy / "kubernetes" / "overlays" / "gpu" / "gpu-patch.yaml")[0]
    limits = gpu["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    check(limits.get("nvidia.com/gpu") == "1", "the GPU overlay asks for no GPU")
    pools = list(find(documents, "InferencePool"))
    check(len(pools) == 1, "no InferencePool")
    for _, pool in pools:
        check(pool["spec"]["targetPorts"][0]["number"] == 8000, "the pool does not target :8000")
    hpas = [doc for _, doc in find(documents, "HorizontalPodAutoscaler")]
    check(len(hpas) == 1 and hpas[0]["spec"]["scaleTargetRef"]["name"] == "ridgeserve",
          "no autoscaler of the ridgeserve Deployment")
    for kind in ("Service", "PodDisruptionBudget", "ServiceMonitor"):
        check(any(True for _ in find(documents, kind)), f"no {kind}")


def check_dashboard(deploy):
    grafana = deploy / "compose" / "grafana"
    committed = (grafana / "dashboards" / "ridgeserve.json").read_text()
    json.loads(committed)
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp)
        shutil.copy(grafana / "make_dashboard.py", copy)
        (copy / "dashboards").mkdir()
        subprocess.run([sys.executable, str(copy / "make_dashboard.py")], check=True)
        check((copy / "dashboards" / "ridgeserve.json").read_text() == committed,
              "dashboards/ridgeserve.json is not what make_dashboard.py writes")


def named_metrics(deploy):
    texts = [(deploy / "compose" / "grafana" / "dashboards" / "ridgeserve.json").read_text(),
             (deploy / "compose" / "prometheus" / "alerts.yml").read_text()]
    texts += [p.read_text() for p in (deploy / "kubernetes").rglob("*.yaml")]
    names = set()
    for text in texts:
        for name in re.findall(r"ridgeserve_[a-z_]+", text):
            names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    names.discard("ridgeserve_epp")  # a Kubernetes object, not a metric
    return names


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exported_metrics(server, repo):
    port = free_port()
    process = subprocess.Popen([server, "serve", "--model", str(repo / "assets" / "default-model"),
                                "--http-port", str(port), "--threads", "1", "--slots", "2"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("the server did not answer /metrics")
    finally:
        process.terminate()
        process.wait(timeout=60)
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
    return names


def check_with_tools(repo):
    """kubectl kustomize, the Kubernetes schemas and hadolint from .tools/ (install_deps.sh puts
    them there from PyPI; without them these checks are skipped, and said so)."""
    tools = repo / ".tools" / "bin"
    kubectl, validate, hadolint = (tools / "kubectl", tools / "kubernetes-validate",
                                   tools / "hadolint")
    if not (kubectl.exists() and validate.exists() and hadolint.exists()):
        print("deploy validators not in .tools/ (scripts/install_deps.sh installs them from "
              "PyPI): kustomize rendering, schema validation and Dockerfile lint skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for target in ("overlays/cpu", "overlays/gpu", "gateway"):
            rendered = pathlib.Path(tmp) / (target.replace("/", "_") + ".yaml")
            run = subprocess.run([str(kubectl), "kustomize", str(repo / "deploy" / "kubernetes" /
                                                                 target)],
                                 capture_output=True, text=True)
            check(run.returncode == 0, f"kubectl kustomize {target}: {run.stderr}")
            rendered.write_text(run.stdout)
            # Strict: unknown fields are errors. CRDs (ServiceMonitor, InferencePool) have no
            # bundled schema: a warning, not a failure.
            run = subprocess.run([str(validate), "--strict", "--quiet", str(rendered)],
                                 capture_output=True, text=True)
            check(run.returncode == 0, f"kubernetes-validate {target}: {run.stdout}{run.stderr}")
    docker = repo / "deploy" / "docker"
    run = subprocess.run([str(hadolint), str(docker / "Dockerfile.cpu"),
                          str(docker / "Dockerfile.cuda")], capture_output=True, text=True)
    check(run.returncode == 0, f"hadolint: {run.stdout}{run.stderr}")


def check_docker(repo):
    docker = repo / "deploy" / "docker"
    for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
        text = (docker / name).read_text()
        stages = re.split(r"^FROM ", text, flags=re.M)[1:]
        check(len(stages) == 2, f"{name}: not a build and a runtime stage")
        check("scripts/install_deps.sh" in stages[0], f"{name}: the build stage does not run "
              "scripts/install_deps.sh")
        check("apt-get" not in text, f"{name}: installs packages beside scripts/install_deps.sh")
        check(re.search(r"^USER (?!root|0\b)", stages[-1], re.M) is not None,
              f"{name}: the runtime stage runs as root")
        check("HEALTHCHECK" in stages[-1] and "/health" in stages[-1],
              f"{name}: no HEALTHCHECK on /health")
    with tempfile.TemporaryDirectory() as tmp:
        fake = pathlib.Path(tmp) / "ridgeserve"
        fake.write_text('#!/bin/sh\nprintf "%s\\n" "$*"\n')
        fake.chmod(0o755)
        env = {"PATH": "/usr/bin:/bin", "RIDGESERVE_ENTRYPOINT_BINARY": str(fake),
               "RIDGESERVE_SLOTS": "32", "RIDGESERVE_HTTP_PORT": "8080",
               "RIDGESERVE_IGNORE_EOS": "true"}
        run = subprocess.run([str(docker / "entrypoint.sh"), "--http-port", "7000"], env=env,
                             capture_output=True, text=True)
        line = run.stdout.strip()
        check(run.returncode == 0 and line.startswith("serve --http-port 7000"),
              f"entrypoint: {line!r} {run.stderr}")
        check("--slots 32" in line and "--ignore-eos" in line and "8080" not in line
              and "--host 0.0.0.0" in line and "--model /opt/ridgeserve/default-model" in line,
              f"entrypoint: {line!r}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--server", required=True)
    args = parser.parse_args()
    repo = pathlib.Path(args.repo).resolve()
    deploy = repo / "deploy"
    check_prometheus(deploy)
    documents = check_kustomizations(deploy)
    check_kubernetes(deploy, documents)
    check_dashboard(deploy)
    named = named_metrics(deploy)
    exported = exported_metrics(args.server, repo)
    missing = sorted(named - exported)
    check(not missing, f"named in deploy/ but not exported: {missing}")
    print(f"{len(named)} metrics named in deploy/, all exported" if not missing else "")
    check_docker(repo)
    check_with_tools(repo)
    print("FAILED" if failures else "PASSED", f"({len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
