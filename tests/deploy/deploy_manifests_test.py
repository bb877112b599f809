#!/usr/bin/env python3
"""Checks the deployment files against the daemon itself (docs/deployment.md).

One source of truth: the flag names and defaults come from `mlaserve --helpfull`, the metric
names from a running `mlaserve serve`'s GET /metrics. The test
  - renders every kustomization under deploy/k8s with `kubectl kustomize` and lints the YAML
    with yamllint (the repository's .yamllint);
  - parses the rendered objects: every flag in the container args exists; container ports,
    probe ports, Service ports, the InferencePool and the endpoint picker agree with --port,
    --http_port (the pool targets it) and --metrics_port; the grace period covers preStop +
    --drain_timeout_s; the security context,
    /dev/shm, rollout strategy, GPU request and model volume are as docs/deployment.md says;
  - checks that the Dockerfile's build stages run scripts/bootstrap.sh and scripts/build.sh and
    that EXPOSE and ENTRYPOINT match the daemon;
  - stages the runtime image's files with scripts/stage-runtime.sh and runs the staged binary;
  - starts the daemon, reads /metrics for every metric name the manifests use (autoscaler,
    adapter rules, endpoint picker), then sends SIGTERM and expects a drained exit 0.

Usage: deploy_manifests_test.py --mlaserve=BIN --source_dir=DIR [--kubectl=K] [--yamllint=Y]
Needs python3-yaml, yamllint and kubectl (kubernetes-client); scripts/bootstrap.sh installs them.
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

try:
    import yaml
except ImportError:
    sys.exit("deploy_manifests_test: the Python module `yaml` is missing; install python3-yaml "
             "(scripts/bootstrap.sh) and run with the system python3")

ARGS = None
FLAGS = None      # flag name -> default (strings, as --helpfull prints them)
RENDERED = {}     # kustomization dir (relative to deploy/k8s) -> list of objects

INFERENCE_SERVICE = "mlaserve.v1.Inference"
POD_LABEL = {"app.kubernetes.io/name": "mlaserve"}
# Flags the manifests and the Dockerfile rely on (contracts: command line).
REQUIRED_FLAGS = ["host", "port", "metrics_host", "metrics_port", "drain_timeout_s", "model",
                  "backend", "threads", "log_format"]


def read_flags(binary):
    """Parses `mlaserve --helpfull` into {name: default}."""
    out = subprocess.run([binary, "--helpfull"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60).stdout
    flags = {}
    for m in re.finditer(r"--([A-Za-z0-9_]+) \((.*?)\);\s+default: (.*?);", out, re.S):
        flags[m.group(1)] = m.group(3).strip().strip('"')
    if not flags:
        sys.exit("deploy_manifests_test: no flags parsed from `%s --helpfull`:\n%s" % (binary, out))
    return flags


def default(name):
    """The daemon's default of --name; fails the calling test when the flag does not exist."""
    if name not in FLAGS:
        raise AssertionError("mlaserve --helpfull has no --%s" % name)
    return FLAGS[name]


def source(path):
    with open(os.path.join(ARGS.source_dir, path)) as f:
        return f.read()


def kustomization_dirs():
    root = os.path.join(ARGS.source_dir, "deploy/k8s")
    found = glob.glob(os.path.join(root, "**/kustomization.yaml"), recursive=True)
    return sorted(os.path.relpath(os.path.dirname(p), root) for p in found)


def render(rel):
    if rel not in RENDERED:
        path = os.path.join(ARGS.source_dir, "deploy/k8s", rel)
        r = subprocess.run([ARGS.kubectl, "kustomize", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError("kubectl kustomize %s failed:\n%s" % (rel, r.stderr))
        RENDERED[rel] = [d for d in yaml.safe_load_all(r.stdout) if d]
    return RENDERED[rel]


def find(objects, kind, name=None):
    return [o for o in objects
            if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects, kind, name=None):
    found = find(objects, kind, name)
    assert len(found) == 1, "expected one %s %s, found %d" % (kind, name or "", len(found))
    return found[0]


def parse_args(args):
    """Container args to (subcommand, {flag: value}); every argument after it is --name=value."""
    flags = {}
    for a in args[1:]:
        m = re.fullmatch(r"--([A-Za-z0-9_]+)=(.*)", a)
        assert m, "container argument %r is not --name=value" % a
        flags[m.group(1)] = m.group(2)
    return args[0], flags


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_number(text):
    return float(text)


def cpu_quantity(q):
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


class FlagsTest(unittest.TestCase):
    def test_required_flags_exist(self):
        missing = [f for f in REQUIRED_FLAGS if f not in FLAGS]
        self.assertEqual(missing, [], "mlaserve --helpfull lacks flags the deployment uses: --"
                         + ", --".join(missing))


class RenderAndLintTest(unittest.TestCase):
    def test_every_kustomization_renders(self):
        dirs = kustomization_dirs()
        for expected in ["base", "base/workload", "overlays/cpu", "overlays/gpu",
                         "inference-gateway", "prometheus-adapter"]:
            self.assertIn(expected, dirs)
        for rel in dirs:
            with self.subTest(kustomization=rel):
                self.assertTrue(render(rel))

    def test_yamllint(self):
        config = os.path.join(ARGS.source_dir, ".yamllint")
        self.assertTrue(os.path.exists(config))
        r = subprocess.run([ARGS.yamllint, "--strict", "-c", config,
                            os.path.join(ARGS.source_dir, "deploy/k8s"), config],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)


class ServerManifestTest(unittest.TestCase):
    """The mlaserve Deployment and its Services in every variant that carries them."""
    VARIANTS = ["base", "base/workload", "overlays/cpu", "overlays/gpu"]

    def variants(self):
        for rel in self.VARIANTS:
            objects = render(rel)
            deployment = one(objects, "Deployment", "mlaserve")
            pod = deployment["spec"]["template"]["spec"]
            container = [c for c in pod["containers"] if c["name"] == "mlaserve"][0]
            command, flags = parse_args(container["args"])
            yield rel, objects, deployment, pod, container, command, flags

    def effective(self, flags, name):
        return flags[name] if name in flags else default(name)

    def test_args_name_real_flags(self):
        for rel, _, _, _, container, command, flags in self.variants():
            with self.subTest(variant=rel):
                self.assertEqual(command, "serve")
                unknown = [f for f in flags if f not in FLAGS]
                self.assertEqual(unknown, [], "flags not in mlaserve --helpfull")

    def test_ports_agree_with_the_daemon(self):
        grpc_port = int(default("port"))
        metrics_port = int(default("metrics_port"))
        http_port = int(default("http_port"))
        for rel, objects, _, _, container, _, flags in self.variants():
            with self.subTest(variant=rel):
                # The manifests may spell the ports out, but only as the daemon's defaults: the
                # image's EXPOSE, the Service and the gateway all assume them.
                self.assertEqual(int(self.effective(flags, "port")), grpc_port)
                self.assertEqual(int(self.effective(flags, "metrics_port")), metrics_port)
                self.assertEqual(int(self.effective(flags, "http_port")), http_port)
                ports = {p["name"]: p["containerPort"] for p in container["ports"]}
                self.assertEqual(ports, {"grpc": grpc_port, "http": http_port,
                                         "metrics": metrics_port})
                for probe in ["startupProbe", "readinessProbe", "livenessProbe"]:
                    self.assertEqual(container[probe]["grpc"]["port"], grpc_port, probe)
                self.assertEqual(container["startupProbe"]["grpc"]["service"], INFERENCE_SERVICE)
                self.assertEqual(container["readinessProbe"]["grpc"]["service"],
                                 INFERENCE_SERVICE)
                self.assertIn(container["livenessProbe"]["grpc"].get("service", ""),
                              ["", INFERENCE_SERVICE])
                for host in ["host", "metrics_host"]:
                    self.assertIn(self.effective(flags, host), ["0.0.0.0", "::", "[::]"],
                                  "--%s must accept connections from outside the pod" % host)
                service = one(objects, "Service", "mlaserve")
                sports = {p["name"]: p for p in service["spec"]["ports"]}
                self.assertEqual(sports["grpc"]["port"], grpc_port)
                self.assertEqual(sports["metrics"]["port"], metrics_port)
                self.assertEqual(sports["http"]["port"], http_port)
                for p in service["spec"]["ports"]:
                    self.assertIn(p["targetPort"], ports)
                for svc in find(objects, "Service"):
                    self.assertTrue(set(svc["spec"]["selector"].items())
                                    <= set(POD_LABEL.items()))

    def test_grace_period_covers_the_drain(self):
        for rel, _, _, pod, container, _, flags in self.variants():
            with self.subTest(variant=rel):
                drain = as_number(self.effective(flags, "drain_timeout_s"))
                self.assertEqual(drain, as_number(default("drain_timeout_s")))
                pre_stop = 0
                hook = container.get("lifecycle", {}).get("preStop", {})
                if "exec" in hook:
                    argv = hook["exec"]["command"]
                    self.assertEqual(argv[0], "sleep")
                    pre_stop = float(argv[1])
                elif "sleep" in hook:
                    pre_stop = float(hook["sleep"]["seconds"])
                grace = pod["terminationGracePeriodSeconds"]
                self.assertGreaterEqual(grace, pre_stop + drain + 5,
                                        "SIGKILL would cut the drain short")
                live = container["livenessProbe"]
                self.assertGreater(live["periodSeconds"] * live["failureThreshold"], drain,
                                   "liveness would restart a draining pod")
                start = container["startupProbe"]
                self.assertGreaterEqual(start["periodSeconds"] * start["failureThreshold"], 300,
                                        "startup probe too short for load + graph capture")

    def test_rollout_and_security(self):
        for rel, objects, deployment, pod, container, _, flags in self.variants():
            with self.subTest(variant=rel):
                strategy = deployment["spec"]["strategy"]
                self.assertEqual(strategy["rollingUpdate"]["maxUnavailable"], 0)
                self.assertGreaterEqual(strategy["rollingUpdate"]["maxSurge"], 1)
                self.assertTrue(pod["securityContext"]["runAsNonRoot"])
                self.assertNotEqual(pod["securityContext"]["runAsUser"], 0)
                sc = container["securityContext"]
                self.assertTrue(sc["readOnlyRootFilesystem"])
                self.assertFalse(sc["allowPrivilegeEscalation"])
                self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
                mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
                volumes = {v["name"]: v for v in pod["volumes"]}
                self.assertEqual(volumes[mounts["/dev/shm"]]["emptyDir"]["medium"], "Memory")
                self.assertEqual(deployment["spec"]["selector"]["matchLabels"], POD_LABEL)
                pdb = one(objects, "PodDisruptionBudget")
                self.assertEqual(pdb["spec"]["selector"]["matchLabels"], POD_LABEL)
                # --threads follows the CPU limit (0 would start one worker per node core).
                cpu_limit = container["resources"].get("limits", {}).get("cpu")
                if cpu_limit is not None:
                    self.assertEqual(float(self.effective(flags, "threads")),
                                     cpu_quantity(cpu_limit))

    def test_overlays(self):
        for rel, objects, _, pod, container, _, flags in self.variants():
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            volumes = {v["name"]: v for v in pod["volumes"]}
            limits = container["resources"].get("limits", {})
            with self.subTest(variant=rel):
                if rel == "overlays/gpu":
                    self.assertEqual(flags.get("backend"), "cuda")
                    self.assertEqual(str(limits.get("nvidia.com/gpu")), "1")
                    model = flags["model"]
                    owner = [p for p in mounts if model == p or model.startswith(p + "/")]
                    self.assertEqual(len(owner), 1, "--model is not on a mounted volume")
                    claim = volumes[mounts[owner[0]]]["persistentVolumeClaim"]["claimName"]
                    one(objects, "PersistentVolumeClaim", claim)
                elif rel == "overlays/cpu":
                    self.assertEqual(flags.get("backend"), "cpu")
                    self.assertNotIn("model", flags, "the cpu overlay serves the embedded model")
                    self.assertNotIn("nvidia.com/gpu", limits)
                    self.assertEqual(find(objects, "PersistentVolumeClaim"), [])
                    self.assertEqual(find(objects, "ServiceMonitor"), [])

    def test_monitoring_and_autoscaling(self):
        adapter = one(render("prometheus-adapter"), "ConfigMap")
        rules = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
        exposed = {r["name"]["as"] for r in rules}
        for rel in ["base", "overlays/gpu"]:
            objects = render(rel)
            with self.subTest(variant=rel):
                monitor = one(objects, "ServiceMonitor", "mlaserve")
                selected = [s for s in find(objects, "Service")
                            if set(monitor["spec"]["selector"]["matchLabels"].items())
                            <= set(s["metadata"].get("labels", {}).items())]
                self.assertEqual(len(selected), 1, "the ServiceMonitor must select one Service")
                names = {p["name"] for p in selected[0]["spec"]["ports"]}
                for endpoint in monitor["spec"]["endpoints"]:
                    self.assertIn(endpoint["port"], names)
                    self.assertEqual(endpoint["path"], "/metrics")
                hpa = one(objects, "HorizontalPodAutoscaler", "mlaserve")
                self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], "mlaserve")
                for metric in hpa["spec"]["metrics"]:
                    self.assertEqual(metric["type"], "Pods")
                    self.assertIn(metric["pods"]["metric"]["name"], exposed)
                self.assertNotIn("replicas", one(objects, "Deployment")["spec"],
                                 "the autoscaler owns the replica count")


class InferenceGatewayTest(unittest.TestCase):
    def test_pool_and_picker(self):
        objects = render("inference-gateway")
        pool = one(objects, "InferencePool", "mlaserve")
        self.assertEqual(pool["apiVersion"].split("/")[0], "inference.networking.x-k8s.io")
        # The EPP routes OpenAI HTTP requests: the pool targets the HTTP API.
        self.assertEqual(pool["spec"]["targetPortNumber"], int(default("http_port")))
        self.assertEqual(pool["spec"]["selector"], POD_LABEL)
        pod_labels = one(render("overlays/gpu"), "Deployment")["spec"]["template"]["metadata"][
            "labels"]
        self.assertTrue(set(pool["spec"]["selector"].items()) <= set(pod_labels.items()))
        ref = pool["spec"]["extensionRef"]
        service = one(objects, "Service", ref["name"])
        self.assertIn(ref["portNumber"], [p["port"] for p in service["spec"]["ports"]])
        epp = one(objects, "Deployment", ref["name"])
        args = dict(a[2:].split("=", 1) for a in epp["spec"]["template"]["spec"]["containers"][0][
            "args"])
        self.assertEqual(args["pool-name"], pool["metadata"]["name"])
        self.assertEqual(int(args["grpc-port"]), ref["portNumber"])
        self.assertEqual(int(args["model-server-metrics-port"]), int(default("metrics_port")))
        self.assertEqual(args["model-server-metrics-path"], "/metrics")
        self.assertEqual(args["total-queued-requests-metric"], "mlaserve_num_requests_waiting")
        self.assertEqual(args["total-running-requests-metric"], "mlaserve_num_requests_running")
        self.assertEqual(args["kv-cache-usage-percentage-metric"], "mlaserve_kv_cache_usage_perc")
        config = yaml.safe_load(one(objects, "ConfigMap")["data"]["epp-config.yaml"])
        types = {p["type"] for p in config["plugins"]}
        self.assertTrue({"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer",
                         "max-score-picker"} <= types)
        route = one(objects, "HTTPRoute")
        backend = route["spec"]["rules"][0]["backendRefs"][0]
        self.assertEqual((backend["kind"], backend["name"]), ("InferencePool", "mlaserve"))
        self.assertEqual(route["spec"]["rules"][0]["matches"][0]["path"]["value"], "/v1/")


class DockerfileTest(unittest.TestCase):
    def stages(self):
        """[(name, base, [instructions])]; instructions are (KEYWORD, text), continuations joined."""
        text = source("Dockerfile")
        text = re.sub(r"\\\n", " ", text)
        stages = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            keyword, _, rest = line.partition(" ")
            keyword = keyword.upper()
            if keyword == "FROM":
                m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
                stages.append((m.group(2), m.group(1), []))
            elif stages:
                stages[-1][2].append((keyword, rest.strip()))
        return stages

    def test_build_stages_use_the_ci_scripts(self):
        stages = {name: (base, ins) for name, base, ins in self.stages()}
        for name in ["build", "build-cpu"]:
            self.assertIn(name, stages)
            runs = " && ".join(t for k, t in stages[name][1] if k == "RUN")
            self.assertIn("scripts/bootstrap.sh", runs, name)
            self.assertIn("scripts/build.sh", runs, name)
            self.assertIn("scripts/stage-runtime.sh", runs, name)
        self.assertIn("-devel-", stages["build"][0])
        self.assertIn("bookworm", source("Dockerfile"))
        bootstrap = source("scripts/bootstrap.sh")
        self.assertIn("--build-only", bootstrap)

    def test_runtime_stages(self):
        stages = self.stages()
        names = [s[0] for s in stages]
        self.assertEqual(names[-1], "cuda", "the CUDA runtime is the default (last) target")
        self.assertIn("cpu", names)
        expected = {int(default("port")), int(default("http_port")), int(default("metrics_port"))}
        for name, base, ins in stages:
            if name not in ["cuda", "cpu"]:
                continue
            with self.subTest(stage=name):
                if name == "cuda":
                    self.assertRegex(base, r"^nvidia/cuda:\$\{CUDA_VERSION\}-(base|runtime)-")
                exposed = set()
                for k, t in ins:
                    if k == "EXPOSE":
                        exposed |= {int(p.split("/")[0]) for p in t.split()}
                self.assertEqual(exposed, expected)
                entry = [t for k, t in ins if k == "ENTRYPOINT"]
                self.assertEqual([json.loads(e) for e in entry], [["mlaserve"]])
                user = [t for k, t in ins if k == "USER"]
                self.assertEqual(len(user), 1)
                self.assertNotIn(user[0].split(":")[0], ["0", "root"])
                copies = [t for k, t in ins if k == "COPY"]
                self.assertTrue(all(c.startswith("--from=") for c in copies),
                                "the runtime stage copies only from its build stage")
        text = source("Dockerfile")
        for arg in ["CUDA_VERSION", "CUDA_ARCHITECTURES"]:
            self.assertRegex(text, r"(?m)^ARG %s=" % arg)
        self.assertTrue(os.path.exists(os.path.join(ARGS.source_dir, ".dockerignore")))

    def test_staged_runtime_runs(self):
        """What the runtime stage copies is enough to run the binary."""
        build_dir = os.path.dirname(os.path.dirname(os.path.abspath(ARGS.mlaserve)))
        with tempfile.TemporaryDirectory() as dest:
            subprocess.run([os.path.join(ARGS.source_dir, "scripts/stage-runtime.sh"), build_dir,
                            dest], check=True, timeout=120)
            staged = os.path.join(dest, "usr/local/bin/mlaserve")
            model = dest + os.path.realpath(ARGS.source_dir) + "/models/mlaserve-tiny-moe"
            self.assertTrue(os.path.exists(os.path.join(model, "config.json")))
            env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(dest, "usr/local/lib/mlaserve"))
            r = subprocess.run([staged, "--helpfull"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=60)
            self.assertIn("--drain_timeout_s", r.stdout)


class LiveDaemonTest(unittest.TestCase):
    """The metric names the manifests rely on are served, and SIGTERM drains to exit 0."""

    def manifest_metric_names(self):
        names = set()
        for rel in ["overlays/gpu"]:
            for hpa in find(render(rel), "HorizontalPodAutoscaler"):
                names |= {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]}
        adapter = one(render("prometheus-adapter"), "ConfigMap")
        for rule in yaml.safe_load(adapter["data"]["config.yaml"])["rules"]:
            names.add(re.match(r"'?([a-z_:]+)", rule["seriesQuery"]).group(1))
        epp = one(render("inference-gateway"), "Deployment")
        for a in epp["spec"]["template"]["spec"]["containers"][0]["args"]:
            if a.endswith("-metric=") or "-metric=" not in a:
                continue
            names.add(a.split("=", 1)[1])
        return names

    def test_metrics_and_drain(self):
        for f in ["metrics_port", "metrics_host"]:
            self.assertIn(f, FLAGS, "mlaserve --helpfull has no --%s" % f)
        names = self.manifest_metric_names()
        self.assertTrue({"mlaserve_num_requests_waiting", "mlaserve_num_requests_running",
                         "mlaserve_kv_cache_usage_perc"} <= names)
        grpc_port, metrics_port, http_port = free_port(), free_port(), free_port()
        cmd = [ARGS.mlaserve, "serve", "--host=127.0.0.1", "--port=%d" % grpc_port,
               "--metrics_host=127.0.0.1", "--metrics_port=%d" % metrics_port, "--threads=1",
               "--http_port=%d" % http_port, "--drain_timeout_s=5"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            body, deadline = None, time.time() + 180
            while time.time() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port,
                                                timeout=5) as resp:
                        body = resp.read().decode()
                    if "mlaserve_kv_cache_usage_perc" in body:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            self.assertIsNotNone(body, "no /metrics from: " + shlex.join(cmd))
            served = set(re.findall(r"(?m)^([a-z_:][a-z0-9_:]*)(?:\{| )", body))
            self.assertEqual(sorted(names - served), [], "metric names the manifests use but "
                             "the daemon does not serve")
            # The pool's port answers the OpenAI API the gateway routes, once the model is
            # loaded (/metrics answers during the load; /v1/models says 503 until SERVING).
            models, deadline = None, time.time() + 120
            while models is None and time.time() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % http_port,
                                                timeout=5) as resp:
                        models = json.load(resp)
                except OSError:
                    time.sleep(0.5)
            self.assertIsNotNone(models, "no /v1/models from: " + shlex.join(cmd))
            self.assertEqual(models["object"], "list")
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=60), 0)
        finally:
            if proc.poll() is None:
                proc.kill()
            out = proc.communicate()[0]
            if sys.exc_info()[0] is not None:
                print(out[-4000:], file=sys.stderr)


def main():
    global ARGS, FLAGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--mlaserve", required=True)
    parser.add_argument("--source_dir", required=True)
    parser.add_argument("--kubectl", default=shutil.which("kubectl"))
    parser.add_argument("--yamllint", default=shutil.which("yamllint"))
    ARGS, rest = parser.parse_known_args()
    for tool, package in [("kubectl", "kubernetes-client"), ("yamllint", "yamllint")]:
        if not getattr(ARGS, tool):
            sys.exit("deploy_manifests_test: `%s` not found; install the Debian package %s "
                     "(scripts/bootstrap.sh)" % (tool, package))
    FLAGS = read_flags(ARGS.mlaserve)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
